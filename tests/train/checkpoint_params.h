// The parameters stored in a checkpoint file, loaded into a fresh model of the config's kind
// (28x28x1 inputs, 10 classes), for comparing two runs bit for bit.
#pragma once

#include <string>
#include <vector>

#include "lowcomm/nn/models.h"
#include "lowcomm/train/checkpoint.h"
#include "lowcomm/train/config.h"
#include "lowcomm/train/optim.h"

namespace lowcomm::test {

inline std::vector<torch::Tensor> checkpointParams(const std::string& file, const train::TrainConfig& c) {
  auto model = nn::makeModel({c.model.name, 1, 28, 10});
  auto opt = train::makeOptimizer(c, model->parameters());
  parallel::AllreduceHook hook;
  train::loadCheckpoint(file, *model, *opt, hook);
  return model->parameters();
}

}  // namespace lowcomm::test
