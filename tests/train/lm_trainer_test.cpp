// The trainer on the language-modelling task: a gpt on real text (Debian's Python standard
// library) learns and reports bits per byte, resumes bit-identically (tied head), and runs under
// data parallelism and AB-training on ranks as threads.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>

#include "lowcomm/train/config.h"
#include "lowcomm/train/trainer.h"
#include "train/checkpoint_params.h"
#include "train/temp_dir.h"
#include "train/trainer_threads.h"

using namespace lowcomm;
using namespace lowcomm::train;
namespace fs = std::filesystem;

namespace {

const char* kCorpus = "/usr/lib/python3.11";

// A small gpt on the modules starting with "a" (abc, argparse, ast, ...: 7 files, 0.23 MB; the last, asyncore.py, is validation).
TrainConfig lmRun(const fs::path& out, int64_t steps, std::vector<std::string> more = {}) {
  std::vector<std::string> sets = {"model.name=gpt", "model.layers=2", "model.dim=32", "model.heads=2",
                                   "model.seq_len=32", "data.dataset=text", std::string("data.dir=") + kCorpus,
                                   "data.glob=a*.py", "data.batch_size=16", "data.test_batch_size=64",
                                   "data.test_limit=256", "optimizer.name=adamw", "optimizer.lr=0.003",
                                   "schedule.epochs=100", "schedule.max_steps=" + std::to_string(steps),
                                   "logging.log_every=5", "logging.eval_every=20", "logging.progress=false",
                                   "logging.out_dir=" + out.string()};
  sets.insert(sets.end(), more.begin(), more.end());
  return loadConfig("", sets);
}

bool haveCorpus() { return fs::exists(fs::path(kCorpus) / "abc.py"); }

}  // namespace

TEST(LmTrainer, LearnsAndReportsBitsPerByte) {
  if (!haveCorpus()) GTEST_SKIP() << kCorpus << " is not installed";
  test::TempDir d;
  const auto s = test::trainOnThreads(1, lmRun(d.path / "run", 60), {});
  const double bpb = s["bits_per_byte"].get<double>();
  EXPECT_NEAR(bpb, s["test_loss"].get<double>() / std::log(2.0), 1e-12);
  EXPECT_LT(bpb, 5.0) << s.dump();  // from 8 bits (uniform over 256 bytes) in 60 steps
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.15);  // next-byte accuracy
  const auto evals = test::jsonlRecords(d.path / "run/metrics.jsonl", "eval");
  ASSERT_GE(evals.size(), 3u);
  EXPECT_GT(evals.front()["bits_per_byte"].get<double>(), evals.back()["bits_per_byte"].get<double>());
  EXPECT_EQ(evals.back()["samples"], 256 * 32);  // tokens evaluated
}

TEST(LmTrainer, TiedHeadResumesBitIdentically) {
  if (!haveCorpus()) GTEST_SKIP() << kCorpus << " is not installed";
  test::TempDir d;
  const auto a = lmRun(d.path / "a", 12, {"model.tied=true", "checkpoint.every_steps=6"});
  test::trainOnThreads(1, a, {});
  const auto b = lmRun(d.path / "b", 12, {"model.tied=true", "checkpoint.every_steps=6"});
  test::copyCheckpoints(d.path / "a", d.path / "b", 6, 1);
  TrainOptions resume;
  resume.resume = true;
  test::trainOnThreads(1, b, resume);
  EXPECT_TRUE(test::sameTensors(test::checkpointParams(test::checkpointOf(d.path / "a", 12, 0).string(), a),
                                test::checkpointParams(test::checkpointOf(d.path / "b", 12, 0).string(), b)));
}

// Data parallelism and AB-training (the blocks' Linear layers factorised) on 2 ranks.
TEST(LmTrainer, DdpAndAbOnTwoRanks) {
  if (!haveCorpus()) GTEST_SKIP() << kCorpus << " is not installed";
  test::TempDir d;
  const auto ddp = test::trainOnThreads(2, lmRun(d.path / "ddp", 20), {});
  EXPECT_LT(ddp["bits_per_byte"].get<double>(), 6.5);
  const auto ab = test::trainOnThreads(
      2, lmRun(d.path / "ab", 20,
               {"strategy.name=ab", "ab.warmup_steps=6", "ab.steps_btw_syncing=6", "ab.ddp_steps_after_sync=1",
                "ab.sync_mode=only-b", "ab.low_rank_cutoff=0.5"}),
      {});
  EXPECT_LT(ab["bits_per_byte"].get<double>(), 7.5) << ab["ab"].dump();  // 8 bits: uniform
  const auto layers = ab["ab"]["ranks"];
  EXPECT_EQ(layers.size(), 8u) << ab["ab"].dump();  // qkv, proj, fc1, fc2 of 2 blocks
  std::cout << "[ ab ] " << ab["ab"]["ranks"].dump() << " bits per byte " << ab["bits_per_byte"] << "\n";
}
