// Gossip mixing on ranks as threads (real Gloo pairs): every rank's mlp filled with its rank
// number, one mixing, and the values checked against the mixing matrix by hand; the consensus
// distance against its formula; odd rings finish (no cycle of blocking sends); the exponential
// graph's second mixing uses the next power of two; a bad topology is a ConfigError; on a
// tensor-parallel grid (dp 4 x tp 2, the real sharded gpt) the consensus distance is the whole
// model's, equal to the one measured on the unsplit model.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "comm/harness.h"
#include "lowcomm/base/error.h"
#include "lowcomm/nn/models.h"
#include "lowcomm/parallel/gossip.h"
#include "lowcomm/parallel/sharded_model.h"
#include "train/rank_threads.h"

using namespace lowcomm;
using namespace lowcomm::parallel;

namespace {

constexpr double kMlpParams = 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10;

struct Ranks {
  std::vector<std::shared_ptr<nn::Model>> models;
  std::vector<std::unique_ptr<Strategy>> strategies;
};

// n ranks, each holding the value `value(r)` in every parameter after the strategy is built.
Ranks build(int n, const GossipOptions& o, const std::function<float(int)>& value) {
  Ranks rs;
  auto comms = test::makeComms(n);
  rs.models.resize(n);
  rs.strategies.resize(n);
  for (int r = 0; r < n; ++r) rs.models[r] = nn::makeModel({"mlp", 1, 28, 10});
  test::onRanks(n, [&](int r) {
    StrategyContext ctx{comms[r], rs.models[r], nullptr, {}, nullptr, nullptr};
    rs.strategies[r] = makeGossipStrategy(ctx, o);
    torch::NoGradGuard no_grad;
    for (auto& p : rs.models[r]->parameters()) p.fill_(value(r));
  });
  return rs;
}

void mixOnce(Ranks& rs, int64_t step) {
  test::onRanks(static_cast<int>(rs.models.size()), [&](int r) { rs.strategies[r]->afterOptimizerStep(step); });
}

void expectEverywhere(const nn::Model& m, double v) {
  for (const auto& p : m.parameters()) {
    EXPECT_NEAR(p.min().item<double>(), v, 1e-6);
    EXPECT_NEAR(p.max().item<double>(), v, 1e-6);
  }
}

}  // namespace

TEST(Gossip, RingAveragesWithBothNeighbours) {
  GossipOptions o;
  o.consensus_every = 1;
  auto rs = build(4, o, [](int r) { return static_cast<float>(r); });
  mixOnce(rs, 0);
  const double want[4] = {(3 + 0 + 1) / 3.0, (0 + 1 + 2) / 3.0, (1 + 2 + 3) / 3.0, (2 + 3 + 0) / 3.0};
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    expectEverywhere(*rs.models[r], want[r]);
  }
  // The mean stays 1.5; sqrt(mean_r sum_i (x_ri - 1.5)^2) over every parameter value.
  double sq = 0;
  for (double w : want) sq += (w - 1.5) * (w - 1.5);
  const double expected = std::sqrt(sq / 4 * kMlpParams);
  for (int r = 0; r < 4; ++r)
    EXPECT_NEAR(rs.strategies[r]->stepFields()["consensus_distance"].get<double>(), expected, 1e-3 * expected);
}

TEST(Gossip, OddRingFinishes) {
  auto rs = build(3, GossipOptions{}, [](int r) { return static_cast<float>(3 * r); });
  mixOnce(rs, 0);
  for (int r = 0; r < 3; ++r) expectEverywhere(*rs.models[r], 3.0);  // (0 + 3 + 6) / 3 everywhere
}

TEST(Gossip, ExponentialGraphHopsByPowersOfTwo) {
  GossipOptions o;
  o.topology = "exponential";
  auto rs = build(4, o, [](int r) { return static_cast<float>(r); });
  mixOnce(rs, 0);  // from r - 1: (0+3)/2, (1+0)/2, (2+1)/2, (3+2)/2
  const double first[4] = {1.5, 0.5, 1.5, 2.5};
  for (int r = 0; r < 4; ++r) expectEverywhere(*rs.models[r], first[r]);
  mixOnce(rs, 1);  // from r - 2
  for (int r = 0; r < 4; ++r) expectEverywhere(*rs.models[r], (first[r] + first[(r + 2) % 4]) / 2);
}

