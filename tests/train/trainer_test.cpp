// The trainer end to end in one process (world 1): learning happens, outputs are written, and
// a run resumed from a mid-run checkpoint ends bit-identical to the uninterrupted run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "lowcomm/base/error.h"
#include "train/checkpoint_params.h"
#include "train/temp_dir.h"
#include "lowcomm/nn/models.h"
#include "lowcomm/train/checkpoint.h"
#include "lowcomm/train/config.h"
#include "lowcomm/train/optim.h"
#include "lowcomm/train/trainer.h"

using namespace lowcomm;
using namespace lowcomm::train;
namespace fs = std::filesystem;

namespace {
using Dir = test::TempDir;

std::shared_ptr<comm::Communicator> single() {
  net::TransportOptions t;
  t.address = "127.0.0.1";
  return comm::Communicator::create(std::make_shared<net::MemoryStore>(), 0, 1, {}, t);
}

TrainConfig smallRun(const fs::path& out, int64_t max_steps) {
  return loadConfig("", {"data.dataset=synthetic", "model.name=mlp", "data.batch_size=32", "data.train_limit=1024",
                         "data.test_limit=512", "schedule.epochs=100", "schedule.max_steps=" + std::to_string(max_steps),
                         "schedule.name=cosine", "optimizer.name=adamw", "optimizer.lr=0.002", "checkpoint.every_steps=6",
                         "logging.log_every=2", "logging.progress=false", "strategy.accumulation=2",
                         "logging.out_dir=" + out.string()});
}

std::vector<torch::Tensor> paramsOf(const fs::path& ckpt, const TrainConfig& c) {
  return test::checkpointParams(ckpt.string(), c);
}
}  // namespace

TEST(Trainer, LearnsAndWritesEveryOutput) {
  Dir d;
  const auto c = smallRun(d.path / "run", 40);
  TrainOptions o;
  o.summary_path = (d.path / "s.json").string();
  o.timeline_path = (d.path / "t.json").string();
  const auto s = runTraining(c, single(), o);
  EXPECT_EQ(s["steps"], 40);
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.5) << s.dump();  // 10 classes: chance is 0.1
  for (const char* f : {"run/config.toml", "run/metrics.jsonl", "run/summary.json", "run/model_state.pt", "s.json",
                        "t.json", "run/checkpoints/latest"})
    EXPECT_TRUE(fs::exists(d.path / f)) << f;
  std::ifstream m(d.path / "run/metrics.jsonl");
  int steps = 0, evals = 0;
  for (std::string line; std::getline(m, line);) {
    auto j = nlohmann::json::parse(line);
    steps += j["type"] == "step";
    evals += j["type"] == "eval";
  }
  EXPECT_EQ(steps, 20);  // every 2 steps
  EXPECT_GE(evals, 1);
  auto t = nlohmann::json::parse(std::ifstream(d.path / "t.json"));
  int forward = 0;
  for (const auto& e : t["traceEvents"]) forward += e.value("name", "") == "forward";
  EXPECT_EQ(forward, 80);  // 40 steps x 2 micro-batches
  // The resolved config reloads to the same configuration.
  EXPECT_EQ(toToml(loadConfig((d.path / "run/config.toml").string())), toToml(c));
}

TEST(Trainer, ResumeContinuesExactlyWhereItStopped) {
  Dir d;
  const auto a = smallRun(d.path / "a", 18);
  runTraining(a, single(), {});
  // Run b "crashed" right after its step-6 checkpoint: same files, latest = 6.
  const auto b = smallRun(d.path / "b", 18);
  fs::create_directories(d.path / "b/checkpoints");
  fs::copy_file(d.path / "a/checkpoints/step6.rank0.pt", d.path / "b/checkpoints/step6.rank0.pt");
  writeLatest((d.path / "b/checkpoints").string(), 6);
  TrainOptions resume;
  resume.resume = true;
  const auto s = runTraining(b, single(), resume);
  EXPECT_EQ(s["steps"], 18);
  const auto pa = paramsOf(d.path / "a/checkpoints/step18.rank0.pt", a);
  const auto pb = paramsOf(d.path / "b/checkpoints/step18.rank0.pt", b);
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i])) << "parameter " << i;
}

