#include "ab_report.h"

namespace lowcomm::train {
namespace {

nlohmann::json ranksJson(const std::vector<int64_t>& ranks, const parallel::AbTraining& ab) {
  nlohmann::json out = nlohmann::json::object();
  const auto& layers = ab.lowRank().layers();
  for (size_t i = 0; i < ranks.size() && i < layers.size(); ++i) out[layers[i].name] = ranks[i];
  return out;
}

nlohmann::json groupSizeJson(int group_size) {
  if (group_size == parallel::kGroupNode || group_size == parallel::kGroupWorld)
    return parallel::groupSizeName(group_size);
  return group_size;
}

}  // namespace

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
  return o;
}

std::string abResumeKey(const TrainConfig& c) {
  if (c.strategy.name != "ab") return "";
  std::string k = "ab/" + std::to_string(c.ab.group_size) + "/" + c.ab.sync_mode + "/" +
                  (c.ab.split_sigma ? "split" : "whole");
  for (const auto& l : c.ab.full_rank_layers) k += "/" + l;
  if (c.ab.train_setup != "groups") k += "/" + c.ab.train_setup;
  return k;
}

nlohmann::json abEventJson(const parallel::AbEvent& e, const parallel::AbTraining& ab) {
  nlohmann::json j = {{"type", "ab"}, {"step", e.step}, {"event", e.kind},
                      {"model_size_fraction", e.compression},
                      {"model_size_n_to_1", e.compression > 0 ? 1.0 / e.compression : 0.0},
                      {"compression_reference", e.compression_reference},
                      {"compression_reference_n_to_1", e.compression_reference > 0 ? 1.0 / e.compression_reference : 0.0}};
  if (!e.ranks.empty()) j["ranks"] = ranksJson(e.ranks, ab);
  return j;
}

nlohmann::json abSummaryJson(const parallel::AbTraining& ab) {
  const auto& g = ab.groups();
  const auto& o = ab.options();
  const double c = ab.lastCompression(), ref = ab.lastReferenceCompression();
  // Per factorised layer, as of the last SVD: shape, kept rank, parameters before and after.
  nlohmann::json layers = nlohmann::json::array();
  const auto& lr = ab.lowRank();
  const auto& ranks = ab.lastRanks();
  for (size_t i = 0; i < lr.layers().size(); ++i) {
    const auto& l = lr.layers()[i];
    const int64_t r = i < ranks.size() ? ranks[i] : 0;
    layers.push_back({{"name", l.name}, {"rows", l.rows}, {"cols", l.cols}, {"rank", r},
                      {"full_rank", std::min(l.rows, l.cols)}, {"params_full", l.rows * l.cols},
                      {"params_factors", r * (l.rows + l.cols)}});
  }
  return {{"group_size", groupSizeJson(o.group_size)},
          {"train_setup", o.train_setup},
          {"members", g.members},
          {"groups", g.groups},
          {"a_groups", g.a_groups},
          {"sync_mode", o.sync_mode},
          {"steps_by_phase", ab.stepsByPhase()},
          {"ranks", ranksJson(ab.lastRanks(), ab)},
          {"model_size_fraction", c},
          {"model_size_n_to_1", c > 0 ? 1.0 / c : 0.0},
          {"compression_reference", ref},
          {"compression_reference_n_to_1", ref > 0 ? 1.0 / ref : 0.0},
          {"layers", layers}};
}

}  // namespace lowcomm::train
