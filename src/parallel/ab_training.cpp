// AbTraining's construction, option checks and phase machine (warmup -> ab -> sync -> full rank).
// The rest of the class: ab_factors.cpp (factor sharing), ab_sizes.cpp (size accounting),
// ab_checkpoint.cpp (its checkpoint section).
#include "lowcomm/parallel/ab_training.h"

#include <string>
#include <vector>

#include "phase_scope.h"
#include "lowcomm/base/error.h"

namespace lowcomm::parallel {

void validateAbOptions(const AbOptions& o) {
  abSection().validate(o);
  if (!(o.rebound_lr > 0)) throw ConfigError("ab.rebound_lr: must be > 0");
}

const char* abPhaseName(AbPhase p) {
  switch (p) {
    case AbPhase::warmup: return "warmup";
    case AbPhase::ab: return "ab";
    case AbPhase::full_rank: return "full-rank";
  }
  return "?";
}

AbTraining::AbTraining(std::shared_ptr<comm::Communicator> world, std::shared_ptr<nn::Model> model,
                       torch::optim::Optimizer& opt, AbOptions opts, DdpOptions ddp_opts, HookFactory hooks, Trace* trace,
                       AbModelParts parts)
    : world_(std::move(world)),
      lowrank_(std::move(model), opts.full_rank_layers, opts.split_sigma, opts.factored_forward),
      opt_(opt),
      opts_(std::move(opts)), ddp_opts_(std::move(ddp_opts)), hooks_(std::move(hooks)), trace_(trace),
      parts_(std::move(parts)) {
  validateAbOptions(opts_);
  mode_ = parseSyncMode(opts_.sync_mode);
  groups_ = formGroups(world_->size(), world_->rank(), opts_.group_size,
                       mode_ == SyncMode::only_b || mode_ == SyncMode::only_smaller, world_->nodeOf());
  if (!opts_.split_sigma && groups_.a_groups > 0)
    throw ConfigError("ab.split_sigma = false puts S on the trained factor, so A-groups and B-groups would hold "
                      "different factorisations; use it only when every rank trains B (ab.sync_mode = \"only-b\" "
                      "or ab.group_size = \"world\")");
  if (opts_.group_lr == "explore" && groups_.groups < 2)
    throw ConfigError("ab.group_lr = \"explore\" needs two groups or more; ab.group_size and ab.sync_mode give one");
  if (lowrank_.layers().empty())
  {
    std::string full;
    for (const auto& l : lowrank_.fullRankLayers()) full += (full.empty() ? "" : ", ") + l;
    throw ConfigError("ab: model '" + lowrank_.model().spec().name + "' has no layer to factorise outside "
                      "ab.full_rank_layers (" + full + "); AB-training factorises Conv2d and Linear layers "
                      "(in a TorchScript model: torch.nn Linear, Conv1d, Conv2d and Conv3d modules)");
  }
  lowrank_.setRandomizedSvd(opts_.svd == "randomized", /*seed=*/0x5eed);
  layout_ = groups_;
  group_comm_ = world_->split(groups_.group, world_->rank());
  ddp_world_ = world_->split(0, world_->rank());
  opt_state_.rebind(opt_, trainable());
  rebuild(AbPhase::warmup);
  gatherLayers();  // every layer at rank 0 until the first SVD
  ddp_opts_.broadcast_initial = false;  // later rebuilds start from weights known to agree
}

AbTraining::~AbTraining() = default;

std::vector<nn::Factor> AbTraining::trainedFactors() const {
  if (mode_ == SyncMode::only_smaller) return lowrank_.smallerFactors();
  return std::vector<nn::Factor>(lowrank_.layers().size(), groups_.trains_a ? nn::Factor::A : nn::Factor::B);
}

NamedTensors AbTraining::trainable() const {
  NamedTensors out;
  for (const auto& p : lowrank_.shared()->named_parameters())
    if (p.value().requires_grad()) out.emplace_back(p.key(), p.value());
  return out;
}

void AbTraining::retire() {
  if (!ddp_) return;
  const auto s = ddp_->stats();
  past_stats_.comm_s += s.comm_s, past_stats_.wait_s += s.wait_s, past_stats_.buckets += s.buckets;
  ddp_.reset();
}

void AbTraining::rebuild(AbPhase phase) {
  retire();
  DdpOptions o = ddp_opts_;
  o.phase = abPhaseName(phase);
  o.split_comm = false;  // the two communicators below are this strategy's own, made once
  if (phase == AbPhase::ab && opts_.train_setup == "individual") o.local_suffixes = {".A", ".B"};
  ddp_ = std::make_unique<DataParallel>(phase == AbPhase::ab ? group_comm_ : ddp_world_, lowrank_.shared(), o,
                                        hooks_ ? hooks_() : nullptr, trace_);
  phase_ = phase;
}

DdpStats AbTraining::stats() const {
  DdpStats s = past_stats_;
  if (ddp_) {
    const auto c = ddp_->stats();
    s.comm_s += c.comm_s, s.wait_s += c.wait_s, s.buckets += c.buckets;
  }
  return s;
}

std::vector<double> AbTraining::groupLr() const {
  return groupLrMultipliers(lr_center_, opts_.group_lr_spread, groups_.groups);
}

double AbTraining::lr(int64_t step, double scheduled) const {
  if (opts_.group_lr == "explore") scheduled *= phase_ == AbPhase::ab ? groupLr()[groups_.group] : lr_center_;
  if (last_switch_ < 0 || opts_.lr_rebound_steps <= 0 || step < last_switch_) return scheduled;
  const int64_t since = step - last_switch_;
  if (since >= opts_.lr_rebound_steps) return scheduled;
  const double t = static_cast<double>(since) / static_cast<double>(opts_.lr_rebound_steps);
  return opts_.rebound_lr + (scheduled - opts_.rebound_lr) * t;
}

std::vector<AbEvent> AbTraining::takeEvents() {
  std::vector<AbEvent> out;
  out.swap(events_);
  return out;
}

std::string AbTraining::beginStep(int64_t step) {
  std::string label;
  if (phase_ == AbPhase::warmup) {
    if (step >= opts_.warmup_steps) enterAb(step, /*truncate=*/false);
    label = abPhaseName(phase_);
  } else if (phase_ == AbPhase::ab) {
    if (step > phase_start_ && step % opts_.steps_btw_syncing == 0) {
      sync(step, "sync");
      if (opts_.ddp_steps_after_sync == 0) enterAb(step, /*truncate=*/true);
      label = "sync";
    } else {
      label = "ab";
    }
  } else {
    if (step - phase_start_ >= opts_.ddp_steps_after_sync) enterAb(step, /*truncate=*/true);
    label = abPhaseName(phase_);
  }
  ++steps_by_phase_[label];
  return label;
}

void AbTraining::finish(int64_t step) {
  if (phase_ == AbPhase::ab) sync(step, "final-sync");
}

void AbTraining::observeLoss(double loss) {
  loss_sum_ += loss;
  ++loss_steps_;
}

void AbTraining::applyGroups() {
  groups_ = permuteGroups(layout_, regroupPermutation(world_->size(), opts_.seed, regroups_), world_->rank());
  group_comm_ = world_->split(groups_.group, world_->rank());
}

std::vector<double> AbTraining::rankLosses() {
  double mine = loss_steps_ > 0 ? loss_sum_ / static_cast<double>(loss_steps_) : 0.0;
  std::vector<double> losses(world_->size());
  world_->allgather(&mine, losses.data(), 1, comm::DType::f64);
  return losses;
}

void AbTraining::enterAb(int64_t step, bool truncate) {
  TraceScope scope(trace_, truncate ? "ab-truncate" : "ab-svd", "ab", 0);
  retire();  // its hooks hold the parameters about to be replaced
  {
    TraceScope svd(trace_, "svd", "ab", 0);
    const int n = world_->size();
    std::vector<bool> mine;  // with svd_split: the layers this rank decomposes
    if (opts_.svd_split)
      for (size_t i = 0; i < lowrank_.layers().size(); ++i) mine.push_back(static_cast<int>(i % n) == world_->rank());
    std::vector<int64_t> ranks = lowrank_.fullRanks();
    if (truncate) {
      ranks = lowrank_.ranksAbove(opts_.low_rank_cutoff, mine);
      PhaseScope ps(*world_, "svd");
      world_->allreduce(ranks.data(), ranks.size(), comm::DType::i64, comm::ReduceOp::max);
    }
    lowrank_.factorise(ranks, trainedFactors(), mine);
    if (opts_.svd_split) shareFactors();
    checkFactorsAgree();
  }
  opt_state_.rebind(opt_, trainable());
  if (opts_.reset_opt) opt_state_.resetMoments(opt_);
  TraceScope rb(trace_, "ddp-rebuild", "ab", 0);
  rebuild(AbPhase::ab);
  phase_start_ = step;
  last_switch_ = step;
  last_ranks_.clear();
  for (const auto& l : lowrank_.layers()) last_ranks_.push_back(l.rank);
  measureSizes();
  last_compression_ = compression_;
  last_reference_ = reference_;
  gatherLayers();
  events_.push_back(AbEvent{step, truncate ? "truncate" : "svd", model_layers_, last_compression_, last_reference_, {}, {}, {}});
}

void AbTraining::sync(int64_t step, const char* kind) {
  TraceScope scope(trace_, std::string("ab-") + kind, "ab", 0);
  retire();
  std::vector<double> group_weights, group_lr;
  const bool explore = opts_.group_lr == "explore" && std::string(kind) == "sync";
  {
    PhaseScope ps(*world_, "sync");
    std::vector<double> losses;
    if (opts_.sync_weights != "equal" || explore) losses = rankLosses();
    const auto weights = opts_.sync_weights == "equal" ? std::vector<double>{} : inverseLossWeights(groups_, losses);
    if (explore) lr_center_ = exploreLrCenter(groups_, losses, lr_center_, opts_.group_lr_spread);
    abSync(*world_, lowrank_, groups_, mode_, weights);
    if (!weights.empty()) {
      group_weights.assign(groups_.groups, 0.0);
      for (int r = 0; r < world_->size(); ++r) group_weights[groups_.group_of[r]] += weights[r];
    }
  }
  loss_sum_ = 0;
  loss_steps_ = 0;
  std::vector<int> group_of;
  if (opts_.regroup == "random" && std::string(kind) == "sync") {
    ++regroups_;
    applyGroups();
    group_of = groups_.group_of;
  }
  if (explore) group_lr = groupLr();
  opt_state_.rebind(opt_, trainable());
  if (opts_.reset_opt) opt_state_.resetMoments(opt_);
  rebuild(AbPhase::full_rank);
  phase_start_ = step;
  last_switch_ = step;
  measureSizes();
  events_.push_back(AbEvent{step, kind, {}, compression_, last_reference_, group_weights, group_of, group_lr});
}

}  // namespace lowcomm::parallel
