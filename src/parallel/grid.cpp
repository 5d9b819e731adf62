// The dp x pp x tp process grid: one split of the world per axis.
#include "lowcomm/parallel/grid.h"

#include <string>

#include "lowcomm/base/error.h"

namespace lowcomm::parallel {

Grid makeGrid(const std::shared_ptr<comm::Communicator>& world, int tp, int pp) {
  const int n = world->size();
  if (tp < 1) throw ConfigError("parallel.tp: must be >= 1, got " + std::to_string(tp));
  if (pp < 1) throw ConfigError("parallel.pp: must be >= 1, got " + std::to_string(pp));
  if (n % (tp * pp) != 0)
    throw ConfigError("parallel.tp = " + std::to_string(tp) + " x parallel.pp = " + std::to_string(pp) +
                      " does not divide the " + std::to_string(n) + " ranks of the world");
  Grid g;
  g.tp = tp, g.pp = pp, g.dp = n / (tp * pp);
  const int r = world->rank();
  g.tp_rank = r % tp;
  g.dp_rank = (r / tp) % g.dp;
  g.pp_rank = r / (tp * g.dp);
  if (tp == 1 && pp == 1) {
    g.dp_comm = world;
    return g;
  }
  g.tp_comm = world->split(r / tp, g.tp_rank);
  g.dp_comm = world->split(g.pp_rank * tp + g.tp_rank, g.dp_rank);
  g.pp_comm = world->split(g.dp_rank * tp + g.tp_rank, g.pp_rank);
  g.tp_comm->setPhase(kTensorParallelPhase);
  g.pp_comm->setPhase(kPipelineParallelPhase);
  return g;
}

}  // namespace lowcomm::parallel
