// The process grid of hybrid parallelism: world = dp x pp x tp ranks, one communicator per axis.
//
// Contract:
// - Rank layout: `order` names the axes from the fastest-varying to the slowest (Megatron's
//   convention), a permutation of "tp", "dp", "pp" joined by '-'. The default "tp-dp-pp" is
//   Megatron's: rank = (pp_rank * dp + dp_rank) * tp + tp_rank, so tensor-parallel groups are runs of
//   consecutive ranks and a launcher that places consecutive ranks on one node (ours does) keeps the
//   chattiest axis inside a node and spreads data parallelism across nodes. "dp-tp-pp" puts the
//   data-parallel replicas next to each other instead (tensor parallelism across nodes), "pp-tp-dp"
//   the pipeline stages, and so on.
// - tp_comm holds the tp ranks of one model replica's stage, dp_comm the dp replicas of one
//   (pp_rank, tp_rank) shard, pp_comm the pp stages of one (dp_rank, tp_rank) column; their ranks
//   are tp_rank, dp_rank and pp_rank. An axis of size 1 gets a one-rank communicator, except that
//   with tp = pp = 1 nothing is split: dp_comm is `world` itself and tp_comm, pp_comm are null
//   (a data-parallel run is unchanged, down to its byte counts).
// - The tensor- and pipeline-parallel communicators label their traffic "tp" and "pp"; the
//   communicators share the world's traffic meter.
// - Collective over `world`; ConfigError naming parallel.tp / parallel.pp when tp * pp does not
//   divide the world size or a size is < 1, naming parallel.order when it is not such a permutation.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "lowcomm/comm/communicator.h"

namespace lowcomm::parallel {

struct Grid {
  int dp = 1, tp = 1, pp = 1;
  int dp_rank = 0, tp_rank = 0, pp_rank = 0;
  std::string order = "tp-dp-pp";
  std::shared_ptr<comm::Communicator> dp_comm, tp_comm, pp_comm;
};

inline constexpr const char* kDefaultGridOrder = "tp-dp-pp";

// The axes of `order`, fastest first (ConfigError naming parallel.order unless a permutation of tp, dp, pp).
std::array<std::string, 3> gridAxes(const std::string& order);

Grid makeGrid(const std::shared_ptr<comm::Communicator>& world, int tp, int pp = 1,
              const std::string& order = kDefaultGridOrder);

inline constexpr const char* kTensorParallelPhase = "tp";
inline constexpr const char* kPipelineParallelPhase = "pp";

}  // namespace lowcomm::parallel
