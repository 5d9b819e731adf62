#include "strategies.h"

#include <functional>
#include <map>

#include "lowcomm/base/error.h"
#include "lowcomm/parallel/ab_training.h"
#include "lowcomm/parallel/diloco.h"
#include "lowcomm/parallel/gossip.h"
#include "lowcomm/parallel/local_sgd.h"
#include "lowcomm/parallel/ssp.h"
#include "lowcomm/parallel/zero.h"

namespace lowcomm::train {
namespace {

// Step counts given as fractions are resolved against the run's total optimizer steps.
parallel::AbOptions abOptions(const TrainConfig& c, int64_t total_steps) {
  parallel::AbOptions o;
  o.group_size = static_cast<int>(c.ab.group_size);
  o.sync_mode = c.ab.sync_mode;
  o.warmup_steps = runSteps(c.ab.warmup_steps, total_steps);
  o.steps_btw_syncing = runSteps(c.ab.steps_btw_syncing, total_steps);
  o.ddp_steps_after_sync = runSteps(c.ab.ddp_steps_after_sync, total_steps);
  o.lr_rebound_steps = runSteps(c.ab.lr_rebound_steps, total_steps);
  o.low_rank_cutoff = c.ab.low_rank_cutoff;
  o.split_sigma = c.ab.split_sigma;
  o.full_rank_layers = c.ab.full_rank_layers;
  o.train_setup = c.ab.train_setup;
  o.reset_opt = c.ab.reset_opt;
  o.factored_forward = c.ab.factored_forward;
  o.svd = c.ab.svd;
  o.svd_split = c.ab.svd_split;
  o.sync_weights = c.ab.sync_weights;
  o.regroup = c.ab.regroup;
  o.group_lr = c.ab.group_lr;
  o.group_lr_spread = c.ab.group_lr_spread;
  o.seed = c.seed;
  return o;
}

// AB state only fits the same groups and sync mode.
std::string abResumeKey(const TrainConfig& c) {
  std::string k = "ab/" + std::to_string(c.ab.group_size) + "/" + c.ab.sync_mode + "/" +
                  (c.ab.split_sigma ? "split" : "whole");
  for (const auto& l : c.ab.full_rank_layers) k += "/" + l;
  if (c.ab.train_setup != "groups") k += "/" + c.ab.train_setup;
  if (c.ab.regroup != "none") k += "/regroup-" + c.ab.regroup;
  return k;
}

parallel::LocalSgdOptions localSgdOptions(const TrainConfig& c, int64_t total_steps) {
  parallel::LocalSgdOptions o;
  o.period = c.local_sgd.period;
  o.start_step = runSteps(c.local_sgd.start_step, total_steps);
  o.average_optimizer = c.local_sgd.average_optimizer;
  o.hierarchical = c.local_sgd.hierarchical;
  return o;
}

// Which ranks hold which weights depends on all four keys.
std::string localSgdResumeKey(const TrainConfig& c) {
  const auto& l = c.local_sgd;
  return "local_sgd/" + std::to_string(l.period) + "/" + std::to_string(l.start_step) + "/" +
         (l.average_optimizer ? "opt" : "params") + (l.hierarchical ? "/hier" : "");
}

parallel::DilocoOptions dilocoOptions(const TrainConfig& c) {
  return {c.diloco.period, c.diloco.outer_lr, c.diloco.outer_momentum, c.diloco.nesterov};
}

// The outer state only fits the same period (the outer hyper-parameters may change on resume).
std::string dilocoResumeKey(const TrainConfig& c) { return "diloco/" + std::to_string(c.diloco.period); }

struct Entry {
  std::function<std::unique_ptr<parallel::Strategy>(const TrainConfig&, const parallel::StrategyContext&, int64_t)> make;
  std::function<std::string(const TrainConfig&)> resume_key;  // null: ""
};

const std::map<std::string, Entry>& registry() {
  static const std::map<std::string, Entry> r = {
      {"ddp", {[](const TrainConfig& c, const parallel::StrategyContext& ctx, int64_t) {
                 return c.strategy.zero ? parallel::makeZeroStrategy(ctx, static_cast<int>(c.strategy.zero))
                                        : parallel::makeDdpStrategy(ctx);
               },
               [](const TrainConfig& c) { return c.strategy.zero ? std::string("zero") : std::string(); }}},
      {"ab", {[](const TrainConfig& c, const parallel::StrategyContext& ctx,
                 int64_t total) { return parallel::makeAbStrategy(ctx, abOptions(c, total)); },
              abResumeKey}},
      {"local_sgd", {[](const TrainConfig& c, const parallel::StrategyContext& ctx,
                        int64_t total) { return parallel::makeLocalSgdStrategy(ctx, localSgdOptions(c, total)); },
                     localSgdResumeKey}},
      {"diloco", {[](const TrainConfig& c, const parallel::StrategyContext& ctx,
                     int64_t) { return parallel::makeDilocoStrategy(ctx, dilocoOptions(c)); },
                  dilocoResumeKey}},
      {"gossip", {[](const TrainConfig& c, const parallel::StrategyContext& ctx, int64_t) {
                    return parallel::makeGossipStrategy(ctx, {c.gossip.topology, c.gossip.period, c.gossip.consensus_every});
                  },
                  [](const TrainConfig& c) { return "gossip/" + c.gossip.topology + "/" + std::to_string(c.gossip.period); }}},
      // The servers' shards and clocks fit any staleness bound.
      {"ssp", {[](const TrainConfig& c, const parallel::StrategyContext& ctx,
                  int64_t) { return parallel::makeSspStrategy(ctx, {c.ssp.staleness, c.ssp.overlap}); },
               [](const TrainConfig&) { return std::string("ssp"); }}},
  };
  return r;
}

const Entry& entry(const std::string& name) {
  const auto it = registry().find(name);
  if (it == registry().end()) throw ConfigError("strategy.name: unknown strategy '" + name + "'");
  return it->second;
}

}  // namespace

std::vector<std::string> strategyNames() {
  std::vector<std::string> out;
  for (const auto& [name, e] : registry()) out.push_back(name);
  return out;
}

std::unique_ptr<parallel::Strategy> makeStrategy(const TrainConfig& cfg, const parallel::StrategyContext& ctx,
                                                 int64_t total_steps) {
  return entry(cfg.strategy.name).make(cfg, ctx, total_steps);
}

std::string strategyResumeKey(const TrainConfig& cfg) {
  const auto& e = entry(cfg.strategy.name);
  return e.resume_key ? e.resume_key(cfg) : "";
}

}  // namespace lowcomm::train
