#include <gtest/gtest.h>

#include "lowcomm/base/error.h"
#include "lowcomm/train/optim.h"

using namespace lowcomm::train;

TEST(Schedule, WarmupThenCosineToMinimum) {
  auto c = loadConfig("", {"optimizer.lr=1.0", "schedule.name=cosine", "schedule.warmup_steps=10", "schedule.min_lr=0.1"});
  LrSchedule s(c, 110);
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);  // half way: midpoint of [min, base]
  EXPECT_NEAR(s.at(110), 0.1, 1e-12);
}

TEST(Schedule, StepAndConstant) {
  auto c = loadConfig("", {"optimizer.lr=1.0", "schedule.name=step", "schedule.step_size=5", "schedule.gamma=0.5"});
  LrSchedule s(c, 100);
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);
  EXPECT_DOUBLE_EQ(s.at(5), 0.5);
  EXPECT_DOUBLE_EQ(s.at(12), 0.25);
  auto k = loadConfig("", {"optimizer.lr=0.3"});
  EXPECT_DOUBLE_EQ(LrSchedule(k, 10).at(7), 0.3);
}

TEST(Optimizer, BuiltByNameAndScheduleApplies) {
  auto w = torch::ones({3}, torch::requires_grad());
  auto c = loadConfig("", {"optimizer.name=adamw", "optimizer.lr=0.01"});
  auto opt = makeOptimizer(c, {w});
  LrSchedule(c, 10).apply(*opt, 0);
  EXPECT_DOUBLE_EQ(opt->param_groups()[0].options().get_lr(), 0.01);
  auto bad = loadConfig("", {"optimizer.nesterov=true", "optimizer.momentum=0"});
  EXPECT_THROW(makeOptimizer(bad, {w}), lowcomm::ConfigError);
}

// A value only LibTorch checks (here a config built in code, past loadConfig's range checks)
// comes back as a config error of [optimizer] with LibTorch's message and no C++ backtrace.
TEST(Optimizer, LibTorchRejectionIsAConfigErrorWithoutBacktrace) {
  auto c = loadConfig("", {"optimizer.name=adamw"});
  c.optimizer.beta1 = 1.5;
  try {
    makeOptimizer(c, {torch::zeros({2}, torch::requires_grad())});
    FAIL() << "AdamW accepted beta1 = 1.5";
  } catch (const lowcomm::ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[optimizer] adamw"), std::string::npos) << m;
    EXPECT_NE(m.find("beta"), std::string::npos) << m;
    EXPECT_EQ(m.find("Exception raised from"), std::string::npos) << m;
  }
}

// optimizer.sign: SGD along sign(g), weight decay proportional to the weights (DeMo's update),
// so the step does not depend on the gradient's scale; sign(0) = 0 leaves a weight alone.
TEST(Optimizer, SignSgdStepsAlongTheSignWithDecoupledDecay) {
  auto w = torch::tensor({1.0f, -2.0f, 3.0f}).requires_grad_();
  auto c = loadConfig("", {"optimizer.lr=0.1", "optimizer.momentum=0", "optimizer.sign=true",
                           "optimizer.weight_decay=0.5"});
  auto opt = makeOptimizer(c, {w});
  w.mutable_grad() = torch::tensor({1e-6f, 50.0f, 0.0f});
  opt->step();
  const auto got = w.detach();
  EXPECT_FLOAT_EQ(got[0].item<float>(), 1.0f - 0.1f * (1.0f + 0.5f * 1.0f));
  EXPECT_FLOAT_EQ(got[1].item<float>(), -2.0f - 0.1f * (1.0f + 0.5f * -2.0f));
  EXPECT_FLOAT_EQ(got[2].item<float>(), 3.0f - 0.1f * (0.0f + 0.5f * 3.0f));
  EXPECT_THROW(loadConfig("", {"optimizer.name=adamw", "optimizer.sign=true"}), lowcomm::ConfigError);
}
