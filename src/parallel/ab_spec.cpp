// `strategy.name = "ab"`: the [ab] section's keys and the spec the trainer reads.
#include "lowcomm/parallel/ab_training.h"
#include "lowcomm/parallel/strategy_spec.h"

namespace lowcomm::parallel {

schema::Section<AbOptions> abSection() {
  using O = AbOptions;
  schema::Section<O> s("ab", "AB-training: low-rank factors trained by independent groups (docs/ab-training.md)");
  s.integer("group_size", &O::group_size, -1, 65536,
            "ranks per group; \"node\": one group per node, \"world\": one global group, -1: two halves (one with only-b)",
            {{"node", kGroupNode}, {"world", kGroupWorld}})
      .choice("sync_mode", &O::sync_mode, syncModeNames(), "how the groups' factors are merged at a sync")
      .steps("warmup_steps", &O::warmup_steps, 0, "global full-rank DDP steps before the first SVD")
      .steps("steps_btw_syncing", &O::steps_btw_syncing, 1, "a sync at every step divisible by this")
      .steps("ddp_steps_after_sync", &O::ddp_steps_after_sync, 0, "global full-rank steps after each sync")
      .steps("lr_rebound_steps", &O::lr_rebound_steps, 0, "LR ramp from 1e-5 after every switch")
      .number("low_rank_cutoff", &O::low_rank_cutoff, schema::Range::halfOpen(0, 1),
              "keep singular values > cutoff * s_max")
      .flag("split_sigma", &O::split_sigma, "A = U sqrt(S), B = sqrt(S) Vh (else A = U S)")
      .list("full_rank_layers", &O::full_rank_layers, {}, "layers (name prefixes) never factorised")
      .choice("train_setup", &O::train_setup, {"groups", "individual"},
              "groups: factors averaged inside the group every step; individual: each rank trains alone between syncs")
      .flag("reset_opt", &O::reset_opt, "zero the optimizer moments at every switch")
      .flag("factored_forward", &O::factored_forward, "truncated layers run as two thin ops")
      .choice("svd", &O::svd, {"exact", "randomized"}, "randomized: a sketch of the previous rank + 8")
      .flag("svd_split", &O::svd_split, "each rank decomposes a share of the layers, then broadcasts")
      .choice("sync_weights", &O::sync_weights, {"equal", "inverse-loss"}, "groups weighted equally or by 1 / their loss")
      .choice("regroup", &O::regroup, {"none", "random"}, "random: new groups after every sync")
      .choice("group_lr", &O::group_lr, {"fixed", "explore"},
              "explore: per-group LR multipliers, the best group's wins at a sync")
      .number("group_lr_spread", &O::group_lr_spread, schema::Range::closed(1, 16),
              "explore: the multipliers span center / spread .. center * spread")
      .check([](const O& o) {
        if (o.group_size == 0) throw schema::KeyError("ab.group_size", "must be \"node\", \"world\", -1 or >= 1");
        if (o.regroup == "random" && o.group_size == kGroupNode)
          throw schema::KeyError("ab.regroup", "is \"random\", which would move ranks across nodes: set ab.group_size "
                                               "to a size or -1");
      });
  return s;
}

namespace {

using Lines = std::vector<std::pair<std::string, std::string>>;

Lines abSummaryLines(const nlohmann::json& ab) {
  std::string steps, ranks;
  for (const auto& [k, v] : ab["steps_by_phase"].items()) steps += (steps.empty() ? "" : ", ") + k + " " + v.dump();
  for (const auto& [k, v] : ab["ranks"].items()) ranks += (ranks.empty() ? "" : ", ") + k + " " + v.dump();
  if (ranks.empty()) ranks = "- (never factorised: the run ended in warmup)";
  char a[512], b[1024];
  std::snprintf(a, sizeof a, "%d groups (%d train A), sync %s; steps: %s", ab["groups"].get<int>(),
                ab["a_groups"].get<int>(), ab["sync_mode"].get<std::string>().c_str(), steps.c_str());
  std::snprintf(b, sizeof b, "%.2f:1 (reference metric, %.2f %%); model %.2f:1 of its full-rank size; ranks %s",
                ab["compression_reference_n_to_1"].get<double>(), 100.0 * ab["compression_reference"].get<double>(),
                ab["model_size_n_to_1"].get<double>(), ranks.c_str());
  return {{"AB-training", a}, {"AB compression", b}};
}

// AB state only fits the same groups and sync mode.
std::string abResumeKey(const AbOptions& o) {
  std::string k = "ab/" + std::to_string(o.group_size) + "/" + o.sync_mode + "/" + (o.split_sigma ? "split" : "whole");
  for (const auto& l : o.full_rank_layers) k += "/" + l;
  if (o.train_setup != "groups") k += "/" + o.train_setup;
  if (o.regroup != "none") k += "/regroup-" + o.regroup;
  return k;
}

}  // namespace

StrategySpec abSpec() {
  StrategySpec s;
  s.name = "ab";
  s.doc = "AB-training: low-rank factors trained by independent groups, synced periodically";
  s.options = optionsSection(abSection());
  s.make = [](const StrategyContext& ctx, const std::any& options, const StrategyRun& run) {
    auto o = std::any_cast<const AbOptions&>(options);
    for (auto* steps : {&o.warmup_steps, &o.steps_btw_syncing, &o.ddp_steps_after_sync, &o.lr_rebound_steps})
      *steps = static_cast<double>(steps->of(run.total_steps));
    o.seed = run.seed;
    return makeAbStrategy(ctx, std::move(o));
  };
  s.resume_key = [](const std::any& options, int) { return abResumeKey(std::any_cast<const AbOptions&>(options)); };
  s.summary_lines = abSummaryLines;
  s.accepts_interleaved = false;  // it rebuilds each stage's weights in one forward
  return s;
}

}  // namespace lowcomm::parallel
