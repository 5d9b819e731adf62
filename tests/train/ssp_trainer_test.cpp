// Stale-synchronous parallel through the trainer, four ranks as threads (each with its server
// thread): staleness 0 keeps every rank on the same weights, a resume mid-run continues bit for bit, a slowed rank
// lets the others run ahead only as far as the bound (and further when asynchronous), with and without
// the push and pull overlapped, every rank ends with the same model, and a bad staleness names its key.
#include <gtest/gtest.h>

#include <filesystem>

#include "lowcomm/train/checkpoint.h"
#include "lowcomm/train/config.h"
#include "train/checkpoint_params.h"
#include "train/temp_dir.h"
#include "train/trainer_threads.h"

using namespace lowcomm;
using namespace lowcomm::train;
namespace fs = std::filesystem;

namespace {

TrainConfig sspRun(const fs::path& out, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {"data.dataset=synthetic", "model.name=mlp", "data.batch_size=16",
                                   "data.train_limit=1024", "data.test_limit=256", "schedule.epochs=100",
                                   "schedule.max_steps=14", "optimizer.name=sgd", "optimizer.lr=0.05",
                                   "optimizer.momentum=0", "checkpoint.every_steps=6", "checkpoint.keep_last=0",
                                   "logging.log_every=1", "logging.progress=false", "strategy.name=ssp",
                                   "ssp.staleness=0", "logging.out_dir=" + out.string()};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return loadConfig("", sets);
}

std::vector<torch::Tensor> paramsAt(const fs::path& run, int step, int rank, const TrainConfig& c) {
  return test::checkpointParams(test::checkpointOf(run, step, rank).string(), c);
}

}  // namespace

// (Equivalence with DDP needs processes: rank threads share torch's global generator, so two thread
// runs start from different weights. tests/cli/ssp_e2e.sh checks it.)
TEST(SspTrainer, StalenessZeroKeepsRanksTogetherAndMetersEveryPhase) {
  test::TempDir d;
  const auto c = sspRun(d.path / "ssp");
  const auto s = test::trainOnThreads(4, c, {});
  SCOPED_TRACE(s.dump());
  EXPECT_EQ(s["ssp"]["pulls"], 14);
  EXPECT_EQ(s["ssp"]["staleness_max"], 0);
  EXPECT_EQ(s["ssp"]["fences"], 2);  // the checkpoints at 6 and 12
  for (const char* phase : {"push", "pull", "fence", "final-pull"})
    EXPECT_GT(s["bytes_by_phase"][phase]["sent"].get<double>(), 0) << phase;
  for (int step : {6, 12, 14}) {
    const auto mine = paramsAt(d.path / "ssp", step, 0, c);
    for (int r = 1; r < 4; ++r) EXPECT_TRUE(test::sameTensors(mine, paramsAt(d.path / "ssp", step, r, c))) << r;
  }
  const auto steps = test::jsonlRecords(d.path / "ssp/metrics.jsonl", "step");
  ASSERT_EQ(steps.size(), 14u);
  EXPECT_EQ(steps[13]["staleness"], 0);
  EXPECT_EQ(steps[13]["clock"], 14);
}

TEST(SspTrainer, ResumeFromAFenceContinuesExactly) {
  test::TempDir d;
  const auto a = sspRun(d.path / "a", {"optimizer.momentum=0.9"});
  test::trainOnThreads(4, a, {});
  const auto b = sspRun(d.path / "b", {"optimizer.momentum=0.9"});
  test::copyCheckpoints(d.path / "a", d.path / "b", 6, 4);
  TrainOptions resume;
  resume.resume = true;
  const auto s = test::trainOnThreads(4, b, resume);
  EXPECT_EQ(s["ssp"]["pulls"], 14);
  for (int step : {12, 14})
    for (int r = 0; r < 4; ++r)
      EXPECT_TRUE(test::sameTensors(paramsAt(d.path / "a", step, r, a), paramsAt(d.path / "b", step, r, b)))
          << "rank " << r << " step " << step;
}

class SspSlowRank : public ::testing::TestWithParam<std::tuple<int, bool>> {};

// Rank 1 sleeps 19x its compute every step: the others run ahead, within the bound when there is
// one (with the push and pull overlapped with the next step or not); at the end every rank holds
// the same model.
TEST_P(SspSlowRank, OthersRunAheadWithinTheBound) {
  const auto [bound, overlap] = GetParam();
  test::TempDir d;
  const auto c = sspRun(d.path / "run", {"ssp.staleness=" + std::to_string(bound), "fault.slow_rank=1",
                                         "fault.slow_factor=20", "checkpoint.every_steps=0",
                                         std::string("ssp.overlap=") + (overlap ? "true" : "false")});
  const auto s = test::trainOnThreads(4, c, {});
  SCOPED_TRACE(s.dump());
  const int64_t seen = s["ssp"]["staleness_max"];
  EXPECT_GE(seen, 1);
  if (bound >= 0) {
    EXPECT_LE(seen, bound);
  } else {
    EXPECT_GT(seen, 2);
  }
  for (const auto& rec : test::jsonlRecords(d.path / "run/metrics.jsonl", "step")) {
    if (bound >= 0) {
      EXPECT_LE(rec["staleness"].get<int64_t>(), bound);
    }
  }
  const auto last = paramsAt(d.path / "run", 14, 0, c);
  for (int r = 1; r < 4; ++r) EXPECT_TRUE(test::sameTensors(last, paramsAt(d.path / "run", 14, r, c))) << r;
}

INSTANTIATE_TEST_SUITE_P(Bounds, SspSlowRank,
                         ::testing::Values(std::make_tuple(2, true), std::make_tuple(2, false),
                                           std::make_tuple(1, true), std::make_tuple(-1, true)));

// Overlapped pushes and checkpoint fences: a run with a bound of 1 checkpoints at 6 and 12 and a
// resume from 6 finishes with every rank on one model, within the bound.
TEST(SspTrainer, OverlappedRunResumesFromAFence) {
  test::TempDir d;
  const std::vector<std::string> extra = {"ssp.staleness=1", "ssp.overlap=true", "fault.slow_rank=2",
                                          "fault.slow_factor=5"};
  const auto a = sspRun(d.path / "a", extra);
  const auto sa = test::trainOnThreads(4, a, {});
  EXPECT_EQ(sa["ssp"]["fences"], 2);
  EXPECT_LE(sa["ssp"]["staleness_max"].get<int64_t>(), 1);
  const auto b = sspRun(d.path / "b", extra);
  test::copyCheckpoints(d.path / "a", d.path / "b", 6, 4);
  TrainOptions resume;
  resume.resume = true;
  const auto sb = test::trainOnThreads(4, b, resume);
  SCOPED_TRACE(sb.dump());
  EXPECT_EQ(sb["ssp"]["pulls"], 14);
  EXPECT_LE(sb["ssp"]["staleness_max"].get<int64_t>(), 1);
  const auto last = paramsAt(d.path / "b", 14, 0, b);
  for (int r = 1; r < 4; ++r) EXPECT_TRUE(test::sameTensors(last, paramsAt(d.path / "b", 14, r, b))) << r;
}

TEST(SspTrainer, BadStalenessNamesTheKey) {
  EXPECT_NE(test::configErrorOf({"strategy.name=ssp", "ssp.staleness=-2"}).find("ssp.staleness"), std::string::npos);
}
