// ZeRO stages 1 and 2 through the trainer, four ranks as threads (real Gloo pairs on loopback):
// every rank holds the same full model after each step, a resume from a mid-run checkpoint (each
// rank's file holds its own optimizer shard) ends bit-identical to the uninterrupted run, and bad
// combinations are config errors naming strategy.zero. The equivalence with DDP runs in real
// processes: tests/cli/zero_e2e.sh (rank threads draw their initial weights from one shared
// generator, so two thread runs start apart).
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

// 14 AdamW steps of the mlp (4 x 16 synthetic images per step, 2 micro-batches each, clipped),
// small buckets so the shards span several of them; checkpoints after 6, 12 and 14 steps.
TrainConfig zeroRun(const fs::path& out, int stage) {
  return loadConfig("", {"data.dataset=synthetic", "model.name=mlp", "data.batch_size=8", "data.train_limit=1024",
                         "data.test_limit=256", "schedule.epochs=100", "schedule.max_steps=14",
                         "optimizer.name=adamw", "optimizer.lr=0.003", "optimizer.weight_decay=0.01",
                         "optimizer.grad_clip=0.5", "strategy.accumulation=2", "strategy.bucket_mb=0.3",
                         "strategy.zero=" + std::to_string(stage), "checkpoint.every_steps=6",
                         "checkpoint.keep_last=0", "logging.log_every=1", "logging.progress=false",
                         "logging.out_dir=" + out.string()});
}

std::vector<torch::Tensor> paramsAt(const fs::path& run, int step, int rank, const TrainConfig& c) {
  return test::checkpointParams(test::checkpointOf(run, step, rank).string(), c);
}

}  // namespace

class ZeroTrainer : public ::testing::TestWithParam<int> {};

TEST_P(ZeroTrainer, ReplicasAgreeAndResumeContinuesExactly) {
  const int stage = GetParam();
  test::TempDir d;
  const auto a = zeroRun(d.path / "a", stage);
  const auto s = test::trainOnThreads(4, a, {});
  SCOPED_TRACE(s.dump());
  EXPECT_EQ(s["ddp"]["zero_stage"], stage);
  EXPECT_GE(s["buckets"].get<int>(), 3);
  for (int step : {6, 12, 14})
    for (int r = 1; r < 4; ++r)
      EXPECT_TRUE(test::sameTensors(paramsAt(d.path / "a", step, 0, a), paramsAt(d.path / "a", step, r, a)))
          << "rank " << r << " step " << step;
  const auto b = zeroRun(d.path / "b", stage);
  test::copyCheckpoints(d.path / "a", d.path / "b", 6, 4);
  TrainOptions resume;
  resume.resume = true;
  test::trainOnThreads(4, b, resume);
  for (int step : {12, 14})
    for (int r = 0; r < 4; ++r)
      EXPECT_TRUE(test::sameTensors(paramsAt(d.path / "a", step, r, a), paramsAt(d.path / "b", step, r, b)))
          << "rank " << r << " step " << step;
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroTrainer, ::testing::Values(1, 2),
                         [](const auto& info) { return "stage" + std::to_string(info.param); });

// A checkpoint of a ZeRO run holds a shard of the optimizer state: DDP cannot resume from it.
TEST(ZeroTrainerResume, DdpCannotResumeAZeroCheckpoint) {
  test::TempDir d;
  const auto a = zeroRun(d.path / "a", 1);
  test::trainOnThreads(4, a, {});
  auto b = zeroRun(d.path / "b", 0);
  test::copyCheckpoints(d.path / "a", d.path / "b", 6, 4);
  TrainOptions resume;
  resume.resume = true;
  EXPECT_THROW(test::trainOnThreads(4, b, resume), std::exception);
}

TEST(ZeroTrainerConfig, ErrorsNameTheKey) {
  auto msg = test::configErrorOf;
  EXPECT_NE(msg({"strategy.zero=3"}).find("strategy.zero"), std::string::npos);
  EXPECT_NE(msg({"strategy.zero=-1"}).find("strategy.zero"), std::string::npos);
  EXPECT_NE(msg({"strategy.zero=1", "strategy.name=ab"}).find("strategy.zero"), std::string::npos);
  EXPECT_NE(msg({"strategy.zero=2", "compress.codec=int8"}).find("compress.codec"), std::string::npos);
}