TEST(Trainer, ResumeWithoutCheckpointOrWithAnotherModelIsAConfigError) {
  Dir d;
  TrainOptions resume;
  resume.resume = true;
  EXPECT_THROW(runTraining(smallRun(d.path / "none", 4), single(), resume), ConfigError);
  runTraining(smallRun(d.path / "x", 6), single(), {});
  auto other = smallRun(d.path / "x", 8);
  other.data.batch_size = 16;
  EXPECT_THROW(runTraining(other, single(), resume), ConfigError);
}

// A run that "crashed" after step 18's records but resumes from its step-6 checkpoint drops the
// records written after that checkpoint: metrics.jsonl has every step once.
TEST(Trainer, ResumedMetricsDoNotRepeatSteps) {
  Dir d;
  auto c = smallRun(d.path / "a", 18);
  c.logging.eval_every = 4;
  runTraining(c, single(), {});
  writeLatest((d.path / "a/checkpoints").string(), 6);
  TrainOptions resume;
  resume.resume = true;
  runTraining(c, single(), resume);
  std::map<std::string, int> seen;
  std::vector<int64_t> checkpoints;
  std::ifstream m(d.path / "a/metrics.jsonl");
  for (std::string line; std::getline(m, line);) {
    auto j = nlohmann::json::parse(line);
    const std::string type = j["type"];
    if (type == "checkpoint") checkpoints.push_back(j["step"]);
    else ++seen[type + " " + std::to_string(j["step"].get<int64_t>())];
  }
  EXPECT_EQ(seen["step 2"], 1);
  EXPECT_EQ(seen["step 8"], 1);
  EXPECT_EQ(seen["step 18"], 1);
  EXPECT_EQ(seen["eval 4"], 1);
  EXPECT_EQ(seen["eval 12"], 1);
  for (const auto& [k, n] : seen) EXPECT_EQ(n, 1) << k << " written " << n << " times";
  EXPECT_EQ(checkpoints, (std::vector<int64_t>{6, 12, 18}));  // 6 kept, then the resumed run's
}

// checkpoint.keep_last: only the newest checkpoints stay, and `latest` names one of them.
TEST(Trainer, KeepLastRemovesOlderCheckpoints) {
  Dir d;
  auto c = smallRun(d.path / "k", 18);
  c.checkpoint.keep_last = 2;
  runTraining(c, single(), {});
  EXPECT_FALSE(fs::exists(d.path / "k/checkpoints/step6.rank0.pt"));
  EXPECT_TRUE(fs::exists(d.path / "k/checkpoints/step12.rank0.pt"));
  EXPECT_TRUE(fs::exists(d.path / "k/checkpoints/step18.rank0.pt"));
  EXPECT_EQ(readLatest((d.path / "k/checkpoints").string()), 18);
}

// A fresh run in a directory that holds an older run's checkpoints removes their `latest` before
// training: when it dies before its own first checkpoint (here its first write fails), --resume
// finds no checkpoint instead of continuing the older run.
TEST(Trainer, FreshRunDoesNotLeaveAStaleLatest) {
  Dir d;
  runTraining(smallRun(d.path / "x", 12), single(), {});
  ASSERT_EQ(readLatest((d.path / "x/checkpoints").string()), 12);
  fs::create_directories(d.path / "x/checkpoints/step6.rank0.pt.tmp");  // its first checkpoint cannot be written
  EXPECT_THROW(runTraining(smallRun(d.path / "x", 12), single(), {}), IoError);
  EXPECT_EQ(readLatest((d.path / "x/checkpoints").string()), -1);
  TrainOptions resume;
  resume.resume = true;
  EXPECT_THROW(runTraining(smallRun(d.path / "x", 12), single(), resume), ConfigError);
}

// Compressor state (residuals, PowerSGD factors, DGC momentum, auto decisions, step counters)
// travels in the checkpoint: a resumed compressed run ends bit-identical too.
class CompressedResume : public ::testing::TestWithParam<std::string> {};

