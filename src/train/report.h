// The summary's accounting blocks (private to lowcomm_train): the codec's and the memory a rank
// holds.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "lowcomm/comm/communicator.h"
#include "lowcomm/compress/compressor.h"
#include "lowcomm/nn/models.h"
#include "lowcomm/parallel/strategy.h"
#include "lowcomm/train/config.h"

namespace lowcomm::train {

// This rank's codec accounting: raw gradient bytes against encoded bytes, codec time, and the
// auto policy's decisions. A strategy that rebuilds its DDP (AB-training) builds one compressor
// per rebuild: their counts are summed.
nlohmann::json compressionJson(const std::vector<std::shared_ptr<compress::Compressor>>& all, const TrainConfig& cfg);

// The process's peak resident set.
int64_t peakRssBytes();

// What this rank holds at the end of training, its peak activation memory (the caller's measure:
// heap growth over a forward, or a pipeline step's), and the largest peak resident set and
// activation memory over the ranks (collective: every rank calls it).
nlohmann::json memoryJson(comm::Communicator& world, nn::Model& model, torch::optim::Optimizer& opt,
                          const parallel::Strategy& strategy, int64_t activation_bytes);

}  // namespace lowcomm::train
