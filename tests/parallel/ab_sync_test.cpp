// AB-training groups (formGroups, parseSyncMode) and the periodic sync (abSync) with ranks as
// threads on known factor values; the rank agreement of truncation (ranksAbove + max allreduce).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "comm/harness.h"
#include "lowcomm/base/error.h"
#include "lowcomm/nn/low_rank.h"
#include "lowcomm/nn/models.h"
#include "lowcomm/parallel/ab_groups.h"

using namespace lowcomm;
using namespace lowcomm::parallel;

namespace {

// ---------------------------------------------------------------------------------------------
// formGroups

TEST(AbGroups, LayoutInvariantsForEveryWorldAndGroupSize) {
  for (int world = 1; world <= 8; ++world)
    for (int gs : {kGroupHalves, kGroupWorld, 1, 2, 3, 4, 8, 10})
      for (bool all_b : {false, true}) {
        SCOPED_TRACE("world " + std::to_string(world) + " group_size " + std::to_string(gs) +
                     (all_b ? " all_b" : ""));
        const int halves = (world >= 2 && !all_b) ? 2 : 1;  // the reference's -1
        const int want_groups = gs == kGroupHalves ? halves : (gs < 0 || gs >= world) ? 1 : world / gs;
        const AbGroups g0 = formGroups(world, 0, gs, all_b);
        ASSERT_EQ(g0.groups, want_groups);
        ASSERT_EQ(g0.a_groups, all_b ? 0 : want_groups / 2);
        ASSERT_EQ(static_cast<int>(g0.group_of.size()), world);
        ASSERT_EQ(static_cast<int>(g0.a_rank.size()), world);
        // Contiguous, starting at group 0, every group non-empty and covered once.
        std::vector<int> sizes(want_groups, 0);
        for (int r = 0; r < world; ++r) {
          ASSERT_GE(g0.group_of[r], 0);
          ASSERT_LT(g0.group_of[r], want_groups);
          if (r > 0) {
            ASSERT_TRUE(g0.group_of[r] == g0.group_of[r - 1] || g0.group_of[r] == g0.group_of[r - 1] + 1);
          }
          ++sizes[g0.group_of[r]];
        }
        EXPECT_EQ(g0.group_of.front(), 0);
        EXPECT_EQ(g0.group_of.back(), want_groups - 1);
        const auto [mn, mx] = std::minmax_element(sizes.begin(), sizes.end());
        EXPECT_GE(*mn, 1);
        EXPECT_LE(*mx - *mn, 1);
        EXPECT_TRUE(std::is_sorted(sizes.rbegin(), sizes.rend())) << "leftover ranks go to the first groups";
        for (int r = 0; r < world; ++r) {
          const AbGroups g = formGroups(world, r, gs, all_b);
          EXPECT_EQ(g.group_of, g0.group_of);
          EXPECT_EQ(g.a_rank, g0.a_rank);
          EXPECT_EQ(g.groups, g0.groups);
          EXPECT_EQ(g.a_groups, g0.a_groups);
          EXPECT_EQ(g.group, g0.group_of[r]);
          EXPECT_EQ(bool(g0.a_rank[r]), g0.group_of[r] < g0.a_groups);
          EXPECT_EQ(g.trains_a, bool(g0.a_rank[r]));
          std::vector<int> members;
          for (int q = 0; q < world; ++q)
            if (g0.group_of[q] == g.group) members.push_back(q);
          EXPECT_EQ(g.members, members);
          EXPECT_TRUE(std::find(g.members.begin(), g.members.end(), r) != g.members.end());
        }
      }
}

std::vector<std::vector<int>> layout(int world, int gs, bool all_b = false) {
  const AbGroups g = formGroups(world, 0, gs, all_b);
  std::vector<std::vector<int>> out(g.groups);
  for (int r = 0; r < world; ++r) out[g.group_of[r]].push_back(r);
  return out;
}

TEST(AbGroups, ExactLayouts) {
  using V = std::vector<std::vector<int>>;
  EXPECT_EQ(layout(5, 2), (V{{0, 1, 2}, {3, 4}}));
  EXPECT_EQ(formGroups(5, 0, 2, false).a_groups, 1);
  EXPECT_TRUE(formGroups(5, 2, 2, false).trains_a);
  EXPECT_FALSE(formGroups(5, 3, 2, false).trains_a);
  EXPECT_EQ(formGroups(5, 4, 2, false).members, (std::vector<int>{3, 4}));

  EXPECT_EQ(layout(4, 2), (V{{0, 1}, {2, 3}}));
  EXPECT_EQ(formGroups(4, 1, 2, false).a_rank, (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(formGroups(4, 1, 2, true).a_rank, (std::vector<bool>{false, false, false, false}));

  EXPECT_EQ(layout(7, 2), (V{{0, 1, 2}, {3, 4}, {5, 6}}));
  EXPECT_EQ(formGroups(7, 0, 2, false).a_groups, 1);
  EXPECT_EQ(layout(8, 3), (V{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(layout(8, 2), (V{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(formGroups(8, 3, 2, false).a_groups, 2);
  EXPECT_TRUE(formGroups(8, 3, 2, false).trains_a);
  EXPECT_FALSE(formGroups(8, 4, 2, false).trains_a);
  // The reference's -1: two halves (A, then B); one global group with only-b.
  EXPECT_EQ(layout(6, -1), (V{{0, 1, 2}, {3, 4, 5}}));
  EXPECT_EQ(layout(5, -1), (V{{0, 1, 2}, {3, 4}}));
  EXPECT_EQ(formGroups(6, 0, -1, false).a_rank, (std::vector<bool>{true, true, true, false, false, false}));
  EXPECT_EQ(layout(6, -1, /*all_b=*/true), (V{{0, 1, 2, 3, 4, 5}}));
  EXPECT_EQ(layout(6, kGroupWorld), (V{{0, 1, 2, 3, 4, 5}}));

  // One group trains B.
  const AbGroups one = formGroups(3, 1, kGroupWorld, false);
  EXPECT_EQ(one.groups, 1);
  EXPECT_EQ(one.a_groups, 0);
  EXPECT_FALSE(one.trains_a);
  EXPECT_EQ(one.members, (std::vector<int>{0, 1, 2}));
}

// "node": one group per node whatever the ranks' order; on one node, two halves of it.
TEST(AbGroups, NodeGroupsFollowTheHostKeys) {
  using V = std::vector<std::vector<int>>;
  auto nodes = [](int world, const std::vector<int>& node_of, bool all_b = false) {
    const AbGroups g = formGroups(world, 0, kGroupNode, all_b, node_of);
    V out(g.groups);
    for (int r = 0; r < world; ++r) out[g.group_of[r]].push_back(r);
    return std::make_pair(out, g.a_groups);
  };
  EXPECT_EQ(nodes(4, {0, 0, 1, 1}), std::make_pair(V{{0, 1}, {2, 3}}, 1));
  EXPECT_EQ(nodes(8, {0, 0, 1, 1, 2, 2, 3, 3}), std::make_pair(V{{0, 1}, {2, 3}, {4, 5}, {6, 7}}, 2));
  EXPECT_EQ(nodes(4, {0, 1, 0, 1}), std::make_pair(V{{0, 2}, {1, 3}}, 1));  // round-robin placement
  EXPECT_EQ(nodes(4, {0, 0, 1, 1}, true), std::make_pair(V{{0, 1}, {2, 3}}, 0));
  EXPECT_EQ(nodes(4, {0, 0, 0, 0}), std::make_pair(V{{0, 1}, {2, 3}}, 1));
  EXPECT_EQ(nodes(4, {0, 0, 0, 0}, true), std::make_pair(V{{0, 1}, {2, 3}}, 0));
  EXPECT_EQ(nodes(1, {0}), std::make_pair(V{{0}}, 0));
  EXPECT_EQ(nodes(4, {}), std::make_pair(V{{0, 1}, {2, 3}}, 1));  // unknown nodes: halves
  const AbGroups g = formGroups(4, 3, kGroupNode, false, {0, 1, 0, 1});
  EXPECT_EQ(g.members, (std::vector<int>{1, 3}));
  EXPECT_FALSE(g.trains_a);
  EXPECT_THROW(formGroups(4, 0, kGroupNode, false, {1, 1, 0, 0}), Error);  // not numbered by lowest rank
  EXPECT_THROW(formGroups(4, 0, kGroupNode, false, {0, 1}), Error);
  EXPECT_EQ(groupSizeName(kGroupNode), "node");
  EXPECT_EQ(groupSizeName(kGroupWorld), "world");
  EXPECT_EQ(groupSizeName(4), "4");
}

TEST(AbGroups, BadArguments) {
  try {
    formGroups(4, 0, 0, false);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("ab.group_size"), std::string::npos) << e.what();
  }
  EXPECT_THROW(formGroups(4, 0, -7, false), ConfigError);
  EXPECT_THROW(formGroups(0, 0, 2, false), Error);
  EXPECT_THROW(formGroups(4, 4, 2, false), Error);
  EXPECT_THROW(formGroups(4, -1, 2, false), Error);
}

// Regrouping: a seeded permutation, the same for a seed and epoch, identity at epoch 0; the
// permuted layout keeps every group's size and A/B role and is seen alike from every rank.
TEST(AbGroups, RegroupPermutesRanksKeepingGroupSizesAndRoles) {
  const int n = 8;
  EXPECT_EQ(regroupPermutation(n, 42, 0), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(regroupPermutation(n, 42, 3), regroupPermutation(n, 42, 3));
  EXPECT_NE(regroupPermutation(n, 42, 1), regroupPermutation(n, 42, 2));
  EXPECT_NE(regroupPermutation(n, 42, 1), regroupPermutation(n, 43, 1));
  const AbGroups layout = formGroups(n, 0, 3, false);  // groups of 3, 3, 2... as formGroups leaves them
  for (int64_t epoch = 1; epoch <= 5; ++epoch) {
    const auto perm = regroupPermutation(n, 42, epoch);
    std::vector<int> sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(sorted, regroupPermutation(n, 42, 0)) << "not a permutation";
    const AbGroups g0 = permuteGroups(layout, perm, 0);
    for (int v = 0; v < n; ++v) {
      EXPECT_EQ(g0.group_of[perm[v]], layout.group_of[v]);
      EXPECT_EQ(bool(g0.a_rank[perm[v]]), bool(layout.a_rank[v]));
    }
    for (int r = 0; r < n; ++r) {
      const AbGroups g = permuteGroups(layout, perm, r);
      EXPECT_EQ(g.group_of, g0.group_of);
      EXPECT_EQ(g.group, g0.group_of[r]);
      EXPECT_EQ(g.trains_a, bool(g0.a_rank[r]));
      EXPECT_EQ(g.groups, layout.groups);
      EXPECT_EQ(g.a_groups, layout.a_groups);
      for (int m : g.members) EXPECT_EQ(g.group_of[m], g.group);
      EXPECT_EQ(static_cast<int>(g.members.size()),
                static_cast<int>(std::count(layout.group_of.begin(), layout.group_of.end(), g.group)));
    }
  }
  EXPECT_THROW(permuteGroups(layout, {0, 1, 2}, 0), Error);
  EXPECT_THROW(permuteGroups(layout, {0, 0, 2, 3, 4, 5, 6, 7}, 0), Error);
}

TEST(AbGroups, SyncModeNames) {
  for (SyncMode m : {SyncMode::full, SyncMode::with_stale, SyncMode::only_learned, SyncMode::only_b, SyncMode::only_smaller})
    EXPECT_EQ(parseSyncMode(syncModeName(m)), m);
  EXPECT_STREQ(syncModeName(SyncMode::with_stale), "with-stale");
  EXPECT_STREQ(syncModeName(SyncMode::only_learned), "only-learned");
  EXPECT_STREQ(syncModeName(SyncMode::only_b), "only-b");
  try {
    parseSyncMode("with_stale");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("ab.sync_mode"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// abSync

std::shared_ptr<nn::Model> mlp(uint64_t seed) {
  torch::manual_seed(seed);
  nn::ModelSpec s;
  s.name = "mlp";
  return nn::makeModel(s);
}

torch::Tensor param(nn::Model& m, const std::string& name) {
  auto params = m.named_parameters();
  auto* p = params.find(name);
  if (!p) throw std::runtime_error("no parameter " + name);
  return *p;
}

struct SyncCase {
  SyncMode mode;
  bool all_b;
  bool weighted = false;  // rank r weighs kWeights[r] instead of 1/4
};
const std::vector<double> kWeights = {0.1, 0.2, 0.3, 0.4};

class AbSyncModes : public ::testing::TestWithParam<SyncCase> {};

TEST_P(AbSyncModes, MergedWeightFollowsTheModeFormula) {
  const SyncCase c = GetParam();
  const int n = 4, rank = 8;
  std::vector<AbGroups> groups;
  for (int r = 0; r < n; ++r) groups.push_back(formGroups(n, r, 2, c.all_b));
  ASSERT_EQ(groups[0].a_rank, c.all_b ? std::vector<bool>(4, false) : (std::vector<bool>{true, true, false, false}));

  // Same model everywhere, then rank-dependent values: A_r = A0 + r (A0 on every rank when nobody
  // trains A), B_r = B0 (r + 1); hidden.bias + r, stem.weight + 0.1 r, head.bias - r.
  std::vector<std::shared_ptr<nn::Model>> models;
  std::vector<std::unique_ptr<nn::LowRankModel>> lrs;
  torch::Tensor a0, b0, bias0, stem0, head0;
  for (int r = 0; r < n; ++r) {
    models.push_back(mlp(21));
    lrs.push_back(std::make_unique<nn::LowRankModel>(models[r]));
    if (c.mode == SyncMode::only_smaller) lrs[r]->factorise({rank}, lrs[r]->smallerFactors());  // A of 256 x 512
    else lrs[r]->factorise({rank}, groups[r].trains_a ? nn::Factor::A : nn::Factor::B);
    if (r == 0) {
      a0 = lrs[0]->factorA(0).detach().clone(), b0 = lrs[0]->factorB(0).detach().clone();
      bias0 = param(*models[0], "hidden.bias").detach().clone();
      stem0 = param(*models[0], "stem.weight").detach().clone();
      head0 = param(*models[0], "head.bias").detach().clone();
    }
    torch::NoGradGuard g;
    const bool smaller = c.mode == SyncMode::only_smaller;  // everyone trained A: B is the same everywhere
    const bool a_differs = c.mode != SyncMode::only_b && (!c.all_b || smaller);
    lrs[r]->factorA(0).detach().copy_(a_differs ? a0 + r : a0);
    lrs[r]->factorB(0).detach().copy_(smaller ? b0 : b0 * (r + 1));
    param(*models[r], "hidden.bias").detach().copy_(bias0 + r);
    param(*models[r], "stem.weight").detach().add_(0.1 * r);
    param(*models[r], "head.bias").detach().copy_(head0 - r);
  }

  // The (weighted) mean of f(r) over ranks [from, to).
  const std::vector<double> w = c.weighted ? kWeights : std::vector<double>(n, 1.0 / n);
  auto mean = [&](const std::function<double(int)>& f, int from = 0, int to = 4) {
    double num = 0, den = 0;
    for (int r = from; r < to; ++r) num += w[r] * f(r), den += w[r];
    return num / den;
  };
  const double mr = mean([](int r) { return r; }), mr1 = mean([](int r) { return r + 1; });
  torch::Tensor want;
  switch (c.mode) {
    case SyncMode::full: {
      want = torch::zeros({256, 512});
      for (int r = 0; r < n; ++r) want += w[r] * (a0 + r).mm(b0 * (r + 1));
      break;
    }
    case SyncMode::with_stale: want = (a0 + mr).mm(b0 * mr1); break;
    case SyncMode::only_learned:  // A: ranks 0,1; B: ranks 2,3
      want = c.all_b ? a0.mm(b0 * mr1)
                     : (a0 + mean([](int r) { return r; }, 0, 2)).mm(b0 * mean([](int r) { return r + 1; }, 2, 4));
      break;
    case SyncMode::only_b: want = a0.mm(b0 * mr1); break;
    case SyncMode::only_smaller: want = (a0 + mr).mm(b0); break;
  }

  auto comms = test::makeComms(n);
  test::onRanks(n, [&](int r) { abSync(*comms[r], *lrs[r], groups[r], c.mode, c.weighted ? kWeights : std::vector<double>{}); });

  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_FALSE(lrs[r]->factorised());
    auto& m = *models[r];
    EXPECT_FALSE(m.named_parameters().contains("hidden.A"));
    const auto w = param(m, "hidden.weight").detach();
    EXPECT_LT((w - want).abs().max().item<double>(), 1e-5 * want.abs().max().item<double>())
        << "merged weight does not follow the " << syncModeName(c.mode) << " formula";
    EXPECT_TRUE(torch::allclose(param(m, "hidden.bias").detach(), bias0 + mr, 1e-5, 1e-5));
    EXPECT_TRUE(torch::allclose(param(m, "stem.weight").detach(), stem0 + 0.1 * mr, 1e-5, 1e-5));
    EXPECT_TRUE(torch::allclose(param(m, "head.bias").detach(), head0 - mr, 1e-5, 1e-5));
    // Bitwise identical on every rank.
    const auto p0 = models[0]->named_parameters();
    const auto pr = m.named_parameters();
    ASSERT_EQ(p0.size(), pr.size());
    for (size_t k = 0; k < p0.size(); ++k) {
      EXPECT_EQ(p0[k].key(), pr[k].key());
      EXPECT_TRUE(torch::equal(p0[k].value(), pr[k].value())) << pr[k].key();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, AbSyncModes,
                         ::testing::Values(SyncCase{SyncMode::full, false}, SyncCase{SyncMode::with_stale, false},
                                           SyncCase{SyncMode::only_learned, false},
                                           SyncCase{SyncMode::only_learned, true}, SyncCase{SyncMode::only_b, true},
                                           SyncCase{SyncMode::only_smaller, true}, SyncCase{SyncMode::full, false, true},
                                           SyncCase{SyncMode::with_stale, false, true},
                                           SyncCase{SyncMode::only_learned, false, true},
                                           SyncCase{SyncMode::only_learned, true, true},
                                           SyncCase{SyncMode::only_b, true, true},
                                           SyncCase{SyncMode::only_smaller, true, true}),
                         [](const auto& info) {
                           std::string s = syncModeName(info.param.mode);
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s + (info.param.all_b ? "_all_b" : "") + (info.param.weighted ? "_weighted" : "");
                         });

// Loss-weighted syncs: a group's weight is 1 / its mean loss, normalised, shared by its members.
TEST(AbSync, InverseLossWeightsPerGroup) {
  const AbGroups g = formGroups(4, 0, 2, false);  // groups {0, 1} and {2, 3}
  auto near = [](const std::vector<double>& got, const std::vector<double>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "rank " << i;
  };
  near(inverseLossWeights(g, {1, 3, 2, 2}), {0.25, 0.25, 0.25, 0.25});  // equal group means
  // Group means 1 and 3: weights 1 and 1/3, normalised to 0.75 and 0.25, halved per member.
  near(inverseLossWeights(g, {1, 1, 3, 3}), {0.375, 0.375, 0.125, 0.125});
  EXPECT_TRUE(inverseLossWeights(g, {1, 1, 0, 3}).empty()) << "a rank without a loss: equal weights";
  EXPECT_TRUE(inverseLossWeights(g, {1, NAN, 3, 3}).empty());
  EXPECT_THROW(inverseLossWeights(g, {1, 1, 3}), Error);
}

// ab.group_lr = "explore": multipliers spread evenly in log space around the center, and a sync
// moves the center to the multiplier of the group with the lowest mean loss.
TEST(AbGroupLr, MultipliersAndTheCenterAfterASync) {
  auto near = [](const std::vector<double>& got, const std::vector<double>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "group " << i;
  };
  near(groupLrMultipliers(1.0, 2.0, 1), {1.0});
  near(groupLrMultipliers(1.0, 2.0, 2), {0.5, 2.0});
  near(groupLrMultipliers(0.5, 2.0, 3), {0.25, 0.5, 1.0});
  near(groupLrMultipliers(1.0, 8.0, 4), {0.125, 0.5, 2.0, 8.0});
  EXPECT_THROW(groupLrMultipliers(1.0, 0.5, 2), Error);
  const auto g = formGroups(4, 0, 2, false);  // groups {0, 1} and {2, 3}
  EXPECT_NEAR(exploreLrCenter(g, {1, 1, 3, 3}, 1.0, 2.0), 0.5, 1e-12);   // group 0 (0.5x) learned more
  EXPECT_NEAR(exploreLrCenter(g, {3, 3, 1, 2}, 1.0, 2.0), 2.0, 1e-12);   // group 1 (2x)
  EXPECT_NEAR(exploreLrCenter(g, {2, 2, 1, 3}, 2.0, 2.0), 1.0, 1e-12);   // a tie goes to the lower group
  EXPECT_NEAR(exploreLrCenter(g, {1, 1, 3, 3}, 1.0 / 16, 2.0), 1.0 / 16, 1e-12);  // clamped at spread^-4
  EXPECT_NEAR(exploreLrCenter(g, {1, 0, 3, 3}, 1.0, 2.0), 1.0, 1e-12) << "a rank without a loss: unchanged";
  EXPECT_NEAR(exploreLrCenter(formGroups(4, 0, 4, false), {1, 2, 3, 4}, 1.5, 2.0), 1.5, 1e-12) << "one group";
  EXPECT_THROW(exploreLrCenter(g, {1, 1, 3}, 1.0, 2.0), Error);
}

// A small model with a BatchNorm (float running statistics) after a factorisable layer.
class TinyBn : public nn::Model {
 public:
  TinyBn() : nn::Model(spec()) {
    stem = register_module(nn::kStemName, torch::nn::Linear(16, 12));
    hidden = register_module("hidden", torch::nn::Linear(12, 8));
    bn = register_module("bn", torch::nn::BatchNorm1d(8));
    head = register_module(nn::kHeadName, torch::nn::Linear(8, 3));
  }
  torch::Tensor forward(torch::Tensor x) override {
    checkInput(x);
    return head->forward(bn->forward(hidden->forward(torch::relu(stem->forward(x.flatten(1))))));
  }
  static nn::ModelSpec spec() {
    nn::ModelSpec s;
    s.name = "tiny-bn";
    s.image_size = 4;
    s.classes = 3;
    return s;
  }
  torch::nn::Linear stem{nullptr}, hidden{nullptr}, head{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};

TEST(AbSync, AveragesFloatBuffersAndOtherParameters) {
  const int n = 2;
  std::vector<std::shared_ptr<TinyBn>> models;
  std::vector<std::unique_ptr<nn::LowRankModel>> lrs;
  for (int r = 0; r < n; ++r) {
    torch::manual_seed(5);
    models.push_back(std::make_shared<TinyBn>());
    lrs.push_back(std::make_unique<nn::LowRankModel>(models[r]));
    ASSERT_EQ(lrs[r]->layers().size(), 1u);
    lrs[r]->factorise({4}, nn::Factor::B);
    torch::NoGradGuard g;
    models[r]->bn->running_mean.fill_(2.0f * (r + 1));
    models[r]->bn->running_var.fill_(10.0f * (r + 1));
    models[r]->bn->weight.fill_(r);  // a 1-D parameter
  }
  auto comms = test::makeComms(n);
  test::onRanks(n, [&](int r) { abSync(*comms[r], *lrs[r], formGroups(n, r, -1, false), SyncMode::with_stale); });
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_TRUE(torch::allclose(models[r]->bn->running_mean, torch::full({8}, 3.0f)));
    EXPECT_TRUE(torch::allclose(models[r]->bn->running_var, torch::full({8}, 15.0f)));
    EXPECT_TRUE(torch::allclose(models[r]->bn->weight.detach(), torch::full({8}, 0.5f)));
    EXPECT_TRUE(torch::equal(models[r]->hidden->weight.detach(), models[0]->hidden->weight.detach()));
  }
}

TEST(AbSync, NeedsAFactorisedModel) {
  auto comms = test::makeComms(1);
  nn::LowRankModel lr(mlp(1));
  EXPECT_THROW(abSync(*comms[0], lr, formGroups(1, 0, -1, false), SyncMode::full), Error);
}

// ---------------------------------------------------------------------------------------------
// Truncation ranks agree: ranksAbove + max over ranks.

TEST(AbRanks, MaxOverRanksOfRanksAboveGivesOneRankEverywhere) {
  const int n = 3;
  std::vector<std::shared_ptr<nn::Model>> models;
  std::vector<std::unique_ptr<nn::LowRankModel>> lrs;
  std::vector<std::vector<float>> spectra(n);
  std::vector<int64_t> counted(n);
  // Rank r: 3 + 2r singular values above 1.5 (cutoff 0.15 of s_max = 10), five more below 1.5.
  for (int r = 0; r < n; ++r) {
    models.push_back(mlp(40 + r));
    lrs.push_back(std::make_unique<nn::LowRankModel>(models[r]));
    auto& s = spectra[r];
    s = {10};
    for (int k = 1; k < 3 + 2 * r; ++k) s.push_back(8.0f - 0.5f * k);
    for (int k = 0; k < 5; ++k) s.push_back(1.0f - 0.1f * k);
    const auto u = std::get<0>(torch::linalg_qr(torch::randn({256, (int64_t)s.size()})));
    const auto v = std::get<0>(torch::linalg_qr(torch::randn({512, (int64_t)s.size()})));
    const auto w = u.mm(torch::diag(torch::tensor(s))).mm(v.t());
    const auto sv = torch::linalg::svdvals(w, c10::nullopt);  // independent count
    counted[r] = sv.gt(0.15 * sv[0].item<double>()).sum().item<int64_t>();
    torch::NoGradGuard g;
    param(*models[r], "hidden.weight").detach().copy_(w);
  }
  ASSERT_EQ(counted, (std::vector<int64_t>{3, 5, 7}));
  std::vector<std::vector<int64_t>> local(n), agreed(n);
  auto comms = test::makeComms(n);
  test::onRanks(n, [&](int r) {
    local[r] = lrs[r]->ranksAbove(0.15);
    agreed[r] = local[r];
    comms[r]->allreduce(agreed[r].data(), agreed[r].size(), comm::DType::i64, comm::ReduceOp::max);
    lrs[r]->factorise(agreed[r], nn::Factor::B);
  });
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(local[r], (std::vector<int64_t>{counted[r]}));
    EXPECT_EQ(agreed[r], (std::vector<int64_t>{7}));
    EXPECT_EQ(lrs[r]->layers()[0].rank, 7);
    EXPECT_EQ(lrs[r]->factorA(0).size(1), 7);
    EXPECT_EQ(lrs[r]->factorB(0).size(0), 7);
    // The truncated matrix keeps this rank's own top-7 spectrum.
    const auto kept = torch::linalg::svdvals(lrs[r]->matrix(0), c10::nullopt).slice(0, 0, 7);
    const auto want = torch::tensor(std::vector<float>(spectra[r].begin(), spectra[r].begin() + 7));
    EXPECT_LT((kept - want).abs().max().item<double>(), 1e-3);
  }
}

}  // namespace
