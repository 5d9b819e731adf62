// Gossip through the trainer, four ranks as threads: mixings every step, the consensus distance
// in the step records and the summary, one global average at the end (every rank holds the same
// final model), and a resume mid-run (ranks apart) that ends bit-identical to the uninterrupted
// run on both topologies. Also the straggler knob (fault.*): only the slowed rank sleeps, once
// per step, and a rank outside the world is a ConfigError.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lowcomm/train/checkpoint.h"
#include "lowcomm/train/config.h"
#include "train/checkpoint_params.h"
#include "train/temp_dir.h"
#include "train/trainer_threads.h"

using namespace lowcomm;
using namespace lowcomm::train;
namespace fs = std::filesystem;

namespace {

TrainConfig gossipRun(const fs::path& out, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {"data.dataset=synthetic", "model.name=mlp", "data.batch_size=16",
                                   "data.train_limit=1024", "data.test_limit=256", "schedule.epochs=100",
                                   "schedule.max_steps=14", "optimizer.name=sgd", "optimizer.lr=0.05",
                                   "checkpoint.every_steps=6", "checkpoint.keep_last=0", "logging.log_every=1",
                                   "logging.progress=false", "strategy.name=gossip", "gossip.consensus_every=2",
                                   "logging.out_dir=" + out.string()};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return loadConfig("", sets);
}

fs::path ckpt(const fs::path& run, int step, int rank) { return test::checkpointOf(run, step, rank); }

bool same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) { return test::sameTensors(a, b); }

std::vector<torch::Tensor> paramsAt(const fs::path& run, int step, int rank, const TrainConfig& c) {
  return test::checkpointParams(ckpt(run, step, rank).string(), c);
}

}  // namespace

TEST(GossipTrainer, MixesEveryStepAndAveragesAtTheEnd) {
  test::TempDir d;
  const auto c = gossipRun(d.path / "run");
  const auto s = test::trainOnThreads(4, c, {});
  SCOPED_TRACE(s.dump());
  EXPECT_EQ(s["gossip"]["mixings"], 14);
  EXPECT_GT(s["gossip"]["consensus_distance"].get<double>(), 0);
  EXPECT_GT(s["bytes_by_phase"]["gossip"]["sent"].get<double>(), 0);
  EXPECT_GT(s["bytes_by_phase"]["final-average"]["sent"].get<double>(), 0);
  EXPECT_FALSE(same(paramsAt(d.path / "run", 6, 0, c), paramsAt(d.path / "run", 6, 1, c)));
  for (int r = 1; r < 4; ++r)
    EXPECT_TRUE(same(paramsAt(d.path / "run", 14, 0, c), paramsAt(d.path / "run", 14, r, c))) << "rank " << r;
  const auto steps = test::jsonlRecords(d.path / "run/metrics.jsonl", "step");
  ASSERT_EQ(steps.size(), 14u);
  EXPECT_EQ(steps[0]["consensus_distance"], 0.0);  // measured after every 2nd mixing
  EXPECT_GT(steps[1]["consensus_distance"].get<double>(), 0);
}

class GossipResume : public ::testing::TestWithParam<const char*> {};

TEST_P(GossipResume, FromStepSixContinuesExactly) {
  test::TempDir d;
  const std::vector<std::string> extra = {std::string("gossip.topology=") + GetParam()};
  const auto a = gossipRun(d.path / "a", extra);
  const auto sa = test::trainOnThreads(4, a, {});
  const auto b = gossipRun(d.path / "b", extra);
  test::copyCheckpoints(d.path / "a", d.path / "b", 6, 4);
  TrainOptions resume;
  resume.resume = true;
  const auto s = test::trainOnThreads(4, b, resume);
  EXPECT_EQ(s["gossip"]["mixings"], 14);
  EXPECT_EQ(s["gossip"]["consensus_distance"], sa["gossip"]["consensus_distance"]);
  for (int step : {12, 14})
    for (int r = 0; r < 4; ++r)
      EXPECT_TRUE(same(paramsAt(d.path / "a", step, r, a), paramsAt(d.path / "b", step, r, b)))
          << "rank " << r << " step " << step;
}

INSTANTIATE_TEST_SUITE_P(Topologies, GossipResume, ::testing::Values("ring", "exponential"));

TEST(FaultKnob, OnlyTheSlowRankSleepsOncePerStep) {
  test::TempDir d;
  const auto c = gossipRun(d.path / "run", {"strategy.name=ddp", "fault.slow_rank=1", "fault.slow_factor=2"});
  TrainOptions o;
  o.timeline_path = (d.path / "trace.json").string();
  test::trainOnThreads(2, c, o);
  std::ifstream f(o.timeline_path);
  const auto trace = nlohmann::json::parse(f);
  std::map<int, int> sleeps;
  for (const auto& e : trace["traceEvents"])
    if (e.value("name", "") == "fault-slowdown") ++sleeps[e["pid"].get<int>()];
  EXPECT_EQ(sleeps, (std::map<int, int>{{1, 14}}));
  EXPECT_NE(test::configErrorOf({"fault.slow_factor=0.5"}).find("fault.slow_factor"), std::string::npos);
  const auto bad = gossipRun(d.path / "bad", {"strategy.name=ddp", "fault.slow_rank=2"});
  EXPECT_THROW(
      {
        try {
          test::trainOnThreads(2, bad, {});
        } catch (const std::exception& e) {
          EXPECT_NE(std::string(e.what()).find("fault.slow_rank"), std::string::npos) << e.what();
          throw;
        }
      },
      std::runtime_error);
}
