// What a resumed run checks (private to lowcomm_train): that its checkpoints fit this config and
// that every rank loaded the same step and, where ranks train in step, the same weights.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lowcomm/comm/communicator.h"
#include "lowcomm/train/config.h"

namespace lowcomm::train {

// Hash of the keys a resumed run must share with the run that wrote the checkpoint (model,
// data, batch, seed, world size, codec, the strategy's structure).
uint64_t resumeHash(const TrainConfig& c, int world);

// FNV-1a over every parameter's bytes (non-negative).
int64_t weightsHash(torch::nn::Module& model);

// Collective over `world`. Every rank must have loaded the checkpoint `latest` names, and the
// ranks of `replicas` (the communicator whose ranks train in step: the world under DDP, an AB
// group in AB's ab phase; null when no two ranks must agree) the same weights. A stale or
// foreign file is a DataError on every rank naming the rank (and, on that rank, `file`).
void checkResumedAlike(comm::Communicator& world, comm::Communicator* replicas, int64_t loaded_step, int64_t latest,
                       torch::nn::Module& model, const std::string& file);

// A checkpoint holds each rank's shard of its grid: ConfigError naming both grids when the
// checkpoint `rank0_file` was written under another {dp, tp, pp, order} than `now` (a checkpoint
// that recorded none passes).
void checkResumedGrid(const std::string& rank0_file, const std::vector<int64_t>& now);

}  // namespace lowcomm::train
