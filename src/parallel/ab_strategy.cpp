// `strategy.name = "ab"`: AbTraining behind the Strategy seam, and the JSON its events and
// summary block carry.
#include "lowcomm/parallel/ab_training.h"
#include "lowcomm/parallel/sharded_model.h"

namespace lowcomm::parallel {
namespace {

nlohmann::json ranksJson(const std::vector<AbLayerRow>& layers) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& l : layers) out[l.name] = l.rank;
  return out;
}

nlohmann::json groupSizeJson(int group_size) {
  if (group_size == kGroupNode || group_size == kGroupWorld) return groupSizeName(group_size);
  return group_size;
}

// Both size metrics: ours (parameters now / full-rank) and the reference's, each with its n:1.
void sizeFields(nlohmann::json& j, double ours, double reference) {
  j["model_size_fraction"] = ours;
  j["model_size_n_to_1"] = ours > 0 ? 1.0 / ours : 0.0;
  j["compression_reference"] = reference;
  j["compression_reference_n_to_1"] = reference > 0 ? 1.0 / reference : 0.0;
}

AbModelParts partsOf(const StrategyContext& ctx) {
  AbModelParts parts{ctx.stages, ctx.tensor, nullptr};
  if (ctx.shard) parts.split = [shard = ctx.shard](const std::string& name) { return shard->sharded(name); };
  return parts;
}

class AbStrategy : public Strategy {
 public:
  AbStrategy(const StrategyContext& ctx, AbOptions opts)
      : ab_(ctx.world, ctx.model, *ctx.optimizer, std::move(opts), ctx.ddp, ctx.hooks, ctx.trace, partsOf(ctx)) {}

  std::string beginStep(int64_t step) override { return ab_.beginStep(step); }
  std::vector<nlohmann::json> takeEvents() override {
    std::vector<nlohmann::json> out;
    for (const auto& e : ab_.takeEvents()) out.push_back(abEventJson(e, ab_));
    return out;
  }
  torch::Tensor forward(const torch::Tensor& x) override { return ab_.forward(x); }
  void setSync(bool sync) override { ab_.ddp().setSync(sync); }
  void afterBackward() override { ab_.ddp().finish(); }
  double lr(int64_t step, double scheduled) const override { return ab_.lr(step, scheduled); }
  void observeLoss(double loss) override { ab_.observeLoss(loss); }
  void beforeEval() override { ab_.ddp().averageBuffers(); }
  // During training every rank evaluates its own group's model (A and B not yet merged).
  nlohmann::json evalFields() const override { return {{"ab_phase", abPhaseName(ab_.phase())}}; }
  bool finish(int64_t step) override {
    if (ab_.phase() != AbPhase::ab) return false;
    ab_.finish(step);  // one full-rank model on every rank
    return true;
  }
  std::function<void(torch::serialize::OutputArchive&)> stateWriter() override {
    return [this](torch::serialize::OutputArchive& ar) { ab_.saveState(ar); };
  }
  std::function<void(torch::serialize::InputArchive&)> stateReader() override {
    return [this](torch::serialize::InputArchive& ar) { ab_.loadState(ar); };
  }
  BucketHook* hook() override { return &ab_.ddp().hook(); }
  // In the `individual` setup's ab phase every rank trains its factor alone.
  comm::Communicator* replicas() override {
    if (ab_.phase() == AbPhase::ab && ab_.options().train_setup == "individual") return nullptr;
    return &ab_.ddp().comm();
  }
  DdpStats stats() const override { return ab_.stats(); }
  size_t buckets() const override { return ab_.ddp().buckets().size(); }
  nlohmann::json stepFields() const override { return {{"ab_model_size_fraction", ab_.compression()}}; }
  nlohmann::json summary() const override { return abSummaryJson(ab_); }

 private:
  AbTraining ab_;
};

}  // namespace

nlohmann::json abEventJson(const AbEvent& e, const AbTraining& ab) {
  nlohmann::json j = {{"type", "ab"}, {"step", e.step}, {"event", e.kind}};
  sizeFields(j, e.compression, e.compression_reference);
  if (!e.ranks.empty()) j["ranks"] = ranksJson(e.ranks);
  if (!e.group_weights.empty()) j["group_weights"] = e.group_weights;
  if (!e.group_of.empty()) j["group_of"] = e.group_of;
  if (!e.group_lr.empty()) j["group_lr"] = e.group_lr;
  return j;
}

nlohmann::json abSummaryJson(const AbTraining& ab) {
  const auto& g = ab.groups();
  const auto& o = ab.options();
  // Per factorised layer of the whole model, as of the last SVD: shape, kept rank, parameters
  // before and after.
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& l : ab.modelLayers())
    layers.push_back({{"name", l.name}, {"rows", l.rows}, {"cols", l.cols}, {"rank", l.rank},
                      {"full_rank", std::min(l.rows, l.cols)}, {"params_full", l.rows * l.cols},
                      {"params_factors", l.rank * (l.rows + l.cols)}});
  nlohmann::json j = {{"group_size", groupSizeJson(o.group_size)},
                      {"train_setup", o.train_setup},
                      {"members", g.members},
                      {"groups", g.groups},
                      {"a_groups", g.a_groups},
                      {"sync_mode", o.sync_mode},
                      {"sync_weights", o.sync_weights},
                      {"regroup", o.regroup},
                      {"group_lr", o.group_lr},
                      {"steps_by_phase", ab.stepsByPhase()},
                      {"ranks", ranksJson(ab.modelLayers())},
                      {"full_rank_layers", ab.lowRank().fullRankLayers()}};
  if (o.group_lr == "explore") {
    j["group_lr_spread"] = o.group_lr_spread;
    j["group_lr_center"] = ab.lrCenter();
  }
  sizeFields(j, ab.lastCompression(), ab.lastReferenceCompression());
  j["layers"] = layers;
  return j;
}

std::unique_ptr<Strategy> makeAbStrategy(const StrategyContext& ctx, AbOptions opts) {
  return std::make_unique<AbStrategy>(ctx, std::move(opts));
}

}  // namespace lowcomm::parallel
