// What a resumed run checks (private to lowcomm_train): that its checkpoints fit this config and
// that every rank loaded the same step and, where ranks train in step, the same weights.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lowcomm/comm/communicator.h"
#include "lowcomm/parallel/grid.h"
#include "lowcomm/train/checkpoint.h"
#include "lowcomm/train/config.h"

namespace lowcomm::train {

// Hash of the keys a resumed run must share with the run that wrote the checkpoint (model,
// data, batch, seed, world size, codec, the strategy's structure).
uint64_t resumeHash(const TrainConfig& c, int world);

// Hash of optimizer.lr and the schedule's shape (schedule.name, warmup_steps, step_size, gamma,
// min_lr): a resumed run continues the learning-rate curve of the run it resumes. Left out, on
// purpose: schedule.max_steps and schedule.epochs — extending a finished run is what a resume
// with a larger max_steps is for (a cosine curve then stretches over the new length). Kept apart
// from resumeHash so that checkpoints written before it existed still resume. Never 0.
uint64_t resumeScheduleHash(const TrainConfig& c);

// What a checkpoint records of its grid: {dp, tp, pp} and the order's axes, fastest first (tp 0, dp 1, pp 2).
std::vector<int64_t> gridRecord(const parallel::Grid& g);

// FNV-1a over every parameter's bytes (non-negative).
int64_t weightsHash(torch::nn::Module& model);

// Collective over `world`. Every rank must have loaded the checkpoint `latest` names, and the
// ranks of `replicas` (the communicator whose ranks train in step: the world under DDP, an AB
// group in AB's ab phase; null when no two ranks must agree) the same weights. A stale or
// foreign file is a DataError on every rank naming the rank (and, on that rank, `file`).
void checkResumedAlike(comm::Communicator& world, comm::Communicator* replicas, int64_t loaded_step, int64_t latest,
                       torch::nn::Module& model, const std::string& file);

// A checkpoint holds each rank's shard of its grid: ConfigError naming both grids when the
// checkpoint `file` was written under another {dp, tp, pp, order} than `now` (a checkpoint
// that recorded none passes).
void checkResumedGrid(const std::string& file, const std::vector<int64_t>& now);

// Collective over `world`: checks this rank's own checkpoint `file` (checkpoint directories may be
// per host: no rank reads another's file) against the grid `now` (checkResumedGrid) and, for a
// sharded model, the stage boundaries `*bounds` (checkResumedCut), then runs `load`. A failure on
// any rank is an error on every rank (that rank's own error there, ConfigError naming it elsewhere).
TrainState loadResumed(comm::Communicator& world, const std::string& file, const std::vector<int64_t>& now,
                       const std::vector<int>* bounds, const std::function<TrainState()>& load);

}  // namespace lowcomm::train
