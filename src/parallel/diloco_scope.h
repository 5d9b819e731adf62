// DiLoCo's scope (`diloco.scope`, private to the parallel layer): the ranks form replica groups
// (every rank alone, each node, or each site); inside a group an inner DDP keeps the members
// identical, across the groups the outer method syncs. Each member of a group carries its share of
// the pseudo-gradient to the members with the same index in the other groups (`cross`), so
// every byte between groups leaves once per group, and the group then shares the result.
#pragma once

#include <memory>
#include <string>

#include "lowcomm/comm/communicator.h"

namespace lowcomm::parallel {

struct DilocoGroups {
  std::shared_ptr<comm::Communicator> world;      // every rank (a split): model broadcast, replica checks
  std::shared_ptr<comm::Communicator> cross;      // this member index in every group (= world for "world")
  std::shared_ptr<comm::Communicator> group;      // this rank's group, sharing outer results; null when alone
  std::shared_ptr<comm::Communicator> group_ddp;  // the inner DDP's; null when alone
  int member = 0;      // index in the group (rank order)
  int group_size = 1;
  int groups = 1;
};

// Collective over `world`. scope "world": every rank is its own group. "site": the ranks'
// declared sites (LOWCOMM_SITE, Topology::site_of); "node": their nodes (Topology::node_of).
// ConfigError naming diloco.scope when a rank declares no site, when there is only one group, or
// when the groups differ in size (the cross communicators pair members by index).
DilocoGroups makeDilocoGroups(comm::Communicator& world, const std::string& scope);

}  // namespace lowcomm::parallel
