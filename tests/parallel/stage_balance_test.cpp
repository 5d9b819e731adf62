// Per-unit times for cutting pipeline stages by time (stage_balance.h), on real models and ranks
// as threads (real Gloo pairs): one time per unit, a transformer block slower than the embedding
// lookup, the caller's gradients and global RNG untouched, and every rank of a world handed rank
// 0's measurement.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "lowcomm/nn/models.h"
#include "lowcomm/parallel/sharded_model.h"
#include "lowcomm/parallel/stage_balance.h"
#include "train/rank_threads.h"

namespace lowcomm::parallel {
namespace {

nn::ModelSpec gpt(int layers) {
  nn::ModelSpec s;
  s.name = "gpt";
  s.classes = 256;
  s.layers = layers;
  s.dim = 64;
  s.heads = 4;
  s.seq_len = 128;
  return s;
}

void expectNoErrors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(StageBalance, TimesEveryUnitAndLeavesGradientsAndRngAlone) {
  torch::manual_seed(3);
  const auto full = nn::makeModel(gpt(2));
  expectNoErrors(test::onRankThreads(1, [&](int, std::shared_ptr<comm::Communicator> self) {
    auto model = makeShardedModel(*full, self);
    for (auto& p : model->parameters()) p.mutable_grad() = torch::full_like(p, 0.5);
    auto gen = at::detail::getDefaultCPUGenerator();
    const auto rng = gen.get_state();
    const auto want_draw = torch::rand({4});
    gen.set_state(rng);

    const auto t = measureUnitTimes(*model, 4, 3);
    ASSERT_EQ(t.size(), 4u);  // embedding, 2 blocks, head
    for (auto x : t) EXPECT_GE(x, 1);
    // A block's matmuls and 128 x 128 attention against a table lookup: far more than 2x.
    EXPECT_GT(t[1], 2 * t[0]) << t[0] << " " << t[1];
    EXPECT_GT(t[2], 2 * t[0]) << t[0] << " " << t[2];
    EXPECT_TRUE(torch::equal(torch::rand({4}), want_draw)) << "the global RNG moved";
    for (auto& p : model->parameters()) EXPECT_TRUE(torch::equal(p.grad(), torch::full_like(p, 0.5)));
  }));
}

TEST(StageBalance, EveryRankGetsRankZerosTimesAndTheModelStays) {
  torch::manual_seed(4);
  const auto full = nn::makeModel(gpt(3));
  std::vector<torch::Tensor> before;
  for (const auto& p : full->parameters()) before.push_back(p.detach().clone());
  std::vector<std::vector<int64_t>> got(3);
  expectNoErrors(test::onRankThreads(3, [&](int rank, std::shared_ptr<comm::Communicator> world) {
    got[rank] = measuredUnitTimes(*full, *world, 2, 3);
  }));
  ASSERT_EQ(got[0].size(), 5u);
  for (auto x : got[0]) EXPECT_GE(x, 1);
  EXPECT_EQ(got[1], got[0]);
  EXPECT_EQ(got[2], got[0]);
  const auto bounds = stageBounds(got[0], 3);
  EXPECT_EQ(bounds.size(), 4u);
  size_t i = 0;
  for (const auto& p : full->parameters()) EXPECT_TRUE(torch::equal(p, before[i++]));
}

// Each unit's time is reported as it is known; a budget of 0 s leaves one timed round per unit,
// a large one all of them.
TEST(StageBalance, ABudgetCutsTheRoundsPerUnit) {
  torch::manual_seed(5);
  const auto full = nn::makeModel(gpt(2));
  expectNoErrors(test::onRankThreads(1, [&](int, std::shared_ptr<comm::Communicator> self) {
    auto model = makeShardedModel(*full, self);
    for (const auto& [budget, rounds] : {std::pair<double, int>{0.0, 1}, {1e9, 3}}) {
      std::vector<int> order, got_rounds;
      const auto t = measureUnitTimes(*model, 2, 3, [&](int u, int64_t us, int r) {
        order.push_back(u);
        got_rounds.push_back(r);
        EXPECT_GE(us, 1);
      }, budget);
      EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
      EXPECT_EQ(got_rounds, std::vector<int>(4, rounds)) << "budget " << budget;
    }
  }));
}

// Rank 0 failing while it times the units: the others get an error naming parallel.balance and
// the unit they waited for, not a hang or a bare closed connection.
TEST(StageBalance, AFailureOnRankZeroReachesTheOthers) {
  const auto full = nn::makeModel(gpt(2));
  const auto errors = test::onRankThreads(3, [&](int, std::shared_ptr<comm::Communicator> world) {
    measuredUnitTimes(*full, *world, /*micro_batch=*/0, 3);  // rank 0 refuses a micro-batch of 0
  });
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_NE(errors[0].find("micro_batch"), std::string::npos) << errors[0];
  for (int r = 1; r < 3; ++r) {
    EXPECT_NE(errors[r].find("parallel.balance"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("unit 0"), std::string::npos) << errors[r];
  }
}

TEST(StageBalance, AModelOfSeveralStagesIsRefused) {
  const auto full = nn::makeModel(gpt(2));
  const auto errors = test::onRankThreads(2, [&](int rank, std::shared_ptr<comm::Communicator> pp) {
    auto tp = pp->split(rank, 0);
    auto stage = makeShardedModel(*full, tp, pp);
    measureUnitTimes(*stage, 2, 1);
  });
  for (const auto& e : errors) EXPECT_NE(e.find("every unit in one stage"), std::string::npos) << e;
}

}  // namespace
}  // namespace lowcomm::parallel
