// The seam between the trainer and a parallel training strategy (docs/architecture.md; cf. PyTorch
// Lightning's Strategy). The trainer owns the loop, the data, the metrics and the checkpoint
// files; a strategy owns its communicators, what happens around backward and the optimizer
// step, its state in the checkpoint and its block of the summary. A new strategy is a class
// implementing this interface in src/parallel plus one line in the trainer's registry
// (a StrategySpec beside it, lowcomm/parallel/strategy_spec.h). The methods every strategy
// needs are pure; the rest have defaults meaning "none".
//
// One optimizer step, as the trainer drives it:
//   label = beginStep(step)               transitions due before this step; its phase label
//   events = takeEvents()                 structural changes, written to metrics.jsonl as is
//   per micro-batch: setSync(last one); loss(forward(x)).backward()
//     (on a pipeline the stage's forward; interleaved runs the model's chunks and calls
//     setSync(true) before each chunk's last micro-batch, the last backward reaching its parameters)
//   afterBackward()                       gradients are final (synchronised) after it
//   clipGradients(max) or, when it declines, clip the model's .grad;
//   set lr(step, scheduled); optimizer.step(); zero_grad()
//   afterOptimizerStep(step); observeLoss(this rank's step loss)
// Evaluation: beforeEval(), then forward() in eval mode; every rank evaluates its shard.
// End of training: finish(step), takeEvents(), the final evaluation and checkpoint.
// Resume: loadState() runs before the model, optimizer and hook() state are loaded.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lowcomm/base/trace.h"
#include "lowcomm/comm/communicator.h"
#include "lowcomm/nn/models.h"
#include "lowcomm/parallel/ddp.h"

namespace lowcomm::parallel {

// A fresh gradient hook (codec) per DDP instance; null or returning null: plain allreduce.
using HookFactory = std::function<std::shared_ptr<BucketHook>()>;

class ShardedModel;

// What every strategy is built from. The optimizer holds the model's parameters; a strategy
// that replaces them (AB's factors) rebinds it. On a model-parallel grid `world` is the
// data-parallel communicator and `shard` the model (its tensor- and pipeline-parallel shard), so a
// strategy that clips itself can count the whole model's gradient norm; null otherwise.
struct StrategyContext {
  std::shared_ptr<comm::Communicator> world;
  std::shared_ptr<nn::Model> model;
  torch::optim::Optimizer* optimizer = nullptr;
  DdpOptions ddp;
  HookFactory hooks;
  Trace* trace = nullptr;
  ShardedModel* shard = nullptr;
  // A pipeline grid (parallel.pp > 1): the stages of this rank's replica, `model` being one of
  // them; null otherwise.
  std::shared_ptr<comm::Communicator> stages = nullptr;
  // A tensor-parallel grid (parallel.tp > 1): the ranks holding the other parts of this rank's
  // stage (`shard` says which parameters are split); null otherwise.
  std::shared_ptr<comm::Communicator> tensor = nullptr;
};

class Strategy {
 public:
  virtual ~Strategy() = default;

  // Transitions due before optimizer step `step` (0-based); returns the step's phase label
  // (metrics "phase", the timeline's phase lane).
  virtual std::string beginStep(int64_t step) = 0;
  // metrics.jsonl records of structural changes since the last call (each has "type").
  virtual std::vector<nlohmann::json> takeEvents() { return {}; }

  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
  // Whether the next backward's gradients are synchronised (false: accumulate locally).
  virtual void setSync(bool sync) = 0;
  // After the step's last backward: waits for the gradient communication; .grad is final.
  virtual void afterBackward() = 0;
  // Clips the gradients the optimizer will use to a global L2 norm of `max_norm` (as
  // torch::nn::utils::clip_grad_norm_) and returns true, or returns false and the trainer clips
  // the model's .grad (a strategy whose optimizer steps other tensors must do it itself).
  virtual bool clipGradients(double max_norm) { return false; }
  // The learning rate for `step` given the scheduled one.
  virtual double lr(int64_t step, double scheduled) const { return scheduled; }
  virtual void afterOptimizerStep(int64_t step) {}
  // This rank's training loss of the step just taken (the sum over its micro-batches of the
  // scaled losses), for strategies that weight ranks by it.
  virtual void observeLoss(double loss) {}

  // Before an evaluation (e.g. BatchNorm statistics averaged over the replicas).
  virtual void beforeEval() = 0;
  // Extra fields of an evaluation record taken during training (not the final one).
  virtual nlohmann::json evalFields() const { return nlohmann::json::object(); }
  // End of training: whatever makes every rank hold the final model. True when that changed
  // the weights (the trainer then evaluates again).
  virtual bool finish(int64_t step) { return false; }

  // The strategy's own checkpoint section; null writer/reader: it has none.
  virtual std::function<void(torch::serialize::OutputArchive&)> stateWriter() { return nullptr; }
  virtual std::function<void(torch::serialize::InputArchive&)> stateReader() { return nullptr; }
  // The gradient hook now in use: its state goes into checkpoints, its ratio into step records;
  // null: the strategy sends no gradient through a hook (ratio 1, no hook state).
  virtual BucketHook* hook() { return nullptr; }
  // The communicator whose ranks hold identical weights now (checked on resume); null: none must.
  virtual comm::Communicator* replicas() { return nullptr; }

  // Communication statistics over the whole run (every DDP instance the strategy built).
  virtual DdpStats stats() const { return {}; }
  virtual size_t buckets() const { return 0; }
  // Bytes of gradient and parameter buffers the strategy holds now besides the model's own
  // parameters, their .grad and the optimizer's state (DDP's buckets, ZeRO's shards); 0: none
  // reported.
  virtual int64_t bufferBytes() const { return 0; }
  // Extra fields of each logged step record.
  virtual nlohmann::json stepFields() const { return nlohmann::json::object(); }
  // The strategy's block of the summary, written under its `strategy.name` (null: none).
  virtual nlohmann::json summary() const { return nullptr; }
};

// Plain data parallelism (`strategy.name = "ddp"`, `strategy.zero = 0`): one DataParallel over
// the world. With ZeRO stage 1 or 2: lowcomm/parallel/zero.h.
std::unique_ptr<Strategy> makeDdpStrategy(const StrategyContext& ctx);

}  // namespace lowcomm::parallel
