// The process grid of hybrid parallelism: world = dp x pp x tp ranks, one communicator per axis.
//
// Contract:
// - Rank layout (Megatron's order): rank = (pp_rank * dp + dp_rank) * tp + tp_rank. Tensor-parallel
//   groups are runs of consecutive ranks, so a launcher that places consecutive ranks on one node
//   (ours does) keeps the chattiest axis inside a node and spreads data parallelism across nodes.
// - tp_comm holds the tp ranks of one model replica's stage, dp_comm the dp replicas of one
//   (pp_rank, tp_rank) shard, pp_comm the pp stages of one (dp_rank, tp_rank) column; their ranks
//   are tp_rank, dp_rank and pp_rank. An axis of size 1 gets a one-rank communicator, except that
//   with tp = pp = 1 nothing is split: dp_comm is `world` itself and tp_comm, pp_comm are null
//   (a data-parallel run is unchanged, down to its byte counts).
// - The tensor- and pipeline-parallel communicators label their traffic "tp" and "pp"; the
//   communicators share the world's traffic meter.
// - Collective over `world`; ConfigError naming parallel.tp / parallel.pp when tp * pp does not
//   divide the world size or a size is < 1.
#pragma once

#include <memory>

#include "lowcomm/comm/communicator.h"

namespace lowcomm::parallel {

struct Grid {
  int dp = 1, tp = 1, pp = 1;
  int dp_rank = 0, tp_rank = 0, pp_rank = 0;
  std::shared_ptr<comm::Communicator> dp_comm, tp_comm, pp_comm;
};

Grid makeGrid(const std::shared_ptr<comm::Communicator>& world, int tp, int pp = 1);

inline constexpr const char* kTensorParallelPhase = "tp";
inline constexpr const char* kPipelineParallelPhase = "pp";

}  // namespace lowcomm::parallel
