// The dp x pp x tp process grid: one split of the world per axis.
#include "lowcomm/parallel/grid.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "lowcomm/base/error.h"

namespace lowcomm::parallel {

std::array<std::string, 3> gridAxes(const std::string& order) {
  std::vector<std::string> parts;
  std::istringstream in(order);
  for (std::string part; std::getline(in, part, '-');) parts.push_back(part);
  auto sorted = parts;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != std::vector<std::string>{"dp", "pp", "tp"})
    throw ConfigError("parallel.order: '" + order +
                      "' is not the three axes tp, dp, pp joined by '-' from the fastest-varying rank to the slowest "
                      "(e.g. \"tp-dp-pp\", Megatron's)");
  return {parts[0], parts[1], parts[2]};
}

Grid makeGrid(const std::shared_ptr<comm::Communicator>& world, int tp, int pp, const std::string& order) {
  const auto axes = gridAxes(order);
  const int n = world->size();
  if (tp < 1) throw ConfigError("parallel.tp: must be >= 1, got " + std::to_string(tp));
  if (pp < 1) throw ConfigError("parallel.pp: must be >= 1, got " + std::to_string(pp));
  if (n % (tp * pp) != 0)
    throw ConfigError("parallel.tp = " + std::to_string(tp) + " x parallel.pp = " + std::to_string(pp) +
                      " does not divide the " + std::to_string(n) + " ranks of the world");
  Grid g;
  g.tp = tp, g.pp = pp, g.dp = n / (tp * pp);
  g.order = order;
  const int r = world->rank();
  std::map<std::string, std::pair<int, int*>> axis = {{"tp", {tp, &g.tp_rank}}, {"dp", {g.dp, &g.dp_rank}}, {"pp", {pp, &g.pp_rank}}};
  int stride = 1;
  for (const auto& a : axes) {  // fastest-varying first
    *axis[a].second = (r / stride) % axis[a].first;
    stride *= axis[a].first;
  }
  if (tp == 1 && pp == 1) {
    g.dp_comm = world;
    return g;
  }
  g.tp_comm = world->split(g.pp_rank * g.dp + g.dp_rank, g.tp_rank);
  g.dp_comm = world->split(g.pp_rank * tp + g.tp_rank, g.dp_rank);
  g.pp_comm = world->split(g.dp_rank * tp + g.tp_rank, g.pp_rank);
  g.tp_comm->setPhase(kTensorParallelPhase);
  g.pp_comm->setPhase(kPipelineParallelPhase);
  return g;
}

}  // namespace lowcomm::parallel
