// DiLoCo through the trainer, four ranks as threads (real Gloo pairs on loopback): outer steps
// every `period` inner steps and at the end, all ranks equal after each and apart between them,
// the pseudo-gradient through a codec (top-k with its residual), and a resume mid-period that
// ends bit-identical to the uninterrupted run. The equivalence with local SGD (outer_lr 1,
// momentum 0) runs in real processes: tests/cli/local_sgd_e2e.sh.
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

// 14 AdamW steps of the mlp (4 x 16 synthetic images per step), outer steps after 4, 8, 12 and
// at the end; checkpoints after 6, 12 and 14 steps.
TrainConfig dilocoRun(const fs::path& out, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {"data.dataset=synthetic", "model.name=mlp", "data.batch_size=16",
                                   "data.train_limit=1024", "data.test_limit=256", "schedule.epochs=100",
                                   "schedule.max_steps=14", "optimizer.name=adamw", "optimizer.lr=0.003",
                                   "checkpoint.every_steps=6", "checkpoint.keep_last=0", "logging.log_every=1",
                                   "logging.eval_every=6", "logging.progress=false", "strategy.name=diloco",
                                   "diloco.period=4", "logging.out_dir=" + out.string()};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return loadConfig("", sets);
}

fs::path ckpt(const fs::path& run, int step, int rank) { return test::checkpointOf(run, step, rank); }

std::vector<torch::Tensor> paramsAt(const fs::path& run, int step, int rank, const TrainConfig& c) {
  return test::checkpointParams(ckpt(run, step, rank).string(), c);
}

bool same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) { return test::sameTensors(a, b); }

}  // namespace

TEST(DilocoTrainer, OuterStepsScheduleAndReplicas) {
  test::TempDir d;
  const auto c = dilocoRun(d.path / "run");
  const auto s = test::trainOnThreads(4, c, {});
  SCOPED_TRACE(s.dump());
  EXPECT_EQ(s["strategy"], "diloco");
  EXPECT_EQ(s["diloco"]["outer_steps"], 4);
  EXPECT_EQ(s["diloco"]["pseudo_gradient_hook"], "allreduce");
  for (int r = 1; r < 4; ++r) {
    EXPECT_FALSE(same(paramsAt(d.path / "run", 6, 0, c), paramsAt(d.path / "run", 6, r, c))) << "rank " << r;
    EXPECT_TRUE(same(paramsAt(d.path / "run", 12, 0, c), paramsAt(d.path / "run", 12, r, c))) << "rank " << r;
    EXPECT_TRUE(same(paramsAt(d.path / "run", 14, 0, c), paramsAt(d.path / "run", 14, r, c))) << "rank " << r;
  }
  // Only pseudo-gradients (and buffers) cross the wire: 4 outer steps of all parameters.
  const double params = 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10;
  const double outer = s["bytes_by_phase"]["outer"]["sent"].get<double>();
  EXPECT_GT(outer, 4 * params * 4 * 0.9);  // rank 0 sends at least ~(n-1)/n of 4 bytes per value, 4 times
  EXPECT_FALSE(s["bytes_by_phase"].contains("grad")) << s["bytes_by_phase"].dump();
  const auto steps = test::jsonlRecords(d.path / "run/metrics.jsonl", "step");
  ASSERT_EQ(steps.size(), 14u);
  EXPECT_EQ(steps[3]["steps_since_outer"], 0);
  EXPECT_EQ(steps[5]["steps_since_outer"], 2);
  EXPECT_EQ(steps[5]["phase"], "local");
  const auto evals = test::jsonlRecords(d.path / "run/metrics.jsonl", "eval");
  ASSERT_GE(evals.size(), 1u);
  EXPECT_EQ(evals[0]["steps_since_outer"], 2);
  const auto events = test::jsonlRecords(d.path / "run/metrics.jsonl", "diloco");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["event"], "final-outer-step");
}

// The outer momentum matters: with it the weights end elsewhere than without.
TEST(DilocoTrainer, OuterMomentumMovesTheWeights) {
  test::TempDir d;
  const auto a = dilocoRun(d.path / "a"), b = dilocoRun(d.path / "b", {"diloco.outer_momentum=0"});
  test::trainOnThreads(4, a, {});
  test::trainOnThreads(4, b, {});
  EXPECT_FALSE(same(paramsAt(d.path / "a", 12, 0, a), paramsAt(d.path / "b", 12, 0, b)));
}

namespace {

struct DilocoResumeCase {
  const char* name;
  std::vector<std::string> extra;
};

void PrintTo(const DilocoResumeCase& c, std::ostream* os) { *os << c.name; }

}  // namespace

class DilocoResume : public ::testing::TestWithParam<DilocoResumeCase> {};

// From the checkpoint after 6 steps (2 inner steps into a period, outer momentum non-zero, the
// codec's residual non-zero): every rank ends with the uninterrupted run's weights.
TEST_P(DilocoResume, FromMidPeriodContinuesExactly) {
  test::TempDir d;
  const auto a = dilocoRun(d.path / "a", GetParam().extra);
  const auto sa = test::trainOnThreads(4, a, {});
  const auto b = dilocoRun(d.path / "b", GetParam().extra);
  test::copyCheckpoints(d.path / "a", d.path / "b", 6, 4);
  TrainOptions resume;
  resume.resume = true;
  const auto s = test::trainOnThreads(4, b, resume);
  EXPECT_EQ(s["diloco"]["outer_steps"], sa["diloco"]["outer_steps"]);
  for (int step : {12, 14})
    for (int r = 0; r < 4; ++r)
      EXPECT_TRUE(same(paramsAt(d.path / "a", step, r, a), paramsAt(d.path / "b", step, r, b)))
          << "rank " << r << " step " << step;
}

INSTANTIATE_TEST_SUITE_P(Modes, DilocoResume,
                         ::testing::Values(DilocoResumeCase{"nesterov", {}},
                                           DilocoResumeCase{"topk_pseudo_gradient", {"compress.codec=topk"}},
                                           DilocoResumeCase{"plain_momentum", {"diloco.nesterov=false"}},
                                           // fragment 1 leaves after step 6 and lands after 7
                                           DilocoResumeCase{"streaming_in_flight", {"diloco.fragments=2", "diloco.overlap_steps=1"}},
                                           DilocoResumeCase{"streaming_mixed_int8", {"diloco.fragments=2", "diloco.overlap_steps=2",
                                                                                     "diloco.mix=0.5", "compress.codec=int8"}}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(DilocoTrainer, ConfigErrorsNameTheKey) {
  auto msg = test::configErrorOf;
  EXPECT_NE(msg({"strategy.name=diloco", "diloco.period=0"}).find("diloco.period"), std::string::npos);
  EXPECT_NE(msg({"strategy.name=diloco", "diloco.outer_lr=0"}).find("diloco.outer_lr"), std::string::npos);
  EXPECT_NE(msg({"strategy.name=diloco", "diloco.outer_momentum=1"}).find("diloco.outer_momentum"), std::string::npos);
  EXPECT_NE(msg({"strategy.name=diloco", "diloco.nesterov=3"}).find("diloco.nesterov"), std::string::npos);
}
