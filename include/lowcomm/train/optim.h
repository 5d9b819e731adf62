// Optimizers (SGD with momentum/Nesterov/weight decay, AdamW) and learning-rate schedules
// (constant, step, cosine; each with linear warm-up) built from the config.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "lowcomm/train/config.h"

namespace lowcomm::train {

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const TrainConfig& c, std::vector<torch::Tensor> params);

class LrSchedule {
 public:
  LrSchedule(const TrainConfig& c, int64_t total_steps);
  // Learning rate for optimizer step `step` (0-based).
  double at(int64_t step) const;
  void apply(torch::optim::Optimizer& opt, int64_t step) const;

 private:
  std::string name_;
  double base_, min_, gamma_;
  int64_t warmup_, step_size_, total_;
};

}  // namespace lowcomm::train
