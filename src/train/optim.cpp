#include "lowcomm/train/optim.h"

#include <cmath>

#include "lowcomm/base/error.h"

namespace lowcomm::train {

namespace {

// SGD along sign(g): each gradient is replaced by its sign before LibTorch's SGD step, so weight
// decay (added to the gradient inside the step) stays proportional to the weights, as in DeMo's
// update p ← p − lr·(sign(g) + wd·p). The optimizer state and its checkpoint are SGD's.
class SignSgd : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  torch::Tensor step(LossClosure closure = nullptr) override {
    torch::NoGradGuard no_grad;
    for (auto& group : param_groups())
      for (auto& p : group.params())
        if (p.grad().defined()) p.mutable_grad().sign_();
    return torch::optim::SGD::step(std::move(closure));
  }
};

std::unique_ptr<torch::optim::Optimizer> build(const TrainConfig& c, std::vector<torch::Tensor> params) {
  const auto& o = c.optimizer;
  if (o.name == "sgd") {
    torch::optim::SGDOptions opts(o.lr);
    opts.momentum(o.momentum).nesterov(o.nesterov).weight_decay(o.weight_decay);
    if (o.nesterov && o.momentum <= 0) throw ConfigError("optimizer.nesterov needs optimizer.momentum > 0");
    if (o.sign) return std::make_unique<SignSgd>(std::move(params), opts);
    return std::make_unique<torch::optim::SGD>(std::move(params), opts);
  }
  if (o.name == "adamw") {
    torch::optim::AdamWOptions opts(o.lr);
    opts.betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay);
    return std::make_unique<torch::optim::AdamW>(std::move(params), opts);
  }
  throw ConfigError("optimizer.name '" + o.name + "' is unknown (expected sgd or adamw)");
}
}  // namespace

// LibTorch checks the options again (e.g. AdamW's betas): its message, without the C++
// backtrace, as a config error of the [optimizer] section.
std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const TrainConfig& c, std::vector<torch::Tensor> params) {
  try {
    return build(c, std::move(params));
  } catch (const c10::Error& e) {
    throw ConfigError("[optimizer] " + c.optimizer.name + ": LibTorch rejected the settings: " +
                      e.what_without_backtrace());
  }
}

LrSchedule::LrSchedule(const TrainConfig& c, int64_t total_steps)
    : name_(c.schedule.name), base_(c.optimizer.lr), min_(c.schedule.min_lr), gamma_(c.schedule.gamma),
      warmup_(runSteps(c.schedule.warmup_steps, total_steps)), step_size_(c.schedule.step_size), total_(std::max<int64_t>(1, total_steps)) {}

double LrSchedule::at(int64_t step) const {
  if (step < warmup_) return base_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
  const int64_t s = step - warmup_;
  if (name_ == "step") return base_ * std::pow(gamma_, static_cast<double>(s / step_size_));
  if (name_ == "cosine") {
    const double span = static_cast<double>(std::max<int64_t>(1, total_ - warmup_));
    const double t = std::min(1.0, static_cast<double>(s) / span);
    return min_ + (base_ - min_) * 0.5 * (1.0 + std::cos(M_PI * t));
  }
  return base_;
}

void LrSchedule::apply(torch::optim::Optimizer& opt, int64_t step) const {
  const double lr = at(step);
  for (auto& g : opt.param_groups()) g.options().set_lr(lr);
}

}  // namespace lowcomm::train
