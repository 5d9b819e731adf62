// Streaming DiLoCo and DiLoCo's scopes through the trainer, four ranks as threads (real Gloo
// pairs on loopback): fragments sync on their staggered schedule, an overlapped exchange lands
// overlap_steps later, the ranks of a site stay identical while the sites drift apart between
// outer steps, and only the outer exchange crosses between sites. Resumes with an exchange in
// flight: DilocoResume in diloco_trainer_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>

#include "lowcomm/train/config.h"
#include "train/checkpoint_params.h"
#include "train/temp_dir.h"
#include "train/trainer_threads.h"

using namespace lowcomm;
using namespace lowcomm::train;
namespace fs = std::filesystem;

namespace {

// 14 AdamW steps of the mlp (6 parameter tensors; 2 fragments: the first layer's weight, the
// rest), period 4, a checkpoint every `every` steps.
TrainConfig streamingRun(const fs::path& out, int every, const std::vector<std::string>& extra) {
  std::vector<std::string> sets = {"data.dataset=synthetic", "model.name=mlp", "data.batch_size=16",
                                   "data.train_limit=1024", "data.test_limit=256", "schedule.epochs=100",
                                   "schedule.max_steps=14", "optimizer.name=adamw", "optimizer.lr=0.003",
                                   "checkpoint.every_steps=" + std::to_string(every), "checkpoint.keep_last=0",
                                   "logging.log_every=1", "logging.eval_every=0", "logging.progress=false",
                                   "strategy.name=diloco", "diloco.period=4", "logging.out_dir=" + out.string()};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return loadConfig("", sets);
}

std::vector<torch::Tensor> paramsAt(const fs::path& run, int step, int rank, const TrainConfig& c) {
  return test::checkpointParams(test::checkpointOf(run, step, rank).string(), c);
}

// Which of the parameter tensors rank r holds equal to rank 0's after `step` steps.
std::vector<bool> agreeing(const fs::path& run, int step, int r, const TrainConfig& c) {
  const auto a = paramsAt(run, step, 0, c), b = paramsAt(run, step, r, c);
  std::vector<bool> out;
  for (size_t i = 0; i < a.size(); ++i) out.push_back(torch::equal(a[i], b[i]));
  return out;
}

const std::vector<bool> kFirst = {true, false, false, false, false, false};  // fragment 0 agrees
const std::vector<bool> kRest = {false, true, true, true, true, true};      // fragment 1 agrees
const std::vector<bool> kAll(6, true);

}  // namespace

// Fragment 1 syncs after 2, 6, 10 steps, fragment 0 after 4, 8, 12; both at the end (14).
TEST(DilocoStreamingTrainer, FragmentsSyncOnTheirStaggeredSchedule) {
  test::TempDir d;
  const auto c = streamingRun(d.path / "run", 2, {"diloco.fragments=2"});
  const auto s = test::trainOnThreads(4, c, {});
  SCOPED_TRACE(s.dump());
  EXPECT_EQ(s["diloco"]["fragments"], 2);
  EXPECT_EQ(s["diloco"]["outer_steps"], 8);  // 3 + 3 on schedule, 2 at the end
  for (int r = 1; r < 4; ++r) {
    EXPECT_EQ(agreeing(d.path / "run", 2, r, c), kRest) << "rank " << r;
    EXPECT_EQ(agreeing(d.path / "run", 4, r, c), kFirst) << "rank " << r;
    EXPECT_EQ(agreeing(d.path / "run", 6, r, c), kRest) << "rank " << r;
    EXPECT_EQ(agreeing(d.path / "run", 12, r, c), kFirst) << "rank " << r;
    EXPECT_EQ(agreeing(d.path / "run", 14, r, c), kAll) << "rank " << r;
  }
  // Each sync moves one fragment: fragment 0 holds 784 x 512 of the 535 818 values.
  const auto steps = test::jsonlRecords(d.path / "run/metrics.jsonl", "step");
  ASSERT_EQ(steps.size(), 14u);
  EXPECT_EQ(steps[1]["outer_steps"], 1);
  EXPECT_EQ(steps[3]["outer_steps"], 2);
  EXPECT_EQ(steps[4]["steps_since_outer"], 1);
  // The largest sync is fragment 0's: an allreduce of 1.6 MB sends 2 (n - 1) / n of it per rank,
  // far below the whole model's 2.1 MB twice over.
  const double frag0 = 4.0 * 784 * 512;
  const double peak = s["diloco"]["peak_sync_bytes_sent"].get<double>();
  EXPECT_GE(peak, 1.0 * frag0);
  EXPECT_LE(peak, 1.5 * frag0 + 64 * 1024);
  // Every byte a step record counts is in one link class (all ranks on this host).
  const auto& last = steps.back();
  EXPECT_EQ(last["bytes_by_link"]["intra-node"]["sent"].get<int64_t>() +
                last["bytes_by_link"]["inter-node"]["sent"].get<int64_t>(),
            last["bytes_sent"].get<int64_t>());
}

