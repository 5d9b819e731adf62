#include "ab_report.h"

namespace lowcomm::train {
namespace {

nlohmann::json ranksJson(const std::vector<int64_t>& ranks, const parallel::AbTraining& ab) {
  nlohmann::json out = nlohmann::json::object();
  const auto& layers = ab.lowRank().layers();
  for (size_t i = 0; i < ranks.size() && i < layers.size(); ++i) out[layers[i].name] = ranks[i];
  return out;
}

}  // namespace

parallel::AbOptions abOptions(const TrainConfig& c) {
  parallel::AbOptions o;
  o.group_size = static_cast<int>(c.ab.group_size);
  o.sync_mode = c.ab.sync_mode;
  o.warmup_steps = c.ab.warmup_steps;
  o.steps_btw_syncing = c.ab.steps_btw_syncing;
  o.ddp_steps_after_sync = c.ab.ddp_steps_after_sync;
  o.lr_rebound_steps = c.ab.lr_rebound_steps;
  o.low_rank_cutoff = c.ab.low_rank_cutoff;
  o.split_sigma = c.ab.split_sigma;
  o.full_rank_layers = c.ab.full_rank_layers;
  return o;
}

std::string abResumeKey(const TrainConfig& c) {
  if (c.strategy.name != "ab") return "";
  std::string k = "ab/" + std::to_string(c.ab.group_size) + "/" + c.ab.sync_mode + "/" +
                  (c.ab.split_sigma ? "split" : "whole");
  for (const auto& l : c.ab.full_rank_layers) k += "/" + l;
  return k;
}

nlohmann::json abEventJson(const parallel::AbEvent& e, const parallel::AbTraining& ab) {
  nlohmann::json j = {{"type", "ab"}, {"step", e.step}, {"event", e.kind}, {"compression", e.compression},
                      {"compression_n_to_1", e.compression > 0 ? 1.0 / e.compression : 0.0}};
  if (!e.ranks.empty()) j["ranks"] = ranksJson(e.ranks, ab);
  return j;
}

nlohmann::json abSummaryJson(const parallel::AbTraining& ab) {
  const auto& g = ab.groups();
  const auto& o = ab.options();
  const double c = ab.lastCompression();
  return {{"group_size", o.group_size},
          {"groups", g.groups},
          {"a_groups", g.a_groups},
          {"sync_mode", o.sync_mode},
          {"steps_by_phase", ab.stepsByPhase()},
          {"ranks", ranksJson(ab.lastRanks(), ab)},
          {"compression", c},
          {"compression_n_to_1", c > 0 ? 1.0 / c : 0.0}};
}

}  // namespace lowcomm::train