TEST_P(CompressedResume, ContinuesExactly) {
  Dir d;
  auto run = [&](const std::string& name) {
    auto c = smallRun(d.path / name, 14);
    c.compress = loadConfig("", {"optimizer.name=adamw", "compress.codec=" + GetParam(), "compress.start_step=2",
                                 "compress.rank=2",
                                 "compress.auto_trial_steps=1", "compress.auto_candidates=topk,powersgd",
                                 "compress.ratio=0.05"})
                     .compress;
    return c;
  };
  const auto a = run("a");
  const auto sa = runTraining(a, single(), {});
  // auto may keep raw allreduce for a bucket; its trials still compressed some steps.
  const double min_ratio = GetParam() == "auto" ? 1.0 : GetParam() == "fp16" ? 1.9 : 2.5;
  EXPECT_GT(sa["compression"]["ratio"].get<double>(), min_ratio) << sa.dump();
  const auto b = run("b");
  fs::create_directories(d.path / "b/checkpoints");
  fs::copy_file(d.path / "a/checkpoints/step6.rank0.pt", d.path / "b/checkpoints/step6.rank0.pt");
  writeLatest((d.path / "b/checkpoints").string(), 6);
  TrainOptions resume;
  resume.resume = true;
  runTraining(b, single(), resume);
  const auto pa = paramsOf(d.path / "a/checkpoints/step14.rank0.pt", a);
  const auto pb = paramsOf(d.path / "b/checkpoints/step14.rank0.pt", b);
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i])) << GetParam() << " parameter " << i;
}

INSTANTIATE_TEST_SUITE_P(Codecs, CompressedResume,
                         ::testing::Values("fp16", "topk", "dgc", "onebit", "signum", "demo", "powersgd", "auto"));

TEST(Trainer, EvalEveryAddsEvaluationsWithoutChangingTraining) {
  Dir d;
  auto plain = smallRun(d.path / "plain", 40);
  auto often = smallRun(d.path / "often", 40);
  often.logging.eval_every = 6;
  runTraining(plain, single(), {});
  runTraining(often, single(), {});
  auto evalSteps = [&](const char* run) {
    std::vector<int64_t> steps;
    std::ifstream m(d.path / run / "metrics.jsonl");
    for (std::string line; std::getline(m, line);) {
      auto j = nlohmann::json::parse(line);
      if (j["type"] == "eval") steps.push_back(j["step"].get<int64_t>());
    }
    return steps;
  };
  // 16 steps per epoch (1024 samples / 32 / accumulation 2): epoch ends at 16 and 32, the end at 40;
  // every 6 steps besides, without a second evaluation where an epoch ends anyway.
  EXPECT_EQ(evalSteps("plain"), (std::vector<int64_t>{16, 32, 40}));
  EXPECT_EQ(evalSteps("often"), (std::vector<int64_t>{6, 12, 16, 18, 24, 30, 32, 36, 40}));
  const auto pa = paramsOf(d.path / "plain/checkpoints/step40.rank0.pt", plain);
  const auto pb = paramsOf(d.path / "often/checkpoints/step40.rank0.pt", often);
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i])) << "parameter " << i;
  EXPECT_THROW(loadConfig("", {"logging.eval_every=-1"}), ConfigError);
}

// A resume continues the learning-rate curve it resumes: another optimizer.lr or schedule is a
// ConfigError naming them; a larger schedule.max_steps (extending the run) is not.
TEST(Trainer, ResumeWithAnotherLrOrScheduleIsAConfigErrorButALongerRunIsNot) {
  Dir d;
  runTraining(smallRun(d.path / "x", 6), single(), {});
  TrainOptions resume;
  resume.resume = true;
  for (const char* set : {"optimizer.lr=0.01", "schedule.name=constant", "schedule.warmup_steps=2"}) {
    auto other = smallRun(d.path / "x", 12);
    other = loadConfig("", {"data.dataset=synthetic", "model.name=mlp", "data.batch_size=32", "data.train_limit=1024",
                            "data.test_limit=512", "schedule.epochs=100", "schedule.max_steps=12", "schedule.name=cosine",
                            "optimizer.name=adamw", "optimizer.lr=0.002", "checkpoint.every_steps=6", "logging.log_every=2",
                            "logging.progress=false", "strategy.accumulation=2",
                            "logging.out_dir=" + (d.path / "x").string(), set});
    try {
      runTraining(other, single(), resume);
      ADD_FAILURE() << set << ": resumed with another learning-rate curve";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("optimizer.lr or schedule"), std::string::npos) << set << ": " << e.what();
    }
  }
  const auto s = runTraining(smallRun(d.path / "x", 12), single(), resume);
  EXPECT_EQ(s["steps"], 12);
}
