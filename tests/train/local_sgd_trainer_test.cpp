// Local SGD through the trainer, four ranks as threads (real Gloo pairs on loopback): with period
// 4 the ranks drift apart between averagings and agree bit for bit after each; post-local SGD starts with DDP steps; optimizer moments are
// averaged on request; a resume from any checkpoint ends bit-identical to the uninterrupted run.
// The equivalence with DDP (period 1) runs in real processes: tests/cli/local_sgd_e2e.sh (rank
// threads draw their initial weights from one shared generator, so two thread runs start apart).
#include <gtest/gtest.h>

#include <filesystem>

#include "lowcomm/base/error.h"
#include "lowcomm/nn/models.h"
#include "lowcomm/parallel/compress_hook.h"
#include "lowcomm/parallel/optim_state.h"
#include "lowcomm/train/checkpoint.h"
#include "lowcomm/train/config.h"
#include "lowcomm/train/optim.h"
#include "train/checkpoint_params.h"
#include "train/temp_dir.h"
#include "train/trainer_threads.h"

using namespace lowcomm;
using namespace lowcomm::train;
namespace fs = std::filesystem;

namespace {

// 14 optimizer steps of the mlp on 4 x 16 synthetic images per step (less than one epoch),
// checkpoints after 6, 12 and 14 steps, an evaluation after 6.
TrainConfig localRun(const fs::path& out, const std::string& optimizer, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {"data.dataset=synthetic", "model.name=mlp", "data.batch_size=16",
                                   "data.train_limit=1024", "data.test_limit=256", "schedule.epochs=100",
                                   "schedule.max_steps=14", "optimizer.name=" + optimizer, "optimizer.lr=0.05",
                                   "optimizer.momentum=0.9", "optimizer.weight_decay=0.0001",
                                   "checkpoint.every_steps=6", "checkpoint.keep_last=0", "logging.log_every=1",
                                   "logging.eval_every=6", "logging.progress=false", "strategy.name=local_sgd",
                                   "local_sgd.period=4", "logging.out_dir=" + out.string()};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return loadConfig("", sets);
}

fs::path ckpt(const fs::path& run, int step, int rank) { return test::checkpointOf(run, step, rank); }

std::vector<torch::Tensor> paramsAt(const fs::path& run, int step, int rank, const TrainConfig& c) {
  return test::checkpointParams(ckpt(run, step, rank).string(), c);
}

bool sameParams(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) { return test::sameTensors(a, b); }

// The optimizer moments a checkpoint holds, in parameter order.
std::vector<torch::Tensor> momentsAt(const fs::path& run, int step, int rank, const TrainConfig& c) {
  auto model = nn::makeModel({c.model.name, 1, 28, 10});
  auto opt = makeOptimizer(c, model->parameters());
  parallel::AllreduceHook hook;
  loadCheckpoint(ckpt(run, step, rank).string(), *model, *opt, &hook);
  return parallel::momentTensors(*opt);
}

}  // namespace

// Period 4 over 14 steps: averages after steps 4, 8 and 12 and a final one (2 steps later). The
// ranks differ at the checkpoint after 6 steps and agree bit for bit after 12 and at the end.
// Gradients never cross the wire; averages do.
TEST(LocalSgdTrainer, RanksDriftBetweenAveragesAndAgreeAfterEach) {
  test::TempDir d;
  const auto c = localRun(d.path / "run", "sgd");
  const auto s = test::trainOnThreads(4, c, {});
  SCOPED_TRACE(s.dump());
  EXPECT_EQ(s["strategy"], "local_sgd");
  EXPECT_EQ(s["local_sgd"]["period"], 4);
  EXPECT_EQ(s["local_sgd"]["averages"], 4);
  const auto p0 = paramsAt(d.path / "run", 6, 0, c);
  for (int r = 1; r < 4; ++r) {
    EXPECT_FALSE(sameParams(p0, paramsAt(d.path / "run", 6, r, c))) << "rank " << r << " after 6 steps";
    EXPECT_TRUE(sameParams(paramsAt(d.path / "run", 12, 0, c), paramsAt(d.path / "run", 12, r, c))) << "rank " << r;
    EXPECT_TRUE(sameParams(paramsAt(d.path / "run", 14, 0, c), paramsAt(d.path / "run", 14, r, c))) << "rank " << r;
  }
  EXPECT_GT(s["bytes_by_phase"]["average"]["sent"].get<double>(), 0);
  EXPECT_FALSE(s["bytes_by_phase"].contains("grad") && s["bytes_by_phase"]["grad"]["sent"].get<double>() > 0);
  const auto steps = test::jsonlRecords(d.path / "run/metrics.jsonl", "step");
  ASSERT_EQ(steps.size(), 14u);
  EXPECT_EQ(steps[0]["phase"], "local");
  EXPECT_EQ(steps[3]["steps_since_average"], 0);  // after step 4
  EXPECT_EQ(steps[5]["steps_since_average"], 2);  // after step 6
  EXPECT_EQ(steps[13]["averages"], 3);            // the final average comes after the last step
  const auto evals = test::jsonlRecords(d.path / "run/metrics.jsonl", "eval");
  ASSERT_GE(evals.size(), 2u);
  EXPECT_EQ(evals[0]["step"], 6);
  EXPECT_EQ(evals[0]["steps_since_average"], 2);
  const auto events = test::jsonlRecords(d.path / "run/metrics.jsonl", "local_sgd");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["event"], "final-average");
}

