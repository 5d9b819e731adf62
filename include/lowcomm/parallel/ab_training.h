// AB-training (docs/ab-training.md): low-rank factors A and B trained by independent subgroups of
// ranks, synchronised periodically, with global full-rank data-parallel phases in between.
//
// The schedule, decided before each optimizer step by beginStep(step):
//   warmup     global full-rank DDP while step < warmup_steps; then SVD without truncation and
//   ab         group DDP of the trained factor (A in A-groups, B in B-groups), 1-D parameters and
//              the always-full-rank layers; at every step divisible by steps_btw_syncing:
//   sync       abSync() over the world (mode), W = A*B, then
//   full-rank  ddp_steps_after_sync steps of global full-rank DDP; then SVD with truncation
//              (rank per layer = MAX over all ranks of #{s > low_rank_cutoff * s_max}) and back
//              to ab.
// Every switch restarts the learning-rate rebound (lr() ramps from rebound_lr to the scheduled
// rate over lr_rebound_steps) and rebinds the optimizer with its state resized by name
// (NamedOptimizerState). DDP is rebuilt on the group or world communicator at each switch,
// with a fresh hook from the factory (so a codec works inside groups too); its traffic is
// labelled with the phase ("warmup", "ab", "full-rank"), the sync's with "sync", the SVD's
// consistency check with "svd".
//
// Contract: construction and beginStep()/finish() are collective over `world`; the optimizer
// must be built over the model's parameters and outlive this object.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lowcomm/base/schema.h"
#include "lowcomm/base/trace.h"
#include "lowcomm/comm/communicator.h"
#include "lowcomm/nn/low_rank.h"
#include "lowcomm/parallel/ab_groups.h"
#include "lowcomm/parallel/ddp.h"
#include "lowcomm/parallel/optim_state.h"
#include "lowcomm/parallel/strategy.h"

