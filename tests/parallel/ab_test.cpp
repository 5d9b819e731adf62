// AbTraining: the phase schedule of a short synthetic run with ranks as threads (labels, events,
// learning-rate rebound, group-local training of the factors, final merged identical model).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "comm/harness.h"
#include "lowcomm/base/error.h"
#include "lowcomm/nn/models.h"
#include "lowcomm/parallel/ab_training.h"

using namespace lowcomm;
using namespace lowcomm::parallel;

namespace {

std::vector<int64_t> rankList(const AbEvent& e) {
  std::vector<int64_t> out;
  for (const auto& l : e.ranks) out.push_back(l.rank);
  return out;
}

using Snapshot = std::map<std::string, torch::Tensor>;

Snapshot snapshot(const torch::nn::Module& m) {
  Snapshot s;
  for (const auto& p : m.named_parameters()) s[p.key()] = p.value().detach().clone();
  return s;
}

bool sameSnapshots(const Snapshot& a, const Snapshot& b, std::string* why) {
  if (a.size() != b.size()) return *why = "different parameter counts", false;
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    if (it == b.end()) return *why = "missing " + k, false;
    if (!torch::equal(v, it->second)) return *why = "different " + k, false;
  }
  return true;
}

struct RankLog {
  std::vector<std::string> labels;
  std::vector<std::string> phases;
  std::vector<double> lrs;           // lr(step, 0.1) right after beginStep(step)
  std::vector<double> lr_next;       // lr(step + 1, 0.1) right after beginStep(step)
  std::vector<double> lr_before;     // lr(step - 1, 0.1) right after beginStep(step)
  std::vector<AbEvent> events;
  std::vector<int64_t> ranks_after_truncate;
  std::map<int64_t, Snapshot> snaps;  // parameters after beginStep(step) (key) or opt.step (key + 100)
  std::map<std::string, int64_t> steps_by_phase;
  bool trains_a = false;
  bool a_requires_grad_in_ab = false, b_requires_grad_in_ab = false;
  bool factorised_after_finish = true;
  double full_params = 0;
};

struct AbRun {
  int world;
  int group_size;
  std::string mode;
};

class AbSchedule : public ::testing::TestWithParam<AbRun> {};

