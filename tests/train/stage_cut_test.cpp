// Where a run cuts its pipeline (src/train/stage_cut.h): by parameters or measured time, the
// boundaries a checkpoint records and keeps across a resume, and a resume under another cut
// refused naming parallel.balance.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "lowcomm/base/error.h"
#include "lowcomm/nn/models.h"
#include "lowcomm/parallel/bucket.h"
#include "lowcomm/parallel/sharded_model.h"
#include "lowcomm/train/checkpoint.h"
#include "train/rank_threads.h"
#include "train/stage_cut.h"
#include "train/temp_dir.h"

namespace lowcomm::train {
namespace {

TrainConfig gptConfig(const std::string& balance) {
  TrainConfig c;
  c.model.name = "gpt";
  c.data.batch_size = 2;
  c.parallel.pp = 2;
  c.parallel.micro_batches = 2;
  c.parallel.balance = balance;
  return c;
}

std::shared_ptr<nn::Model> gpt() {
  nn::ModelSpec s;
  s.name = "gpt";
  s.classes = 32;
  s.layers = 4;
  s.dim = 32;
  s.heads = 4;
  s.seq_len = 16;
  torch::manual_seed(5);
  return nn::makeModel(s);
}

// A checkpoint of a small module recording `bounds`.
void writeCheckpoint(const std::string& dir, int64_t step, const std::vector<int64_t>& bounds) {
  torch::nn::Linear m(2, 2);
  torch::optim::SGD opt(m->parameters(), torch::optim::SGDOptions(0.1));
  parallel::AllreduceHook hook;
  TrainState st;
  st.step = step;
  st.stage_bounds = bounds;
  saveCheckpoint(checkpointFile(dir, step, 0), *m, opt, st, &hook);
  writeLatest(dir, step);
}

TEST(StageCut, ParamsOrTimeOrTheCheckpoints) {
  test::TempDir d;
  const auto full = gpt();
  std::vector<StageCut> params(2), timed(2), kept(2), fresh(2);
  writeCheckpoint(d.path.string(), 7, {0, 1, 6});
  ASSERT_EQ(readCheckpointStageBounds(checkpointFile(d.path.string(), 7, 0)), (std::vector<int64_t>{0, 1, 6}));
  const auto errors = test::onRankThreads(2, [&](int r, std::shared_ptr<comm::Communicator> world) {
    params[r] = cutStages(gptConfig("params"), *full, *world, 2, d.path.string(), true);
    timed[r] = cutStages(gptConfig("time"), *full, *world, 2, d.path.string(), false);
    kept[r] = cutStages(gptConfig("time"), *full, *world, 2, d.path.string(), true);
    fresh[r] = cutStages(gptConfig("time"), *full, *world, 2, (d.path / "none").string(), true);
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(params[0].unit_weights, parallel::unitParameters(*full));
  EXPECT_EQ(params[0].bounds, parallel::stageBounds(params[0].unit_weights, 2));
  EXPECT_EQ(params[0].weight_unit, "parameters");
  EXPECT_EQ(timed[0].weight_unit, "us");
  ASSERT_EQ(timed[0].unit_weights.size(), 6u);
  EXPECT_EQ(timed[0].bounds, parallel::stageBounds(timed[0].unit_weights, 2));
  EXPECT_EQ(timed[1].bounds, timed[0].bounds) << "every rank cuts where rank 0 measured";
  EXPECT_EQ(kept[0].bounds, (std::vector<int>{0, 1, 6})) << "a resumed run keeps its checkpoint's cut";
  EXPECT_EQ(kept[1].bounds, (std::vector<int>{0, 1, 6}));
  EXPECT_EQ(kept[0].weight_unit, "checkpoint");
  EXPECT_EQ(fresh[0].weight_unit, "us") << "no checkpoint to resume from: measured";
  // A checkpoint written before boundaries were recorded was cut by parameters: so is the resume.
  writeCheckpoint(d.path.string(), 8, {});
  std::vector<StageCut> old(2);
  const auto errors_old = test::onRankThreads(2, [&](int r, std::shared_ptr<comm::Communicator> world) {
    old[r] = cutStages(gptConfig("time"), *full, *world, 2, d.path.string(), true);
  });
  for (const auto& e : errors_old) EXPECT_EQ(e, "");
  EXPECT_EQ(old[0].weight_unit, "parameters");
  EXPECT_EQ(old[1].bounds, params[0].bounds);
  const auto j = timed[0].json("time");
  EXPECT_EQ(j["balance"], "time");
  EXPECT_EQ(j["boundaries"].size(), 3u);
}

TEST(StageCut, AResumeUnderAnotherCutNamesTheKey) {
  test::TempDir d;
  writeCheckpoint(d.path.string(), 3, {0, 1, 6});
  const auto file = checkpointFile(d.path.string(), 3, 0);
  EXPECT_NO_THROW(checkResumedCut(file, {0, 1, 6}));
  try {
    checkResumedCut(file, {0, 3, 6});
    FAIL() << "another cut was accepted";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("parallel.balance"), std::string::npos) << m;
    EXPECT_NE(m.find("[0, 1, 6]"), std::string::npos) << m;
    EXPECT_NE(m.find("[0, 3, 6]"), std::string::npos) << m;
  }
  writeCheckpoint(d.path.string(), 4, {});  // written before cuts were recorded: nothing to compare
  EXPECT_NO_THROW(checkResumedCut(checkpointFile(d.path.string(), 4, 0), {0, 3, 6}));
}

}  // namespace
}  // namespace lowcomm::train
