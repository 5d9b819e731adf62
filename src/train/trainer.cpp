// The training loop: steps with gradient accumulation, evaluations, checkpoints when due, and the
// end of the run. The rest of TrainingRun is in the files training_run.h lists.
#include "lowcomm/train/trainer.h"

#include <algorithm>
#include <cstdio>
#include <thread>
#include <utility>

#include "autocast.h"
#include "report.h"
#include "training_run.h"
#include "lowcomm/base/heap.h"
#include "lowcomm/train/checkpoint_schedule.h"

namespace lowcomm::train {

// Evaluates now and writes the record (with the strategy's fields unless it is the final one).
void TrainingRun::evalNow(int64_t epoch, bool final) {
  const ScoreFn score = [this](const data::Batch& b) {
    if (!pipeline_) return criterion_.sumAndCorrect(strategy_->forward(b.x), b.y);
    return pipeline_->evalBatch(b.x, b.y, [this](const torch::Tensor& out, const torch::Tensor& y) {
      return criterion_.sumAndCorrect(out, y);
    });
  };
  last_eval_ = evaluate(*model_, *strategy_, *grid_.dp_comm, test_, cfg_.data.test_batch_size, cfg_.seed, score);
  last_eval_step_ = step_;
  if (!jsonl_) return;
  nlohmann::json rec = {{"type", "eval"}, {"step", step_}, {"epoch", epoch},
                        {"test_accuracy", last_eval_.accuracy}, {"test_loss", last_eval_.loss},
                        {"samples", last_eval_.samples}, {"bytes_sent", bytes().first}, {"time_s", since(t_start_)}};
  if (lm()) rec["bits_per_byte"] = bitsPerByte(last_eval_.loss);
  if (!final) rec.update(strategy_->evalFields());
  jsonl_->write(rec);
}

void TrainingRun::trainStep() {
  killIfDue("step");
  const std::string phase = strategy_->beginStep(step_);
  ++win_.phases[phase];
  for (const auto& e : strategy_->takeEvents())
    if (jsonl_) jsonl_->write(withBytes(e));
  TraceScope step_span(&trace_, phase, "phase", 2);
  const auto t0 = Clock::now();
  double step_loss = 0;
  data::Batch b;
  // Under --elastic a member also computes the shards of empty slots it adopted (run_elastic.cpp):
  // accum_ micro-batches from each, every loss scaled so that DDP's average over the members is
  // the average over all slots' batches, as in a run where no slot is empty.
  std::vector<data::BatchLoader*> sources{loader_.get()};
  for (auto& [slot, l] : adopted_) sources.push_back(l.get());
  const int64_t micro = accum_ * static_cast<int64_t>(sources.size());
  const double scale = elastic_ ? static_cast<double>(n_) / (static_cast<double>(slots_) * static_cast<double>(accum_))
                                : 1.0 / static_cast<double>(accum_);
  for (int64_t i = 0; i < micro; ++i) {
    const int64_t a = i % accum_;  // pipelines and plain runs: one source, i == a
    sources[static_cast<size_t>(i / accum_)]->next(b);
    if (pipeline_) {
      AutocastScope amp(cfg_.model.autocast == "bf16");
      step_loss += pipeline_->trainStep(
          b.x, b.y, 1.0 / static_cast<double>(accum_),
          [this](const torch::Tensor& out, const torch::Tensor& y) { return criterion_.mean(out, y); },
          [&](bool last) { strategy_->setSync(last && a == accum_ - 1); });
      continue;
    }
    strategy_->setSync(i == micro - 1);
    torch::Tensor loss;
    {
      TraceScope s(&trace_, "forward", "compute", 0);
      AutocastScope amp(cfg_.model.autocast == "bf16");
      const int64_t heap0 = heapInUseBytes();
      const torch::Tensor mean = criterion_.mean(strategy_->forward(b.x), b.y);
      loss = elastic_ ? mean * scale : mean / static_cast<double>(accum_);  // the latter as before --elastic existed
      peak_activation_bytes_ = std::max(peak_activation_bytes_, heapInUseBytes() - heap0);  // what backward will free
    }
    {
      TraceScope s(&trace_, "backward", "compute", 0);
      loss.backward();
    }
    step_loss += elastic_ ? loss.item<double>() / scale / static_cast<double>(micro) : loss.item<double>();
  }
  if (rank_ == cfg_.fault.slow_rank && cfg_.fault.slow_factor > 1) {  // the benchmark knob: a slower rank
    TraceScope s(&trace_, "fault-slowdown", "compute", 0);
    std::this_thread::sleep_for(std::chrono::duration<double>((cfg_.fault.slow_factor - 1) * since(t0)));
  }
  const double wait_before = strategy_->stats().wait_s;
  killIfDue("collective");  // the others are in this step's gradient allreduce, waiting for us
  strategy_->afterBackward();
  {
    TraceScope s(&trace_, "optimizer", "compute", 0);
    if (cfg_.optimizer.grad_clip > 0 && !strategy_->clipGradients(cfg_.optimizer.grad_clip)) {
      if (shard_) shard_->clipGradNorm(cfg_.optimizer.grad_clip);
      else torch::nn::utils::clip_grad_norm_(model_->parameters(), cfg_.optimizer.grad_clip);
    }
    last_lr_ = strategy_->lr(step_, schedule_->at(step_));
    for (auto& g : optimizer_->param_groups()) g.options().set_lr(last_lr_);
    optimizer_->step();
    optimizer_->zero_grad();
  }
  strategy_->afterOptimizerStep(step_);
  strategy_->observeLoss(step_loss);
  ++step_;
  const double dt = since(t0), waited = strategy_->stats().wait_s - wait_before;
  win_.loss += step_loss, win_.time += dt, win_.compute += dt - waited, total_compute_ += dt - waited;
  total_step_s_ += dt;
  if (elastic_ && static_cast<int>(members_.size()) == slots_) full_step_s_.push_back(dt);
  ++win_.steps;
  if (step_ % cfg_.logging.log_every == 0 || step_ == total_) logStep(phase);
}

nlohmann::json TrainingRun::run() {
  CheckpointSchedule checkpoints(cfg_.checkpoint.every_steps, cfg_.checkpoint.every_minutes, step_, total_);
  const auto t_run = Clock::now();  // this process's training time (t_start_ includes earlier runs')
  auto announce = [&](const char* what, long long at) {
    progress_.finish();
    if (rank_ == 0 && cfg_.logging.progress && lm())
      std::printf("%s %lld: validation loss %.4f, %.4f bits per byte, next-byte accuracy %.2f %%\n", what, at,
                  last_eval_.loss, bitsPerByte(last_eval_.loss), 100.0 * last_eval_.accuracy);
    else if (rank_ == 0 && cfg_.logging.progress)
      std::printf("%s %lld: test accuracy %.2f %%, test loss %.4f\n", what, at, 100.0 * last_eval_.accuracy,
                  last_eval_.loss);
  };
  model_->train();
  auto iteration = [&] {
    const auto pos = loader_->position();
    if (pos.batch + accum_ > loader_->batchesPerEpoch()) {  // end of an epoch
      if (last_eval_step_ != step_) evalNow(pos.epoch + 1);
      announce("epoch", static_cast<long long>(pos.epoch + 1));
      loader_->startEpoch(pos.epoch + 1);
      for (auto& [slot, l] : adopted_) l->startEpoch(pos.epoch + 1);
      return;
    }
    trainStep();
    if (cfg_.logging.eval_every > 0 && step_ % cfg_.logging.eval_every == 0 && step_ < total_ &&
        loader_->position().batch + accum_ <= loader_->batchesPerEpoch()) {  // an epoch end evaluates anyway
      evalNow(loader_->position().epoch + 1);
      announce("step", static_cast<long long>(step_));
    }
    if (checkpoints.due(*world_, step_, since(t_run))) saveAt(step_);
  };
  while (step_ < total_) {
    if (!elastic_) {
      iteration();
      continue;
    }
    // --elastic: a membership change aborts the iteration's communication; a step not applied
    // here is rolled back (its batches are read again), then the members heal and agree.
    const int64_t step_before = step_;
    const auto pos_before = loader_->position();
    // A dead peer's closed sockets can be seen before the launcher's new epoch: a PeerError or
    // TimeoutError heals too (the heal waits for that epoch; none within the rendezvous timeout
    // and the error stands).
    try {
      iteration();
    } catch (const Error& e) {
      if (!healable(e)) throw;
      std::fprintf(stderr, "lowcomm train: slot %d: step %lld %s (%s); waiting for the next membership epoch\n", slot_,
                   static_cast<long long>(step_before + 1), step_ == step_before ? "rolled back" : "kept", e.what());
      if (step_ == step_before) {
        loader_->seek(pos_before);
        optimizer_->zero_grad();
      }
      heal(e.what());
      // The members agree from here on: a replacement's schedule starts at this step too.
      checkpoints = CheckpointSchedule(cfg_.checkpoint.every_steps, cfg_.checkpoint.every_minutes, step_, total_,
                                       since(t_run));
    }
  }
  // --elastic: the end is collective too (evaluation, checkpoint, summary): a membership change
  // during it heals, and every member of the new epoch does it again.
  for (;;) {
    try {
      return finishRun();
    } catch (const Error& e) {
      if (!elastic_ || !healable(e)) throw;
      std::fprintf(stderr, "lowcomm train: slot %d: the end of the run was interrupted (%s); waiting for the next membership epoch\n",
                   slot_, e.what());
      heal(e.what());
      last_eval_step_ = -1;  // the final evaluation is collective: every member does it again
    }
  }
}

// The end of a run: final evaluation, checkpoint, model, timeline, summary.
nlohmann::json TrainingRun::finishRun() {
  progress_.finish();
  if (strategy_->finish(step_)) last_eval_step_ = -1;  // the weights changed: evaluate them
  for (const auto& e : strategy_->takeEvents())
    if (jsonl_) jsonl_->write(withBytes(e));
  if (last_eval_step_ != step_) evalNow(loader_->position().epoch + 1, /*final=*/true);
  const double wall = since(t_start_);
  memory_ = memoryJson(*world_, *model_, *optimizer_, *strategy_,
                       pipeline_ ? pipeline_->stats().peak_activation_bytes : peak_activation_bytes_);  // before the final checkpoint's own peak
  saveAt(step_);
  saveFullModel();
  if (!opts_.timeline_path.empty()) writeTimeline(*world_, trace_, opts_.timeline_path);
  auto s = summary(wall);
  if (rank_ == 0) {
    const std::string text = s.dump(2) + "\n";
    writeFileAtomically((out_dir_ / "summary.json").string(), text);
    if (!opts_.summary_path.empty()) writeFileAtomically(opts_.summary_path, text);
  }
  return s;
}

nlohmann::json runTraining(const TrainConfig& cfg, std::shared_ptr<comm::Communicator> world, const TrainOptions& opts) {
  TrainingRun run(cfg, std::move(world), opts);
  return run.run();
}

}  // namespace lowcomm::train