TEST_P(AbSchedule, LabelsEventsReboundAndFinalModel) {
  const AbRun run = GetParam();
  const int n = run.world;
  const int64_t steps = 16;
  AbOptions o;
  o.group_size = run.group_size;
  o.sync_mode = run.mode;
  o.warmup_steps = 3;
  o.steps_btw_syncing = 4;
  o.ddp_steps_after_sync = 2;
  o.lr_rebound_steps = 2;
  o.low_rank_cutoff = 0.15;

  // Models and data are made before the threads (torch's global generator is shared).
  std::vector<std::shared_ptr<nn::Model>> models;
  for (int r = 0; r < n; ++r) {
    torch::manual_seed(r == 0 ? 11 : 500 + r);  // different inits: the warmup DDP broadcasts rank 0's
    nn::ModelSpec s;
    s.name = "mlp";
    s.image_size = 8;  // small stem: the run stays fast
    models.push_back(nn::makeModel(s));
  }
  std::vector<std::vector<torch::Tensor>> xs(n), ys(n);
  for (int r = 0; r < n; ++r)
    for (int64_t step = 0; step < steps; ++step) {
      torch::manual_seed(1000 * step + r);
      xs[r].push_back(torch::randn({8, 1, 8, 8}));
      ys[r].push_back(torch::randint(0, 10, {8}, torch::kInt64));
    }

  auto comms = test::makeComms(n);
  std::vector<RankLog> logs(n);
  test::onRanks(n, [&](int r) {
    auto model = models[r];
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
    DdpOptions d;
    AbTraining ab(comms[r], model, opt, o, d);
    RankLog& log = logs[r];
    log.trains_a = ab.groups().trains_a;
    log.full_params = static_cast<double>(ab.lowRank().fullRankParameters());
    for (int64_t step = 0; step < steps; ++step) {
      const std::string label = ab.beginStep(step);
      log.labels.push_back(label);
      log.phases.push_back(abPhaseName(ab.phase()));
      log.lrs.push_back(ab.lr(step, 0.1));
      log.lr_next.push_back(ab.lr(step + 1, 0.1));
      log.lr_before.push_back(ab.lr(step - 1, 0.1));
      for (auto& e : ab.takeEvents()) {
        if (e.kind == "truncate") log.ranks_after_truncate.push_back(ab.lowRank().layers()[0].rank);
        log.events.push_back(e);
      }
      if (label == "ab" && ab.lowRank().factorised()) {
        log.a_requires_grad_in_ab = ab.lowRank().factorA(0).requires_grad();
        log.b_requires_grad_in_ab = ab.lowRank().factorB(0).requires_grad();
      }
      log.snaps[step] = snapshot(*model);
      static_cast<torch::optim::SGDOptions&>(opt.param_groups()[0].options()).lr(ab.lr(step, 0.1));
      const auto loss = torch::nn::functional::cross_entropy(ab.forward(xs[r][step]), ys[r][step]);
      loss.backward();
      ab.ddp().finish();
      opt.step();
      opt.zero_grad();
      log.snaps[step + 100] = snapshot(*model);
    }
    ab.finish(steps - 1);
    for (auto& e : ab.takeEvents()) log.events.push_back(e);
    log.factorised_after_finish = ab.lowRank().factorised();
    log.steps_by_phase = ab.stepsByPhase();
    log.snaps[-1] = snapshot(*model);
  });

  // Derived from beginStep: warmup while step < 3; step 3 SVD -> ab (phase_start 3); a step
  // > phase_start divisible by 4 syncs (label "sync", full-rank DDP from that step on); after
  // ddp_steps_after_sync = 2 full-rank steps (4, 5) the truncating SVD at 6 returns to ab; ...
  const std::vector<std::string> want_labels = {"warmup", "warmup", "warmup", "ab",   "sync", "full-rank",
                                                "ab",     "ab",     "sync",   "full-rank", "ab", "ab",
                                                "sync",   "full-rank", "ab",  "ab"};
  const std::vector<std::string> want_phases = {"warmup", "warmup",    "warmup", "ab", "full-rank", "full-rank",
                                                "ab",     "ab",        "full-rank", "full-rank", "ab", "ab",
                                                "full-rank", "full-rank", "ab", "ab"};
  const std::vector<std::pair<int64_t, std::string>> want_events = {
      {3, "svd"}, {4, "sync"}, {6, "truncate"}, {8, "sync"}, {10, "truncate"}, {12, "sync"}, {14, "truncate"},
      {15, "final-sync"}};
  const double mid = 1e-5 + (0.1 - 1e-5) * 0.5;
  // Switches at 3, 4, 6, 8, 10, 12, 14: lr = 1e-5 on a switch step, the midpoint one step later.
  const std::vector<double> want_lr = {0.1, 0.1, 0.1, 1e-5, 1e-5, mid, 1e-5, mid,
                                       1e-5, mid, 1e-5, mid, 1e-5, mid, 1e-5, mid};

  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const RankLog& log = logs[r];
    EXPECT_EQ(log.labels, want_labels);
    EXPECT_EQ(log.phases, want_phases);
    ASSERT_EQ(log.lrs.size(), want_lr.size());
    for (size_t s = 0; s < want_lr.size(); ++s) {
      EXPECT_NEAR(log.lrs[s], want_lr[s], 1e-12) << "lr at step " << s;
      // The step before a switch keeps the scheduled rate; two steps after it is back to 0.1.
      if (want_lr[s] == 1e-5) {
        EXPECT_NEAR(log.lr_next[s], mid, 1e-12) << "step " << s;
        EXPECT_NEAR(log.lr_before[s], 0.1, 1e-12) << "step " << s;
      }
    }
    ASSERT_EQ(log.events.size(), want_events.size());
    for (size_t k = 0; k < want_events.size(); ++k) {
      const AbEvent& e = log.events[k];
      EXPECT_EQ(e.step, want_events[k].first) << "event " << k;
      EXPECT_EQ(e.kind, want_events[k].second) << "event " << k;
      if (e.kind == "svd") {
        // Untruncated: mlp's one low-rank layer "hidden" [256 x 512] at rank 256.
        EXPECT_EQ(rankList(e), (std::vector<int64_t>{256}));
        EXPECT_EQ(e.ranks[0].name, "hidden");
        EXPECT_EQ(e.ranks[0].rows * e.ranks[0].cols, 256 * 512);
        const double full = 64 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10;
        EXPECT_EQ(log.full_params, full);
        EXPECT_NEAR(e.compression, (full - 512 * 256 + 256 * (256 + 512)) / full, 1e-12);
      } else if (e.kind == "truncate") {
        ASSERT_EQ(e.ranks.size(), 1u);
        EXPECT_GE(e.ranks[0].rank, 1);
        EXPECT_LE(e.ranks[0].rank, 256);
        EXPECT_NEAR(e.compression, (log.full_params - 512 * 256 + e.ranks[0].rank * (256 + 512)) / log.full_params, 1e-12);
        // The same rank on every rank.
        EXPECT_EQ(rankList(e), rankList(logs[0].events[k]));
      } else {
        EXPECT_TRUE(e.ranks.empty());
        EXPECT_DOUBLE_EQ(e.compression, 1.0);
      }
    }
    EXPECT_EQ(log.ranks_after_truncate.size(), 3u);
    EXPECT_FALSE(log.factorised_after_finish);
    EXPECT_EQ(log.steps_by_phase, (std::map<std::string, int64_t>{{"warmup", 3}, {"ab", 7}, {"sync", 3}, {"full-rank", 3}}));
    // Only the group's factor is trained.
    EXPECT_EQ(log.a_requires_grad_in_ab, log.trains_a);
    EXPECT_EQ(log.b_requires_grad_in_ab, !log.trains_a);

    // Parameter names per phase.
    EXPECT_TRUE(log.snaps.at(2).count("hidden.weight"));
    EXPECT_TRUE(log.snaps.at(3).count("hidden.A") && log.snaps.at(3).count("hidden.B"));
    EXPECT_FALSE(log.snaps.at(3).count("hidden.weight"));
    EXPECT_TRUE(log.snaps.at(4).count("hidden.weight")) << "a sync step merges the model";
    EXPECT_FALSE(log.snaps.at(4).count("hidden.A"));
    EXPECT_EQ(log.snaps.at(6).at("hidden.A").size(1), log.events[2].ranks[0].rank);
    // After finish: merged, every parameter a "*.weight" or "*.bias".
    const auto& fin = log.snaps.at(-1);
    for (const auto& [k, v] : fin) {
      const bool weight_or_bias = k.size() > 7 && (k.substr(k.size() - 7) == ".weight" || k.substr(k.size() - 5) == ".bias");
      EXPECT_TRUE(weight_or_bias) << k;
    }
    EXPECT_EQ(fin.size(), 6u);

    // Global phases keep every rank identical: after the warmup (rank 0's broadcast init + DDP),
    // after each sync, after full-rank steps and at the end.
    for (int64_t key : {int64_t{0}, int64_t{100}, int64_t{102}, int64_t{3}, int64_t{4}, int64_t{105}, int64_t{6},
                        int64_t{8}, int64_t{10}, int64_t{12}, int64_t{113}, int64_t{14}, int64_t{-1}}) {
      std::string why;
      EXPECT_TRUE(sameSnapshots(log.snaps.at(key), logs[0].snaps.at(key), &why)) << "snapshot " << key << ": " << why;
    }
  }

  // Inside the ab phase (after the optimizer step of step 7), each group trains its own copy.
  const int64_t k = 107;
  for (int r = 0; r < n; ++r)
    for (int q = 0; q < n; ++q) {
      const auto& lr_ = logs[r].snaps.at(k);
      const auto& lq = logs[q].snaps.at(k);
      const bool same_group = formGroups(n, r, run.group_size, run.mode == "only-b").group ==
                              formGroups(n, q, run.group_size, run.mode == "only-b").group;
      const bool same_role = logs[r].trains_a == logs[q].trains_a;
      // The whole model is identical inside a group.
      std::string why;
      if (same_group) {
        EXPECT_TRUE(sameSnapshots(lr_, lq, &why)) << r << " vs " << q << ": " << why;
      }
      // A factor is moved only by ranks that train it: the frozen one stays the SVD's everywhere.
      if (!logs[r].trains_a && !logs[q].trains_a) {
        EXPECT_TRUE(torch::equal(lr_.at("hidden.A"), lq.at("hidden.A"))) << r << " vs " << q;
      }
      if (logs[r].trains_a && logs[q].trains_a) {
        EXPECT_TRUE(torch::equal(lr_.at("hidden.B"), lq.at("hidden.B"))) << r << " vs " << q;
      }
      if (!same_group) {
        // Different groups saw different data: the trained factor differs.
        const char* f = logs[r].trains_a ? "hidden.A" : "hidden.B";
        EXPECT_FALSE(torch::equal(lr_.at(f), lq.at(f))) << r << " vs " << q << " " << f;
        if (!same_role) {
          EXPECT_FALSE(torch::equal(lr_.at("hidden.A"), lq.at("hidden.A"))) << r << " vs " << q;
        }
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Runs, AbSchedule,
                         ::testing::Values(AbRun{4, 2, "with-stale"}, AbRun{4, 2, "only-b"}, AbRun{2, -1, "full"}),
                         [](const auto& info) {
                           std::string m = info.param.mode;
                           for (auto& ch : m)
                             if (ch == '-') ch = '_';
                           return "world" + std::to_string(info.param.world) + "_" + m;
                         });

// train_setup: "groups" averages the trained factor's gradients inside the group, so group members
// hold the same factor; "individual" trains it on each rank alone (different data, different
// factors) while 1-D parameters and the always-full-rank layers are still averaged in the group.
// reset_opt zeroes the moments at each switch.
TEST(AbTraining, IndividualSetupAndResetOpt) {
  const int n = 4;
  for (const std::string setup : {"groups", "individual"}) {
    SCOPED_TRACE(setup);
    AbOptions o;
    o.group_size = 2;
    o.sync_mode = "only-learned";
    o.warmup_steps = 1;
    o.steps_btw_syncing = 100;
    o.train_setup = setup;
    o.reset_opt = setup == "individual";
    std::vector<std::shared_ptr<nn::Model>> models;
    for (int r = 0; r < n; ++r) {
      torch::manual_seed(21);
      nn::ModelSpec s;
      s.name = "mlp";
      s.image_size = 8;
      models.push_back(nn::makeModel(s));
    }
    std::vector<Snapshot> after(n);
    std::vector<double> moment_after_switch(n, -1);
    auto comms = test::makeComms(n);
    test::onRanks(n, [&](int r) {
      torch::optim::SGD opt(models[r]->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
      AbTraining ab(comms[r], models[r], opt, o, DdpOptions{});
      for (int64_t step = 0; step < 4; ++step) {
        ab.beginStep(step);
        if (step == 1) {  // just switched: the warmup step's momentum is reset only with reset_opt
          double m = 0;
          for (auto& kv : opt.state())
            m += static_cast<torch::optim::SGDParamState&>(*kv.second).momentum_buffer().abs().sum().item<double>();
          moment_after_switch[r] = m;
        }
        torch::manual_seed(100 * step + r);
        const auto x = torch::randn({8, 1, 8, 8});
        const auto y = torch::randint(0, 10, {8}, torch::kInt64);
        torch::nn::functional::cross_entropy(ab.forward(x), y).backward();
        ab.ddp().finish();
        opt.step();
        opt.zero_grad();
      }
      after[r] = snapshot(*models[r]);
    });
    for (int r : {0, 2}) {  // groups {0, 1} (A) and {2, 3} (B)
      const std::string trained = r == 0 ? "hidden.A" : "hidden.B";
      const bool same = torch::equal(after[r].at(trained), after[r + 1].at(trained));
      EXPECT_EQ(same, setup == "groups") << trained << " of ranks " << r << ", " << r + 1;
      EXPECT_TRUE(torch::equal(after[r].at("hidden.bias"), after[r + 1].at("hidden.bias")));
      EXPECT_TRUE(torch::equal(after[r].at("stem.weight"), after[r + 1].at("stem.weight")));
      EXPECT_FALSE(torch::equal(after[0].at("stem.weight"), after[2].at("stem.weight")));  // groups differ
    }
    for (int r = 0; r < n; ++r) {
      if (setup == "individual") EXPECT_EQ(moment_after_switch[r], 0.0) << "rank " << r;
      else EXPECT_GT(moment_after_switch[r], 0.0) << "rank " << r;
    }
  }
}

TEST(AbTraining, InvalidOptionsAreConfigErrors) {
  AbOptions o;
  o.group_size = 0;
  EXPECT_THROW(validateAbOptions(o), ConfigError);
  o = AbOptions{};
  o.sync_mode = "stale";
  EXPECT_THROW(validateAbOptions(o), ConfigError);
  o = AbOptions{};
  o.steps_btw_syncing = 0;
  EXPECT_THROW(validateAbOptions(o), ConfigError);
  o = AbOptions{};
  o.low_rank_cutoff = 1.0;
  EXPECT_THROW(validateAbOptions(o), ConfigError);
  o = AbOptions{};
  o.train_setup = "alone";
  EXPECT_THROW(validateAbOptions(o), ConfigError);
  o = AbOptions{};
  o.group_size = -5;
  EXPECT_THROW(validateAbOptions(o), ConfigError);
  EXPECT_NO_THROW(validateAbOptions(AbOptions{}));
}

}  // namespace