TEST(Gossip, PeriodSkipsSteps) {
  GossipOptions o;
  o.period = 3;
  auto rs = build(2, o, [](int r) { return static_cast<float>(r); });
  mixOnce(rs, 0);  // step 1 of 3: no mixing
  expectEverywhere(*rs.models[1], 1.0);
  mixOnce(rs, 1);
  mixOnce(rs, 2);  // step 3: mix
  for (int r = 0; r < 2; ++r) expectEverywhere(*rs.models[r], 0.5);
}

// dp rank d adds d to every parameter of the same gpt, then one ring mixing over 4 dp ranks: the
// consensus distance with each rank holding a tensor-parallel half (parameters split over tp 2,
// LayerNorms and biases of row-parallel layers replicated) equals the unsplit model's.
TEST(Gossip, ConsensusOnATensorParallelGridIsTheWholeModels) {
  nn::ModelSpec spec;
  spec.name = "gpt";
  spec.classes = 16;
  spec.layers = 2;
  spec.dim = 16;
  spec.heads = 4;
  spec.seq_len = 8;
  torch::manual_seed(3);
  const auto full = nn::makeModel(spec);
  GossipOptions o;
  o.consensus_every = 1;
  auto run = [&](int tp_size) {
    std::vector<double> got(4 * tp_size, -1);
    const auto errors = test::onRankThreads(4 * tp_size, [&](int rank, std::shared_ptr<comm::Communicator> world) {
      const int d = rank / tp_size, t = rank % tp_size;
      auto tp = world->split(d, t);
      auto dp = world->split(t, d);
      std::shared_ptr<ShardedModel> shard = makeShardedModel(*full, tp);
      StrategyContext ctx{dp, shard, nullptr, {}, nullptr, nullptr};
      ctx.shard = shard.get();
      ctx.tensor = tp;
      auto gossip = makeGossipStrategy(ctx, o);
      {
        torch::NoGradGuard no_grad;
        for (auto& p : shard->parameters()) p.add_(static_cast<float>(d));
      }
      gossip->afterOptimizerStep(0);
      got[rank] = gossip->stepFields()["consensus_distance"].get<double>();
    });
    for (const auto& e : errors) EXPECT_EQ(e, "");
    return got;
  };
  const auto whole = run(1), split = run(2);
  // After the mixing rank d holds x + (d-1 + d + d+1)/3 (mod 4) offsets: 4/3, 1, 2, 5/3 around
  // a mean of 1.5, so the distance is sqrt(mean of squared offsets x parameter count).
  double sq = 0;
  for (double w : {4 / 3.0, 1.0, 2.0, 5 / 3.0}) sq += (w - 1.5) * (w - 1.5);
  int64_t n = 0;
  for (const auto& p : full->parameters()) n += p.numel();
  const double expected = std::sqrt(sq / 4 * static_cast<double>(n));
  for (double c : whole) EXPECT_NEAR(c, expected, 1e-4 * expected);
  for (double c : split) EXPECT_NEAR(c, expected, 1e-4 * expected);
}

TEST(Gossip, BadOptionsNameTheKey) {
  auto msg = [](const GossipOptions& o, int world) {
    try {
      validateGossipOptions(o, world);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  GossipOptions o;
  o.topology = "exponential";
  EXPECT_NE(msg(o, 6).find("gossip.topology"), std::string::npos);
  EXPECT_EQ(msg(o, 8), "no error");
  o.topology = "star";
  EXPECT_NE(msg(o, 4).find("gossip.topology"), std::string::npos);
  o = GossipOptions{};
  o.period = 0;
  EXPECT_NE(msg(o, 4).find("gossip.period"), std::string::npos);
}