// Post-local SGD: 5 DDP steps (gradients on the wire, ranks equal), then local steps averaged
// after steps 9 and 13 and once more at the end.
TEST(LocalSgdTrainer, PostLocalStartsWithDdp) {
  test::TempDir d;
  const auto c = localRun(d.path / "run", "sgd", {"local_sgd.start_step=5"});
  const auto s = test::trainOnThreads(4, c, {});
  SCOPED_TRACE(s.dump());
  EXPECT_EQ(s["local_sgd"]["averages"], 3);
  EXPECT_GT(s["bytes_by_phase"]["grad"]["sent"].get<double>(), 0);
  const auto steps = test::jsonlRecords(d.path / "run/metrics.jsonl", "step");
  ASSERT_EQ(steps.size(), 14u);
  EXPECT_EQ(steps[4]["phase"], "ddp");
  EXPECT_EQ(steps[5]["phase"], "local");
  EXPECT_EQ(steps[8]["steps_since_average"], 0);  // after step 9
  const auto events = test::jsonlRecords(d.path / "run/metrics.jsonl", "local_sgd");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["event"], "local-phase");
  EXPECT_EQ(events[0]["step"], 5);
}

// average_optimizer: after an average the ranks hold the same AdamW moments too; without it
// they keep their own.
TEST(LocalSgdTrainer, AveragesOptimizerMomentsOnRequest) {
  test::TempDir d;
  const auto with = localRun(d.path / "with", "adamw", {"local_sgd.average_optimizer=true"});
  const auto without = localRun(d.path / "without", "adamw");
  test::trainOnThreads(4, with, {});
  test::trainOnThreads(4, without, {});
  const auto m0 = momentsAt(d.path / "with", 12, 0, with), m1 = momentsAt(d.path / "with", 12, 1, with);
  ASSERT_EQ(m0.size(), 12u);  // exp_avg and exp_avg_sq of 6 parameters
  EXPECT_TRUE(sameParams(m0, m1));
  EXPECT_FALSE(sameParams(momentsAt(d.path / "without", 12, 0, without), momentsAt(d.path / "without", 12, 1, without)));
}

namespace {

struct ResumeCase {
  const char* name;
  const char* optimizer;
  std::vector<std::string> extra;
};

void PrintTo(const ResumeCase& c, std::ostream* os) { *os << c.name; }

}  // namespace

class LocalSgdResume : public ::testing::TestWithParam<ResumeCase> {};

// Resumed from the checkpoint after 6 steps (mid-period: every rank from its own weights), the
// run ends with the same weights on every rank as the uninterrupted one.
TEST_P(LocalSgdResume, FromStepSixContinuesExactly) {
  test::TempDir d;
  const auto a = localRun(d.path / "a", GetParam().optimizer, GetParam().extra);
  test::trainOnThreads(4, a, {});
  const auto b = localRun(d.path / "b", GetParam().optimizer, GetParam().extra);
  test::copyCheckpoints(d.path / "a", d.path / "b", 6, 4);
  TrainOptions resume;
  resume.resume = true;
  const auto s = test::trainOnThreads(4, b, resume);
  EXPECT_EQ(s["steps"], 14);
  for (int step : {12, 14})
    for (int r = 0; r < 4; ++r)
      EXPECT_TRUE(sameParams(paramsAt(d.path / "a", step, r, a), paramsAt(d.path / "b", step, r, b)))
          << "rank " << r << " step " << step;
}

INSTANTIATE_TEST_SUITE_P(
    Modes, LocalSgdResume,
    ::testing::Values(ResumeCase{"sgd", "sgd", {}},
                      ResumeCase{"adamw_moments", "adamw", {"local_sgd.average_optimizer=true"}},
                      ResumeCase{"post_local_from_ddp", "adamw", {"local_sgd.start_step=8"}},
                      ResumeCase{"post_local_mid_period", "sgd", {"local_sgd.start_step=3"}},
                      ResumeCase{"topk_codec_in_ddp", "sgd", {"local_sgd.start_step=8", "compress.codec=topk"}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(LocalSgdTrainer, ConfigErrorsNameTheKey) {
  auto msg = test::configErrorOf;
  EXPECT_NE(msg({"strategy.name=local_sgd", "local_sgd.period=0"}).find("local_sgd.period"), std::string::npos);
  EXPECT_NE(msg({"strategy.name=local_sgd", "local_sgd.start_step=-1"}).find("local_sgd.start_step"), std::string::npos);
  EXPECT_NE(msg({"strategy.name=local_sgd", "local_sgd.start_step=1.5"}).find("local_sgd.start_step"), std::string::npos);
  EXPECT_NE(msg({"strategy.name=local_sgd", "local_sgd.hierarchical=maybe"}).find("local_sgd.hierarchical"),
            std::string::npos);
  EXPECT_NE(msg({"local_sgd.periods=4"}).find("local_sgd.periods"), std::string::npos);
}
