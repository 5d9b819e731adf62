// Which parameters of `gpt` are split over the tensor-parallel ranks, and how (private to
// lowcomm_parallel): one table (layoutOf) used both to cut the shards out of the full model and
// to gather them back. Names follow src/nn/gpt.cpp.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "lowcomm/comm/communicator.h"

namespace lowcomm::parallel::gpt_shard {

// How a parameter of the full model is split over T ranks.
enum class Layout {
  replicated,
  rows,      // rank r: rows [r n/T, (r+1) n/T)
  cols,      // rank r: columns [r n/T, (r+1) n/T)
  qkv_rows,  // rows of the fused [Q; K; V]: rank r gets rows block r of each of Q, K and V
};

bool endsWith(const std::string& s, const std::string& tail);

// The layout of the full model's parameter `name`.
Layout layoutOf(const std::string& name);

// Rank r's shard of `full` (of T = t ranks); `full` itself when replicated.
torch::Tensor shardOf(Layout l, const torch::Tensor& full, int64_t t, int64_t r);

// The full tensor from every rank's shard (collective over tp for split layouts).
torch::Tensor gathered(Layout l, const torch::Tensor& shard, const torch::IntArrayRef full_shape, comm::Communicator& tp);

}  // namespace lowcomm::parallel::gpt_shard