// With overlap_steps 1 the exchange that leaves after step 2 lands after step 3: the ranks
// agree on fragment 1 at 3, not at 2; the one leaving after 6 is in flight at the checkpoint.
TEST(DilocoStreamingTrainer, AnOverlappedExchangeLandsOverlapStepsLater) {
  test::TempDir d;
  const auto c = streamingRun(d.path / "run", 1, {"diloco.fragments=2", "diloco.overlap_steps=1"});
  const auto s = test::trainOnThreads(4, c, {});
  SCOPED_TRACE(s.dump());
  const std::vector<bool> none(6, false);
  for (int r = 1; r < 4; ++r) {
    EXPECT_EQ(agreeing(d.path / "run", 2, r, c), none) << "rank " << r;
    EXPECT_EQ(agreeing(d.path / "run", 3, r, c), kRest) << "rank " << r;
    EXPECT_EQ(agreeing(d.path / "run", 5, r, c), kFirst) << "rank " << r;
    EXPECT_EQ(agreeing(d.path / "run", 14, r, c), kAll) << "rank " << r;
  }
  const auto steps = test::jsonlRecords(d.path / "run/metrics.jsonl", "step");
  ASSERT_EQ(steps.size(), 14u);
  EXPECT_EQ(steps[1]["outer_in_flight"], 1);
  EXPECT_EQ(steps[2]["outer_in_flight"], 0);
  EXPECT_GT(s["diloco"]["outer_s"].get<double>(), 0.0);
}

// Sites {0, 0, 1, 1}: an inner DDP keeps each site's ranks identical at every step; the sites
// agree only after an outer step; the inner gradients never cross between sites, and each site
// sends its pseudo-gradient across once per outer step (each member carries its share).
TEST(DilocoStreamingTrainer, SiteScopeKeepsEachSiteIdenticalAndSyncsAcrossSites) {
  test::TempDir d;
  const auto c = streamingRun(d.path / "run", 2, {"diloco.scope=site"});
  const auto s = test::trainOnThreads(4, c, {}, {0, 0, 1, 1});
  SCOPED_TRACE(s.dump());
  EXPECT_EQ(s["diloco"]["groups"], 2);
  EXPECT_EQ(s["diloco"]["group_size"], 2);
  for (int step : {2, 6, 10, 14}) {
    EXPECT_EQ(agreeing(d.path / "run", step, 1, c), kAll) << "step " << step;
    EXPECT_EQ(paramsAt(d.path / "run", step, 2, c).size(), 6u);
    EXPECT_TRUE(test::sameTensors(paramsAt(d.path / "run", step, 2, c), paramsAt(d.path / "run", step, 3, c)));
  }
  EXPECT_EQ(agreeing(d.path / "run", 2, 2, c), std::vector<bool>(6, false));
  EXPECT_EQ(agreeing(d.path / "run", 4, 2, c), kAll);
  EXPECT_EQ(agreeing(d.path / "run", 14, 2, c), kAll);
  const auto& links = s["bytes_by_phase_link"];
  EXPECT_EQ(links["grad"]["inter-site"].get<double>(), 0.0) << links.dump();
  EXPECT_GT(links["grad"]["intra-node"].get<double>(), 0.0) << links.dump();
  // 4 outer steps; the whole world sends about 2 models across per step (2 carriers per site,
  // each half a model through a 2-rank allreduce), never 4 (every rank sending it all).
  const double model_bytes = 4.0 * 535818;
  const double across = s["bytes_sent_by_link"]["inter-site"].get<double>();
  EXPECT_GT(across, 4 * 1.5 * model_bytes);
  EXPECT_LT(across, 4 * 2.5 * model_bytes);
}

