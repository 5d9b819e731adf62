// DiLoCo's replica groups (contract in diloco_scope.h).
#include "diloco_scope.h"

#include <map>

#include "lowcomm/base/error.h"

namespace lowcomm::parallel {

namespace {

// The group of every rank for `scope`, numbered as the topology numbers them.
std::vector<int> groupOfRanks(const comm::Communicator& world, const std::string& scope) {
  const auto& topo = world.topology();
  if (scope == "node") return topo.node_of;
  for (size_t r = 0; r < topo.site_of.size(); ++r)
    if (topo.site_of[r] < 0)
      throw ConfigError("diloco.scope = \"site\": rank " + std::to_string(r) +
                        " declares no site (launch on a cluster with sites, or set LOWCOMM_SITE on every rank)");
  return topo.site_of;
}

}  // namespace

DilocoGroups makeDilocoGroups(comm::Communicator& world, const std::string& scope) {
  DilocoGroups g;
  const int rank = world.rank(), n = world.size();
  g.world = world.split(0, rank);
  if (scope == "world") {
    g.cross = g.world;
    g.groups = n;
    return g;
  }
  if (scope != "site" && scope != "node") throw ConfigError("diloco.scope = \"" + scope + "\": not world, site or node");
  const auto group_of = groupOfRanks(world, scope);
  std::map<int, int> sizes;
  for (int r = 0; r < n; ++r) ++sizes[group_of[r]];
  for (const auto& [id, size] : sizes)
    if (size != sizes.begin()->second)
      throw ConfigError("diloco.scope = \"" + scope + "\": " + scope + " " + std::to_string(id) + " has " +
                        std::to_string(size) + " ranks, " + scope + " " + std::to_string(sizes.begin()->first) +
                        " has " + std::to_string(sizes.begin()->second) + " (every " + scope + " needs the same number)");
  if (sizes.size() < 2)
    throw ConfigError("diloco.scope = \"" + scope + "\": all " + std::to_string(n) + " ranks are in one " + scope +
                      ", so there is nothing to sync across (use scope = \"world\", or strategy.name = \"ddp\")");
  for (int r = 0; r < rank; ++r) g.member += group_of[r] == group_of[rank];
  g.group_size = sizes.begin()->second;
  g.groups = static_cast<int>(sizes.size());
  g.cross = world.split(g.member, rank);
  if (g.group_size > 1) {  // every group has this size, so every rank takes the same branch
    g.group = world.split(group_of[rank], rank);
    g.group_ddp = world.split(group_of[rank], rank);
  }
  return g;
}

}  // namespace lowcomm::parallel
