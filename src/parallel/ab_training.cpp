#include "lowcomm/parallel/ab_training.h"

#include <sstream>

#include <algorithm>

#include "lowcomm/base/error.h"

namespace lowcomm::parallel {
namespace {

// Restores a communicator's traffic label when a scope ends.
class PhaseScope {
 public:
  PhaseScope(comm::Communicator& c, const std::string& phase) : c_(c), saved_(c.phase()) { c_.setPhase(phase); }
  ~PhaseScope() { c_.setPhase(saved_); }

 private:
  comm::Communicator& c_;
  std::string saved_;
};

}  // namespace

void validateAbOptions(const AbOptions& o) {
  if (o.group_size == 0 || (o.group_size < 0 && o.group_size != kGroupHalves && o.group_size != kGroupNode &&
                            o.group_size != kGroupWorld))
    throw ConfigError("ab.group_size: must be \"node\", \"world\", -1 (two halves) or >= 1, got " +
                      std::to_string(o.group_size));
  if (o.svd != "exact" && o.svd != "randomized")
    throw ConfigError("ab.svd: unknown method '" + o.svd + "'; valid values: exact, randomized");
  if (o.sync_weights != "equal" && o.sync_weights != "inverse-loss")
    throw ConfigError("ab.sync_weights: unknown weighting '" + o.sync_weights + "'; valid values: equal, inverse-loss");
  if (o.regroup != "none" && o.regroup != "random")
    throw ConfigError("ab.regroup: unknown value '" + o.regroup + "'; valid values: none, random");
  if (o.regroup == "random" && o.group_size == kGroupNode)
    throw ConfigError("ab.regroup = \"random\" would move ranks across nodes: set ab.group_size to a size or -1");
  if (o.train_setup != "groups" && o.train_setup != "individual")
    throw ConfigError("ab.train_setup: unknown setup '" + o.train_setup + "'; valid values: groups, individual");
  if (o.group_lr != "fixed" && o.group_lr != "explore")
    throw ConfigError("ab.group_lr: unknown value '" + o.group_lr + "'; valid values: fixed, explore");
  if (!(o.group_lr_spread >= 1 && o.group_lr_spread <= 16))
    throw ConfigError("ab.group_lr_spread: must be in [1, 16], got " + std::to_string(o.group_lr_spread));
  parseSyncMode(o.sync_mode);
  if (o.warmup_steps < 0) throw ConfigError("ab.warmup_steps: must be >= 0");
  if (o.steps_btw_syncing < 1) throw ConfigError("ab.steps_btw_syncing: must be >= 1");
  if (o.ddp_steps_after_sync < 0) throw ConfigError("ab.ddp_steps_after_sync: must be >= 0");
  if (o.lr_rebound_steps < 0) throw ConfigError("ab.lr_rebound_steps: must be >= 0");
  if (!(o.low_rank_cutoff >= 0 && o.low_rank_cutoff < 1))
    throw ConfigError("ab.low_rank_cutoff: must be in [0, 1), got " + std::to_string(o.low_rank_cutoff));
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

// Each stage's rows as "name rows cols rank" lines, concatenated in stage order.
void AbTraining::gatherLayers() {
  std::string mine;
  const auto& layers = lowrank_.layers();
  for (size_t i = 0; i < layers.size(); ++i)
    mine += layers[i].name + " " + std::to_string(layers[i].rows) + " " + std::to_string(layers[i].cols) + " " +
            std::to_string(i < last_ranks_.size() ? last_ranks_[i] : 0) + "\n";
  std::string all = mine;
  if (const auto& stages = parts_.stages; stages && stages->size() > 1) {
    std::vector<int64_t> sizes(stages->size());
    int64_t n = static_cast<int64_t>(mine.size());
    stages->allgather(&n, sizes.data(), 1, comm::DType::i64);
    std::vector<size_t> counts(sizes.begin(), sizes.end());
    size_t total = 0;
    for (auto c : counts) total += c;
    all.assign(total, '\0');
    stages->allgatherv(mine.data(), mine.size(), all.data(), counts, comm::DType::u8);
  }
  model_layers_.clear();
  std::istringstream in(all);
  AbLayerRow row;
  while (in >> row.name >> row.rows >> row.cols >> row.rank) model_layers_.push_back(row);
}

// Whole-model counts: a replicated parameter counts 1/T on each of the T tensor-parallel ranks,
// a layer's full-rank extra (whole-layer shape) 1/T too; then summed over tensor ranks and stages.
void AbTraining::measureSizes() {
  const double t = parts_.tensor ? parts_.tensor->size() : 1;
  auto share = [&](const std::string& name) { return t > 1 && parts_.split && !parts_.split(name) ? 1.0 / t : 1.0; };
  double n[3] = {0, 0, 0};  // parameters now, what full rank would add, the factorisable layers' biases
  for (const auto& p : lowrank_.model().named_parameters()) n[0] += static_cast<double>(p.value().numel()) * share(p.key());
  const auto& layers = lowrank_.layers();
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    if (l.rank > 0) n[1] += static_cast<double>(l.rows * l.cols - l.rank * (l.rows + l.cols)) / t;
    n[2] += static_cast<double>(lowrank_.biasNumel(i)) * share(l.name + ".bias");
  }
  for (auto* c : {parts_.tensor.get(), parts_.stages.get()})
    if (c && c->size() > 1) c->allreduce(n, 3, comm::DType::f64, comm::ReduceOp::sum);
  compression_ = n[0] / (n[0] + n[1]);
  reference_ = n[0] / (n[0] + n[1] - n[2]);
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

// svd_split: layer i's factors come from rank i % world, in one broadcast per layer (A then B).
void AbTraining::shareFactors() {
  PhaseScope ps(*world_, "svd");
  torch::NoGradGuard no_grad;
  const int n = world_->size();
  for (size_t i = 0; i < lowrank_.layers().size(); ++i) {
    auto a = lowrank_.factorA(i).detach(), b = lowrank_.factorB(i).detach();
    auto buf = torch::cat({a.reshape({-1}), b.reshape({-1})});
    world_->broadcast(buf.data_ptr<float>(), buf.numel(), comm::DType::f32, static_cast<int>(i % n));
    a.copy_(buf.narrow(0, 0, a.numel()).view(a.sizes()));
    b.copy_(buf.narrow(0, a.numel(), b.numel()).view(b.sizes()));
  }
  lowrank_.refreshWeights();
}

// Every rank computed its SVD from the same weights; LAPACK is deterministic for equal inputs
// and thread counts, but a cheap checksum guards against a rank that differs (different BLAS
// threading): if any layer's factors disagree, rank 0's factors are broadcast.
void AbTraining::checkFactorsAgree() {
  PhaseScope ps(*world_, "svd");
  const size_t n = lowrank_.layers().size();
  std::vector<double> lo(2 * n), hi;
  for (size_t i = 0; i < n; ++i) {
    lo[2 * i] = lowrank_.factorA(i).detach().sum().item<double>();
    lo[2 * i + 1] = lowrank_.factorB(i).detach().sum().item<double>();
  }
  hi = lo;
  world_->allreduce(lo.data(), lo.size(), comm::DType::f64, comm::ReduceOp::min);
  world_->allreduce(hi.data(), hi.size(), comm::DType::f64, comm::ReduceOp::max);
  if (lo == hi) return;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < n; ++i)
    for (auto t : {lowrank_.factorA(i).detach(), lowrank_.factorB(i).detach()})
      world_->broadcast(t.data_ptr<float>(), t.numel(), comm::DType::f32, 0);
}

void AbTraining::saveState(torch::serialize::OutputArchive& ar) const {
  std::vector<int64_t> ranks;
  for (const auto& l : lowrank_.layers()) ranks.push_back(l.rank);
  const std::vector<int64_t> head = {static_cast<int64_t>(phase_), phase_start_, last_switch_,
                                     lowrank_.factorised() ? 1 : 0, lowrank_.trained() == nn::Factor::A ? 1 : 0,
                                     groups_.group, groups_.groups};
  ar.write("head", torch::tensor(head, torch::kInt64));
  ar.write("ranks", torch::tensor(ranks, torch::kInt64));
  ar.write("last_ranks", torch::tensor(last_ranks_, torch::kInt64));
  ar.write("last_compression", torch::tensor({last_compression_, last_reference_}, torch::kFloat64));
  std::vector<int64_t> counts;
  for (const char* k : {"warmup", "ab", "sync", "full-rank"})
    counts.push_back(steps_by_phase_.count(k) ? steps_by_phase_.at(k) : 0);
  ar.write("steps_by_phase", torch::tensor(counts, torch::kInt64));
  ar.write("sync_loss", torch::tensor({loss_sum_, static_cast<double>(loss_steps_)}, torch::kFloat64));
  ar.write("regroups", torch::tensor({regroups_}, torch::kInt64));
  ar.write("group_lr_center", torch::tensor({lr_center_}, torch::kFloat64));
  torch::serialize::OutputArchive os;
  opt_state_.save(os);
  ar.write("optimizer_stash", os);
}

void AbTraining::loadState(torch::serialize::InputArchive& ar) {
  auto read = [&](const char* key) {
    torch::Tensor t;
    if (!ar.try_read(key, t)) throw DataError(std::string("AB-training state has no '") + key + "'");
    return t;
  };
  const auto head = read("head");
  const auto ranks_t = read("ranks");
  if (head.numel() != 7 || ranks_t.numel() != static_cast<int64_t>(lowrank_.layers().size()))
    throw DataError("AB-training state does not match this model's low-rank layers");
  const auto h = head.accessor<int64_t, 1>();
  torch::Tensor regroups;  // absent in checkpoints from before regrouping
  const int64_t saved_regroups = ar.try_read("regroups", regroups) && regroups.numel() == 1 ? regroups.item<int64_t>() : 0;
  if (saved_regroups != regroups_) {
    regroups_ = saved_regroups;
    applyGroups();  // collective: every rank resumes from the same sync
  }
  if (h[5] != groups_.group || h[6] != groups_.groups)
    throw ConfigError("--resume: the checkpoint's AB groups differ from ab.group_size / ab.sync_mode now");
  std::vector<int64_t> ranks(ranks_t.data_ptr<int64_t>(), ranks_t.data_ptr<int64_t>() + ranks_t.numel());
  const auto lr_t = read("last_ranks");
  last_ranks_.assign(lr_t.data_ptr<int64_t>(), lr_t.data_ptr<int64_t>() + lr_t.numel());
  const auto lc = read("last_compression");
  last_compression_ = lc[0].item<double>();
  last_reference_ = lc.numel() > 1 ? lc[1].item<double>() : 1.0;
  const auto counts = read("steps_by_phase");
  const char* names[] = {"warmup", "ab", "sync", "full-rank"};
  steps_by_phase_.clear();
  for (int i = 0; i < 4 && i < counts.numel(); ++i)
    if (counts[i].item<int64_t>() > 0) steps_by_phase_[names[i]] = counts[i].item<int64_t>();
  torch::Tensor sync_loss;  // absent in checkpoints from before loss-weighted syncs
  loss_sum_ = 0, loss_steps_ = 0;
  if (ar.try_read("sync_loss", sync_loss) && sync_loss.numel() == 2) {
    loss_sum_ = sync_loss[0].item<double>();
    loss_steps_ = static_cast<int64_t>(sync_loss[1].item<double>());
  }
  torch::Tensor center;  // absent in checkpoints from before ab.group_lr
  lr_center_ = ar.try_read("group_lr_center", center) && center.numel() == 1 ? center.item<double>() : 1.0;
  retire();
  if (last_ranks_.size() == lowrank_.layers().size()) lowrank_.setLastRanks(last_ranks_);
  gatherLayers();
  // Zero placeholders of the right shapes: the checkpoint's model section fills in A and B.
  const std::vector<bool> no_svd(lowrank_.layers().size(), false);
  if (h[3] && mode_ == SyncMode::only_smaller) lowrank_.factorise(ranks, lowrank_.smallerFactors(), no_svd);
  else if (h[3])
    lowrank_.factorise(ranks, std::vector<nn::Factor>(ranks.size(), h[4] ? nn::Factor::A : nn::Factor::B), no_svd);
  else lowrank_.merge();
  torch::serialize::InputArchive stash;
  if (!ar.try_read("optimizer_stash", stash)) throw DataError("AB-training state has no optimizer stash");
  opt_state_.load(stash, opt_);
  opt_state_.rebind(opt_, trainable());
  rebuild(static_cast<AbPhase>(h[0]));
  measureSizes();
  phase_start_ = h[1];
  last_switch_ = h[2];
}

}  // namespace lowcomm::parallel