namespace lowcomm::parallel {

struct AbOptions {
  int group_size = kGroupNode;          // ranks per group, or kGroupNode / kGroupHalves / kGroupWorld
  std::string sync_mode = "with-stale";  // full | with-stale | only-learned | only-b | only-smaller
  // Step counts, or fractions of the run resolved by the factory (schema::RunSteps).
  schema::RunSteps warmup_steps = 500;
  schema::RunSteps steps_btw_syncing = 200;
  schema::RunSteps ddp_steps_after_sync = 20;
  schema::RunSteps lr_rebound_steps = 50;
  double low_rank_cutoff = 0.15;
  bool split_sigma = true;
  std::vector<std::string> full_rank_layers = {nn::kStemName, nn::kHeadName};
  double rebound_lr = 1e-5;
  // "groups": the trained factor's gradients are averaged inside the group every step;
  // "individual": every rank trains its factor alone between syncs (only 1-D parameters and the
  // always-full-rank layers are averaged inside the group).
  std::string train_setup = "groups";
  bool reset_opt = false;         // zero the optimizer moments at every switch (the reference's reset_opt)
  bool factored_forward = true;   // truncated layers run as two thin ops (low_rank.h)
  std::string svd = "randomized"; // "exact" | "randomized" (sketch of the previous rank + 8, low_rank.h)
  // Spread the layers' SVDs over the ranks: layer i is decomposed by rank i % world, which
  // broadcasts its factors (phase "svd"); otherwise every rank decomposes every layer.
  bool svd_split = false;
  // "equal": every sync is a plain mean; "inverse-loss": weighted by inverseLossWeights() of the
  // ranks' mean training loss since the previous sync (observeLoss), so a group that learned
  // more counts more.
  std::string sync_weights = "equal";
  // "none": the groups stay as formed; "random": after every sync the ranks are shuffled into
  // new groups of the same sizes (regroupPermutation(world, seed, sync number)). Not with
  // group_size "node" (the groups would cross nodes).
  std::string regroup = "none";
  // "fixed": every group trains at the scheduled rate; "explore": in the ab phase group g trains at
  // it times groupLrMultipliers(center, group_lr_spread, groups)[g], and every sync moves the
  // center to the multiplier of the group with the lowest training loss since the previous sync
  // (exploreLrCenter); the global phases train at center. Needs two groups or more.
  std::string group_lr = "fixed";
  double group_lr_spread = 2.0;
  uint64_t seed = 0;
};

// The [ab] config section: every key declared once (src/parallel/ab_spec.cpp).
schema::Section<AbOptions> abSection();
// Throws ConfigError naming the `ab.*` key for a value out of its declared range or an
// impossible combination (abSection().validate() and the keys the config does not set).
void validateAbOptions(const AbOptions& o);

enum class AbPhase { warmup = 0, ab = 1, full_rank = 2 };
const char* abPhaseName(AbPhase p);

// A structural change, for the metrics stream.
// One factorisable layer of the whole model (every pipeline stage's, in stage order) as of the
// latest SVD: its 2-D shape and the rank it was factorised at.
struct AbLayerRow {
  std::string name;
  int64_t rows = 0, cols = 0, rank = 0;
};

struct AbEvent {
  int64_t step = 0;
  std::string kind;              // "svd" (after warmup), "sync", "truncate", "final-sync"
  std::vector<AbLayerRow> ranks; // per low-rank layer of the whole model after the change (empty when full-rank)
  double compression = 1.0;      // parameters now / full-rank parameters
  double compression_reference = 1.0;  // LowRankModel::referenceCompression()
  std::vector<double> group_weights;   // syncs with ab.sync_weights = "inverse-loss": per group
  std::vector<int> group_of;           // syncs with ab.regroup: the new group of every rank
  std::vector<double> group_lr;        // syncs with ab.group_lr = "explore": per group, for the next ab phase
};

// Where the rest of a model-parallel model is.
struct AbModelParts {
  std::shared_ptr<comm::Communicator> stages;  // the pipeline stages of this replica (parallel.pp > 1)
  std::shared_ptr<comm::Communicator> tensor;  // the tensor-parallel ranks of this stage (parallel.tp > 1)
  std::function<bool(const std::string&)> split;  // parameter name: split over `tensor` (else replicated)
};

class AbTraining {
 public:
  // On a model-parallel grid `model` is this rank's part and `world` the data-parallel
  // communicator of ranks holding the same part; `parts` says where the rest is, and the model
  // sizes below are then the whole model's. Default: `model` is whole.
  AbTraining(std::shared_ptr<comm::Communicator> world, std::shared_ptr<nn::Model> model,
             torch::optim::Optimizer& opt, AbOptions opts, DdpOptions ddp_opts, HookFactory hooks = nullptr,
             Trace* trace = nullptr, AbModelParts parts = {});
  ~AbTraining();

  // Runs the transitions due before optimizer step `step` (0-based) and returns this step's
  // label: "warmup", "ab", "sync" (a sync ran before it) or "full-rank".
  std::string beginStep(int64_t step);
  // End of training: in the ab phase, a final sync so every rank holds the same full-rank model.
  void finish(int64_t step);
  // This rank's training loss of the step just taken (for ab.sync_weights = "inverse-loss").
  void observeLoss(double loss);

  torch::Tensor forward(const torch::Tensor& x) { return lowrank_.forward(x); }
  DataParallel& ddp() { return *ddp_; }
  const DataParallel& ddp() const { return *ddp_; }
  nn::LowRankModel& lowRank() { return lowrank_; }
  const nn::LowRankModel& lowRank() const { return lowrank_; }
  const AbGroups& groups() const { return groups_; }
  AbPhase phase() const { return phase_; }
  const AbOptions& options() const { return opts_; }

