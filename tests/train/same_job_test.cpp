// Ranks started with different configs or data refuse to train, naming the rank and the keys;
// ranks that would resume from different checkpoints refuse too.
#include <gtest/gtest.h>

#include <filesystem>

#include "lowcomm/base/error.h"
#include "lowcomm/train/checkpoint.h"
#include "lowcomm/train/config.h"
#include "lowcomm/train/same_job.h"
#include "lowcomm/train/trainer.h"
#include "train/rank_threads.h"
#include "train/temp_dir.h"

using namespace lowcomm;
using namespace lowcomm::train;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> onThreads(int n, const std::function<void(int, std::shared_ptr<comm::Communicator>)>& fn) {
  return test::onRankThreads(n, fn, 30);
}

TrainConfig run(const fs::path& out, std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = {"data.dataset=synthetic", "model.name=mlp", "data.batch_size=16",
                                   "data.train_limit=256", "data.test_limit=64", "schedule.max_steps=2",
                                   "logging.progress=false", "logging.out_dir=" + out.string()};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return loadConfig("", sets);
}

}  // namespace

TEST(SameJob, DescriptionQualifiesKeysAndSkipsPerHostOnes) {
  const auto c = loadConfig("", {"comm.iface=eth7", "data.dir=/local/data"});
  const std::string d = jobDescription(toToml(c), 100, 10, 4);
  EXPECT_NE(d.find("optimizer.lr = "), std::string::npos) << d;
  EXPECT_NE(d.find("seed = 42"), std::string::npos) << d;
  EXPECT_NE(d.find("data.train_size = 100\n"), std::string::npos) << d;
  EXPECT_NE(d.find("world_size = 4\n"), std::string::npos) << d;
  EXPECT_EQ(d.find("eth7"), std::string::npos) << d;
  EXPECT_EQ(d.find("/local/data"), std::string::npos) << d;
}

TEST(SameJob, EqualDescriptionsPass) {
  const auto errors = onThreads(3, [](int, auto w) { checkSameJob(*w, "a = 1\nb = 2\n"); });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(SameJob, EveryRankNamesTheDifferingRankAndKeys) {
  const auto errors = onThreads(3, [](int r, auto w) {
    checkSameJob(*w, r == 2 ? "a = 1\nb = 3\nc = 4\n" : "a = 1\nb = 2\n");
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(errors[r].find("MismatchError"), std::string::npos) << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("rank 2: b (2 on rank 0, 3 on rank 2), c (<missing> on rank 0, 4 on rank 2)"),
              std::string::npos) << errors[r];
    EXPECT_EQ(errors[r].find("rank 1:"), std::string::npos) << errors[r];
  }
}

// Through the trainer: rank 1 has another learning rate and another training-set size. Every
// rank fails at start (no hang until the timeout) and nothing is written.
TEST(SameJob, TrainerRefusesRanksWithDifferentConfigs) {
  test::TempDir d;
  const auto errors = onThreads(2, [&](int r, auto w) {
    const auto c = r == 0 ? run(d.path / "out") : run(d.path / "out", {"optimizer.lr=0.1", "data.train_limit=128"});
    runTraining(c, w, {});
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("MismatchError"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("rank 1: "), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("optimizer.lr (0.05"), std::string::npos) << errors[r];  // printed at full precision
    EXPECT_NE(errors[r].find(" on rank 0, 0.1"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("data.train_size (256 on rank 0, 128 on rank 1)"), std::string::npos) << errors[r];
  }
  EXPECT_FALSE(fs::exists(d.path / "out")) << "a refused job wrote its output directory";
}

// Resume: every rank must load the checkpoint `latest` names, with the weights the others hold
// (data parallelism). A stale or foreign file on one rank is a DataError naming that rank.
TEST(SameJob, ResumeRefusesAStaleOrForeignCheckpointOnOneRank) {
  test::TempDir d;
  const auto a = run(d.path / "a", {"schedule.max_steps=12", "checkpoint.every_steps=6"});
  const auto b = run(d.path / "b", {"schedule.max_steps=12", "checkpoint.every_steps=6", "optimizer.weight_decay=0.5"});
  for (const auto& c : {a, b}) {
    const auto errors = onThreads(2, [&](int, auto w) { runTraining(c, w, {}); });
    ASSERT_EQ(errors[0] + errors[1], "");
  }
  const fs::path ck = d.path / "a/checkpoints";
  auto resumeA = [&] {
    writeLatest(ck.string(), 6);
    TrainOptions o;
    o.resume = true;
    return onThreads(2, [&](int, auto w) { runTraining(a, w, o); });
  };
  fs::copy_file(ck / "step6.rank1.pt", d.path / "good6.pt");
  fs::copy_file(d.path / "b/checkpoints/step6.rank1.pt", ck / "step6.rank1.pt", fs::copy_options::overwrite_existing);
  auto errors = resumeA();
  for (const auto& e : errors) EXPECT_NE(e.find("rank 1's checkpoint of step 6 holds other weights"), std::string::npos) << e;
  fs::copy_file(ck / "step12.rank1.pt", ck / "step6.rank1.pt", fs::copy_options::overwrite_existing);
  errors = resumeA();
  for (const auto& e : errors) EXPECT_NE(e.find("rank 1 loaded step 12"), std::string::npos) << e;
  fs::copy_file(d.path / "good6.pt", ck / "step6.rank1.pt", fs::copy_options::overwrite_existing);
  errors = resumeA();
  EXPECT_EQ(errors[0] + errors[1], "");
}
