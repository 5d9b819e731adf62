// A strategy that lives only in this test, registered beside the built-in ones: its config
// section parses and validates through the same loader, the trainer builds and drives it, its
// summary block and resume key come from its spec. Nothing under src/train or src/cli knows it.
// It is parameter averaging every `every` steps.
#include <gtest/gtest.h>

#include <filesystem>

#include "lowcomm/parallel/strategy.h"
#include "lowcomm/parallel/strategy_spec.h"
#include "lowcomm/train/config.h"
#include "train/checkpoint_params.h"
#include "train/temp_dir.h"
#include "train/trainer_threads.h"

using namespace lowcomm;
using namespace lowcomm::train;
namespace fs = std::filesystem;

namespace {

struct AverageOptions {
  int64_t every = 4;
  bool at_end = true;
};

class AverageStrategy : public parallel::Strategy {
 public:
  AverageStrategy(const parallel::StrategyContext& ctx, AverageOptions o) : model_(ctx.model), o_(o) {
    world_ = ctx.world->split(0, ctx.world->rank());
    parallel::broadcastModel(*world_, *model_);
  }
  std::string beginStep(int64_t) override { return "local"; }
  torch::Tensor forward(const torch::Tensor& x) override { return model_->forward(x); }
  void setSync(bool) override {}
  void afterBackward() override {}
  void afterOptimizerStep(int64_t step) override {
    if ((step + 1) % o_.every == 0) average();
  }
  void beforeEval() override {}
  bool finish(int64_t) override {
    if (!o_.at_end) return false;
    average();
    return true;
  }
  nlohmann::json summary() const override { return {{"every", o_.every}, {"averages", averages_}}; }

 private:
  void average() {
    torch::NoGradGuard no_grad;
    world_->setPhase("average");
    for (auto& p : model_->parameters())
      world_->allreduce(p.data_ptr<float>(), static_cast<size_t>(p.numel()), comm::DType::f32, comm::ReduceOp::avg);
    ++averages_;
  }

  std::shared_ptr<nn::Model> model_;
  AverageOptions o_;
  std::shared_ptr<comm::Communicator> world_;
  int64_t averages_ = 0;
};

parallel::StrategySpec averageSpec() {
  schema::Section<AverageOptions> section("average", "test-only parameter averaging");
  section.integer("every", &AverageOptions::every, 1, 1000, "steps between averages")
      .flag("at_end", &AverageOptions::at_end, "average once more at the end");
  parallel::StrategySpec s;
  s.name = "average";
  s.doc = "test-only: parameter averaging every `every` steps";
  s.options = parallel::optionsSection(section);
  s.make = [](const parallel::StrategyContext& ctx, const std::any& o, const parallel::StrategyRun&) {
    return std::make_unique<AverageStrategy>(ctx, std::any_cast<const AverageOptions&>(o));
  };
  s.resume_key = [](const std::any& o, int) { return "average/" + std::to_string(std::any_cast<const AverageOptions&>(o).every); };
  s.summary_lines = [](const nlohmann::json& b) {
    return std::vector<std::pair<std::string, std::string>>{{"averaging", std::to_string(b["averages"].get<int>()) + " averages"}};
  };
  return s;
}

std::shared_ptr<const parallel::StrategyRegistry> withAverage() {
  auto r = std::make_shared<parallel::StrategyRegistry>(*parallel::builtinStrategies());
  r->add(averageSpec());
  return r;
}

TrainConfig run(const fs::path& out, std::vector<std::string> extra) {
  std::vector<std::string> sets = {"data.dataset=synthetic", "model.name=mlp", "data.batch_size=16",
                                   "data.train_limit=1024", "data.test_limit=256", "schedule.epochs=100",
                                   "schedule.max_steps=12", "optimizer.name=sgd", "optimizer.lr=0.05",
                                   "optimizer.momentum=0", "logging.progress=false", "comm.deterministic=true",
                                   "logging.out_dir=" + out.string()};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return loadConfig("", sets, withAverage());
}

}  // namespace

TEST(CustomStrategy, ItsSectionIsDeclaredParsedAndValidated) {
  test::TempDir d;
  const auto c = run(d.path / "run", {"strategy.name=average", "average.every=3"});
  EXPECT_EQ(c.section<AverageOptions>("average").every, 3);
  EXPECT_NE(toToml(c).find("[average]\nevery = 3\nat_end = true\n"), std::string::npos) << toToml(c);
  try {
    run(d.path / "bad", {"strategy.name=average", "average.every=0"});
    FAIL() << "average.every = 0 accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("key 'average.every' must be in [1, 1000], got 0"), std::string::npos) << e.what();
  }
  bool listed = false;
  for (const auto& k : configKeyInfo(withAverage())) listed |= k.key == "average.at_end" && k.doc == "average once more at the end";
  EXPECT_TRUE(listed);
  // Without the registration the key is unknown and the name is not a strategy.
  EXPECT_THROW(loadConfig("", {"average.every=3"}), ConfigError);
  EXPECT_THROW(loadConfig("", {"strategy.name=average"}), ConfigError);
}

// (The equivalence with DDP at every = 1 is arithmetic only with the same initial weights, which
// ranks as threads do not promise: they draw from one global generator. What this checks is that
// the trainer drives the strategy as its options say.)
TEST(CustomStrategy, TrainsThroughTheTrainerAsItsOptionsSay) {
  test::TempDir d;
  const auto every = run(d.path / "every", {"strategy.name=average", "average.every=1", "average.at_end=false"});
  const auto s = test::trainOnThreads(4, every, {});
  SCOPED_TRACE(s.dump());
  EXPECT_EQ(s["strategy"], "average");
  EXPECT_EQ(s["average"]["averages"], 12);
  EXPECT_GT(s["bytes_by_phase"]["average"]["sent"].get<double>(), 12.0 * s["memory"]["parameter_bytes"].get<double>());
  EXPECT_LT(s["test_loss"].get<double>(), 2.25);  // it learned (chance: ln 10 = 2.30)
  EXPECT_EQ(strategySpec(every).summary_lines(s["average"])[0].second, "12 averages");
  auto params = [&](const char* run, int rank, const TrainConfig& c) {
    return test::checkpointParams((d.path / run / ("checkpoints/step12.rank" + std::to_string(rank) + ".pt")).string(), c);
  };
  for (int r = 1; r < 4; ++r) EXPECT_TRUE(test::sameTensors(params("every", 0, every), params("every", r, every))) << r;

  // Every 5 steps and not at the end: averaged after steps 5 and 10, then two local steps apart.
  const auto sparse = run(d.path / "sparse", {"strategy.name=average", "average.every=5", "average.at_end=false"});
  EXPECT_EQ(test::trainOnThreads(4, sparse, {})["average"]["averages"], 2);
  EXPECT_FALSE(test::sameTensors(params("sparse", 0, sparse), params("sparse", 1, sparse)));
}