  // Learning rate for `step` given the scheduled one: times the group's multiplier (ab.group_lr),
  // then the rebound after a switch.
  double lr(int64_t step, double scheduled) const;
  // ab.group_lr = "explore": the current center (1 otherwise).
  double lrCenter() const { return lr_center_; }
  // Parameters of the model as trained now / with every layer full rank (1 while full-rank), as
  // of the latest transition (measured then, collectively over the stages).
  // lastCompression(): after the latest truncation/SVD.
  double compression() const { return compression_; }
  double lastCompression() const { return last_compression_; }
  double lastReferenceCompression() const { return last_reference_; }
  const std::vector<int64_t>& lastRanks() const { return last_ranks_; }  // this stage's layers
  // The whole model's layers as of the latest SVD (gathered over the stages then).
  const std::vector<AbLayerRow>& modelLayers() const { return model_layers_; }
  // Events since the last call.
  std::vector<AbEvent> takeEvents();
  const std::map<std::string, int64_t>& stepsByPhase() const { return steps_by_phase_; }
  // DDP statistics summed over every DDP instance this strategy built.
  DdpStats stats() const;

  // Checkpoints: loadState() restores the structure (factorised or not, ranks, trained factor,
  // phase), rebuilds DDP and rebinds the optimizer; load the model and optimizer after it.
  void saveState(torch::serialize::OutputArchive& ar) const;
  void loadState(torch::serialize::InputArchive& ar);

 private:
  // Sets compression_ and reference_ from the model now (collective over parts_' communicators).
  void measureSizes();
  // Sets model_layers_ from this stage's layers and last_ranks_ (collective over parts_.stages).
  void gatherLayers();
  void retire();  // ends the current DDP, keeping its statistics
  void rebuild(AbPhase phase);
  void enterAb(int64_t step, bool truncate);
  void sync(int64_t step, const char* kind);
  void checkFactorsAgree();
  std::vector<double> rankLosses();   // every rank's mean training loss since the last sync (collective)
  std::vector<double> groupLr() const;  // per group, in the ab phase
  void applyGroups();                 // groups_ and group_comm_ for regroups_ (collective)
  void shareFactors();
  NamedTensors trainable() const;
  std::vector<nn::Factor> trainedFactors() const;  // per layer, for this rank

  std::shared_ptr<comm::Communicator> world_, group_comm_, ddp_world_;  // DDP runs on the last two
  nn::LowRankModel lowrank_;
  torch::optim::Optimizer& opt_;
  AbOptions opts_;
  DdpOptions ddp_opts_;
  HookFactory hooks_;
  Trace* trace_;
  AbGroups groups_;
  SyncMode mode_;
  std::unique_ptr<DataParallel> ddp_;
  DdpStats past_stats_;
  NamedOptimizerState opt_state_;
  AbPhase phase_ = AbPhase::warmup;
  int64_t phase_start_ = 0, last_switch_ = -1;
  double last_compression_ = 1.0, last_reference_ = 1.0;
  AbModelParts parts_;
  double compression_ = 1.0, reference_ = 1.0;  // now (measureSizes)
  std::vector<int64_t> last_ranks_;
  std::vector<AbLayerRow> model_layers_;
  std::vector<AbEvent> events_;
  AbGroups layout_;      // the groups as formed; regrouping permutes it
  int64_t regroups_ = 0;
  double loss_sum_ = 0;  // this rank's training loss since the last sync
  int64_t loss_steps_ = 0;
  double lr_center_ = 1.0;  // ab.group_lr = "explore"
  std::map<std::string, int64_t> steps_by_phase_;
};

}  // namespace lowcomm::parallel

namespace lowcomm::parallel {

// `strategy.name = "ab"`: AbTraining behind the Strategy seam (ctx.optimizer required). Its
// events are abEventJson records; its summary block is abSummaryJson.
std::unique_ptr<Strategy> makeAbStrategy(const StrategyContext& ctx, AbOptions opts);

// {"type": "ab", "step", "event", "ranks": {layer: rank}, "model_size_fraction" (parameters now /
// full-rank parameters), "model_size_n_to_1", "compression_reference" (the reference's metric,
// LowRankModel::referenceCompression), "compression_reference_n_to_1"}.
nlohmann::json abEventJson(const AbEvent& e, const AbTraining& ab);
// The summary's "ab" block: groups, setup, steps per phase, the last SVD's ranks, both size
// metrics (as in abEventJson) and "layers": [{name, rows, cols, rank, full_rank, params_full,
// params_factors}].
nlohmann::json abSummaryJson(const AbTraining& ab);

}  // namespace lowcomm::parallel
