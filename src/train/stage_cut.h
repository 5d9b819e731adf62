// Where a run cuts its pipeline stages (parallel.balance; private to lowcomm_train).
//
// Contract:
// - cutStages: collective over `world`. pp = 1 (or no pipeline): one stage, nothing measured.
//   The units are cut into pp x parallel.virtual_stages chunks (pp without interleaving).
//   "params": stageBounds over each unit's parameter count. "time": stageBounds over each unit's
//   forward + backward time, measured on world rank 0 at a micro-batch of data.batch_size x tp x
//   pp / micro_batches sequences (stage_balance.h) — unless `resuming` from the latest checkpoint
//   in `ckpt_dir`: its recorded boundaries are kept (a resumed run's shards must match the
//   checkpoint's; timings differ between runs), and a checkpoint that recorded none (written
//   before they were) was cut by parameters. A checkpoint cut into another number of chunks:
//   ConfigError naming parallel.virtual_stages.
// - checkResumedCut: ConfigError naming parallel.balance when the checkpoint `file` recorded other
//   boundaries than `bounds`, parallel.virtual_stages when it recorded another number of chunks.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "lowcomm/comm/communicator.h"
#include "lowcomm/nn/models.h"
#include "lowcomm/train/config.h"

namespace lowcomm::train {

struct StageCut {
  std::vector<int> bounds;             // ShardedModel::boundaries(); empty when pp = 1
  std::vector<int64_t> unit_weights;   // what the cut balanced (empty: kept from a checkpoint)
  std::string weight_unit;             // "parameters" | "us" | "checkpoint"
  nlohmann::json json(const std::string& balance) const;
};

StageCut cutStages(const TrainConfig& cfg, const nn::Model& full, comm::Communicator& world, int pp,
                   const std::string& ckpt_dir, bool resuming);

void checkResumedCut(const std::string& file, const std::vector<int>& bounds);

}  // namespace lowcomm::train