// The exchanges overlap inner steps for real (no checkpoint drains them): sites {0, 0, 1, 1},
// 2 fragments, τ = 2, mix 0.5; each site's ranks stay identical throughout (the exchange thread
// uses the group's other communicator while the inner DDP runs), and all end equal.
TEST(DilocoStreamingTrainer, SiteScopeWithOverlapKeepsSitesIdentical) {
  test::TempDir d;
  const auto c = streamingRun(d.path / "run", 7, {"diloco.scope=site", "diloco.fragments=2", "diloco.overlap_steps=2",
                                                  "diloco.mix=0.5", "compress.codec=int8"});
  const auto s = test::trainOnThreads(4, c, {}, {0, 0, 1, 1});
  SCOPED_TRACE(s.dump());
  EXPECT_EQ(agreeing(d.path / "run", 7, 1, c), kAll);
  EXPECT_TRUE(test::sameTensors(paramsAt(d.path / "run", 7, 2, c), paramsAt(d.path / "run", 7, 3, c)));
  EXPECT_NE(agreeing(d.path / "run", 7, 2, c), kAll);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(agreeing(d.path / "run", 14, r, c), kAll) << "rank " << r;
  EXPECT_EQ(s["diloco"]["pseudo_gradient_hook"], "int8");
  EXPECT_GT(s["compression_ratio"].get<double>(), 3.0);
  const auto steps = test::jsonlRecords(d.path / "run/metrics.jsonl", "step");
  ASSERT_EQ(steps.size(), 14u);
  EXPECT_EQ(steps[2]["outer_in_flight"], 1);  // fragment 1 left after step 2, lands after 4
  EXPECT_EQ(steps[4]["outer_in_flight"], 1);  // fragment 0 left after step 4
}

TEST(DilocoStreamingTrainer, ScopeAndScheduleErrorsNameTheKey) {
  auto msg = test::configErrorOf;
  EXPECT_NE(msg({"strategy.name=diloco", "diloco.scope=planet"}).find("diloco.scope"), std::string::npos);
  EXPECT_NE(msg({"strategy.name=diloco", "diloco.period=4", "diloco.fragments=5"}).find("diloco.fragments"),
            std::string::npos);
  EXPECT_NE(msg({"strategy.name=diloco", "diloco.period=4", "diloco.overlap_steps=4"}).find("diloco.overlap_steps"),
            std::string::npos);
  EXPECT_EQ(msg({"strategy.name=diloco", "diloco.period=4", "diloco.overlap_steps=3"}), "no error");
  EXPECT_NE(msg({"strategy.name=diloco", "diloco.mix=1"}).find("diloco.mix"), std::string::npos);
  // A site scope without sites fails on every rank, naming the key and a rank.
  test::TempDir d;
  const auto c = streamingRun(d.path / "run", 0, {"diloco.scope=site"});
  try {
    test::trainOnThreads(2, c, {});
    FAIL() << "scope = site without sites was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("diloco.scope"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 0 declares no site"), std::string::npos) << e.what();
  }
}

// SparseLoCo on sites: 1/32 of every chunk with 2-bit values, error feedback with decay, outer
// SGD at lr 1 without momentum; the sites end identical and the pseudo-gradient shrinks > 50x.
TEST(DilocoStreamingTrainer, SparseLoCoOnSitesEndsIdenticalAtAFewPercent) {
  test::TempDir d;
  const auto c = streamingRun(d.path / "run", 14,
                              {"diloco.scope=site", "compress.codec=sparseloco", "compress.ratio=0.03125",
                               "compress.decay=0.95", "diloco.outer_lr=1", "diloco.outer_momentum=0"});
  const auto s = test::trainOnThreads(4, c, {}, {0, 0, 1, 1});
  SCOPED_TRACE(s.dump());
  EXPECT_EQ(s["diloco"]["pseudo_gradient_hook"], "sparseloco");
  EXPECT_GT(s["compression_ratio"].get<double>(), 50.0);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(agreeing(d.path / "run", 14, r, c), kAll) << "rank " << r;
}
