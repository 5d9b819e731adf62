#include "lowcomm/train/trainer.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>

#include "autocast.h"
#include "evaluate.h"
#include "report.h"
#include "lowcomm/base/error.h"
#include "lowcomm/base/heap.h"
#include "lowcomm/base/trace.h"
#include "lowcomm/data/dataset.h"
#include "lowcomm/data/loader.h"
#include "lowcomm/nn/models.h"
#include "lowcomm/parallel/compress_hook.h"
#include "lowcomm/parallel/grid.h"
#include "lowcomm/parallel/strategy.h"
#include "lowcomm/parallel/pipeline.h"
#include "lowcomm/parallel/sharded_model.h"
#include "lowcomm/train/checkpoint.h"
#include "lowcomm/train/checkpoint_schedule.h"
#include "lowcomm/train/metrics.h"
#include "lowcomm/train/optim.h"
#include "lowcomm/train/same_job.h"
#include "dir_lock.h"
#include "resume_check.h"
#include "resume_point.h"
#include "stage_cut.h"
#include "strategies.h"

namespace lowcomm::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double sumOver(comm::Communicator& c, double v) {
  c.allreduce(&v, 1, comm::DType::f64, comm::ReduceOp::sum);
  return v;
}

std::string human(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MB", bytes / (1024.0 * 1024.0));
  return buf;
}

std::string duration(double s) {
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof(buf), "%dh%02dm", static_cast<int>(s / 3600), static_cast<int>(s / 60) % 60);
  else std::snprintf(buf, sizeof(buf), "%dm%02ds", static_cast<int>(s / 60), static_cast<int>(s) % 60);
  return buf;
}

// Sums over the steps of one logging window.
struct Window {
  double loss = 0, compute = 0, time = 0;
  int64_t steps = 0;
  std::map<std::string, int64_t> phases;  // phase label -> steps
};

// One training run on this rank: the loop around a parallel::Strategy (docs/architecture.md). The
// strategy decides everything that depends on how ranks cooperate; this class owns the data,
// the schedule, the metrics and the checkpoint files.
class TrainingRun {
 public:
  TrainingRun(const TrainConfig& cfg, std::shared_ptr<comm::Communicator> world, const TrainOptions& opts);
  ~TrainingRun() {
    if (world_) world_->setTrace(nullptr);  // the world outlives the run and its trace
  }
  nlohmann::json run();

 private:
  void build();
  void buildModel();
  nn::ModelSpec modelSpec() const;
  bool lm() const { return train_.task == data::Task::language_model; }
  void resumeOrStart();
  void openMetrics();
  void trainStep();
  void logStep(const std::string& phase);
  void evalNow(int64_t epoch, bool final = false);
  void saveAt(int64_t step);
  nlohmann::json summary(double wall);
  std::pair<int64_t, int64_t> bytes() const;
  nlohmann::json withBytes(nlohmann::json j) const;
  nlohmann::json parallelJson() const;
  nlohmann::json pipelineJson() const;
  void saveFullModel();

  const TrainConfig& cfg_;
  std::shared_ptr<comm::Communicator> world_;
  const TrainOptions& opts_;
  const int rank_, n_;
  const fs::path out_dir_, ckpt_dir_;
  data::Dataset train_, test_;
  parallel::Grid grid_;  // the strategy runs on grid_.dp_comm
  std::shared_ptr<nn::Model> model_;
  std::shared_ptr<parallel::ShardedModel> shard_;  // model_ when parallel.tp or parallel.pp > 1
  std::unique_ptr<parallel::Pipeline> pipeline_;   // parallel.pp > 1
  int64_t full_parameters_ = 0;  // of the whole model (a tensor-parallel rank holds a part)
  StageCut cut_;                 // parallel.pp > 1: where the stages are cut, and why
  Trace trace_;
  std::vector<std::shared_ptr<compress::Compressor>> compressors_;
  std::unique_ptr<data::BatchLoader> loader_;
  int64_t accum_ = 1, per_epoch_ = 1, total_ = 0;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<parallel::Strategy> strategy_;
  Criterion criterion_;

  std::unique_ptr<DirLocks> locks_;  // held for the whole run
  int64_t resume_step_ = -1;         // the checkpoint this run continues from (-1: a fresh start)
  TrainState state_;
  bool resumed_ = false;
  std::unique_ptr<JsonlWriter> jsonl_;
  Progress progress_;
  Clock::time_point t_start_;
  int64_t sent_before_ = 0, recv_before_ = 0;
  Eval last_eval_;
  int64_t last_eval_step_ = -1, step_ = 0;
  Window win_;
  double total_compute_ = 0, last_lr_ = 0;
  int64_t peak_activation_bytes_ = 0;  // the largest heap growth over a forward (no pipeline)
  nlohmann::json memory_;
};

TrainingRun::TrainingRun(const TrainConfig& cfg, std::shared_ptr<comm::Communicator> world, const TrainOptions& opts)
    : cfg_(cfg),
      world_(std::move(world)),
      opts_(opts),
      rank_(world_->rank()),
      n_(world_->size()),
      out_dir_(cfg.logging.out_dir),
      ckpt_dir_(cfg.checkpoint.dir.empty() ? out_dir_ / "checkpoints" : fs::path(cfg.checkpoint.dir)),
      progress_(world_->rank() == 0 && cfg.logging.progress) {
  build();
  resumeOrStart();
  openMetrics();
}

// Data and model are the same on every rank (rank 0's initial weights are broadcast anyway).
// The model for the data: image geometry and classes, or a gpt over the data's vocabulary.
nn::ModelSpec TrainingRun::modelSpec() const {
  const auto& m = cfg_.model;
  nn::ModelSpec spec;
  spec.name = m.name;
  spec.classes = train_.classes;
  if (!lm()) {
    spec.in_channels = static_cast<int>(train_.channels());
    spec.image_size = static_cast<int>(train_.height());
  }
  spec.vit_patch = static_cast<int>(m.vit_patch);
  spec.vit_depth = static_cast<int>(m.vit_depth);
  spec.width = m.width, spec.dropout = m.dropout, spec.init = m.init;
  spec.layers = static_cast<int>(m.layers);
  spec.dim = static_cast<int>(m.dim);
  spec.heads = static_cast<int>(m.heads);
  spec.seq_len = static_cast<int>(m.seq_len);
  spec.tied = m.tied;
  spec.path = m.path;
  return spec;
}

void TrainingRun::build() {
  torch::manual_seed(cfg_.seed);
  const data::TextOptions text{cfg_.data.glob, cfg_.model.seq_len};
  train_ = data::loadDataset(cfg_.data.dataset, cfg_.data.dir, true, cfg_.seed, text);
  test_ = data::loadDataset(cfg_.data.dataset, cfg_.data.dir, false, cfg_.seed, text);
  if (cfg_.data.train_limit > 0) train_ = train_.take(cfg_.data.train_limit);
  if (cfg_.data.test_limit > 0) test_ = test_.take(cfg_.data.test_limit);
  if (lm() != (cfg_.model.name == "gpt"))  // config validation pairs "text" with "gpt"
    throw ConfigError("model.name: '" + cfg_.model.name + "' does not fit the data set '" + cfg_.data.dataset + "'");
  if (!lm() && train_.height() != train_.width()) throw ConfigError("data.dataset: images must be square");
  if (cfg_.fault.slow_rank >= n_)
    throw ConfigError("fault.slow_rank: " + std::to_string(cfg_.fault.slow_rank) + " is not a rank of this " +
                      std::to_string(n_) + "-rank run");
  checkSameJob(*world_, jobDescription(toToml(cfg_), train_.size(), test_.size(), n_));  // before anything is written
  locks_ = std::make_unique<DirLocks>(*world_, out_dir_, ckpt_dir_);  // creates them
  resume_step_ = resumeStep(*world_, ckpt_dir_.string(), opts_);
  if (rank_ == 0) writeFileAtomically((out_dir_ / "config.toml").string(), toToml(cfg_));
  trace_.setEnabled(!opts_.timeline_path.empty());
  // Every collective of the run (also of its splits) on the timeline, for `simulate replay`.
  if (trace_.enabled()) world_->setTrace(&trace_);
  buildModel();
  if (rank_ == 0 && cfg_.model.autocast == "bf16" && !cpuRunsBf16Fast())
    std::fprintf(stderr, "warning: model.autocast = \"bf16\" on a CPU without AVX-512: LibTorch runs bf16 "
                         "convolutions through its slow fallback here (about 14x slower than \"off\" on an "
                         "AVX2-only CPU); the result is the same, only slower\n");
  data::Augment aug;
  if (cfg_.data.augment) aug = data::Augment{true, train_.height() >= 32 ? 4 : 2, true};
  // data.batch_size is per rank: a replica of tp x pp ranks takes tp x pp of them, so every grid
  // of the same world trains on the same global batch.
  loader_ = std::make_unique<data::BatchLoader>(train_, grid_.dp_rank, grid_.dp, cfg_.data.batch_size * grid_.tp * grid_.pp,
                                                cfg_.seed, aug);
  accum_ = cfg_.strategy.accumulation;
  per_epoch_ = loader_->batchesPerEpoch() / accum_;
  if (per_epoch_ < 1) throw ConfigError("data.batch_size x strategy.accumulation is larger than a rank's share of the data");
  total_ = cfg_.schedule.epochs * per_epoch_;
  if (cfg_.schedule.max_steps > 0) total_ = std::min(total_, cfg_.schedule.max_steps);
  schedule_ = std::make_unique<LrSchedule>(cfg_, total_);
  optimizer_ = makeOptimizer(cfg_, model_->parameters());

  parallel::StrategyContext ctx{grid_.dp_comm, model_, optimizer_.get(), {}, nullptr, &trace_, shard_.get(),
                                grid_.pp > 1 ? grid_.pp_comm : nullptr, grid_.tp > 1 ? grid_.tp_comm : nullptr};
  ctx.ddp.bucket_bytes = static_cast<size_t>(cfg_.strategy.bucket_mb * 1024 * 1024);
  ctx.ddp.overlap = cfg_.strategy.overlap;
  ctx.hooks = [this]() -> std::shared_ptr<parallel::BucketHook> {
    if (cfg_.compress.codec == "none") return nullptr;
    compress::CompressConfig cc = cfg_.compress;
    cc.seed = cfg_.seed;
    compressors_.push_back(compress::makeCompressor(cc));
    return std::make_shared<parallel::CompressHook>(compressors_.back());
  };
  strategy_ = makeStrategy(cfg_, ctx, total_);
  if (pipeline_) pipeline_->setForward([this](const torch::Tensor& x) { return strategy_->forward(x); });
}

// The full model a single process would build (same seed, same draws); with parallel.tp > 1 every
// rank keeps its tensor-parallel shard of it.
void TrainingRun::buildModel() {
  grid_ = parallel::makeGrid(world_, static_cast<int>(cfg_.parallel.tp), static_cast<int>(cfg_.parallel.pp),
                             cfg_.parallel.order);
  auto full = nn::makeModel(modelSpec());
  full_parameters_ = nn::parameterCount(*full);
  if (grid_.tp > 1 || grid_.pp > 1) {
    cut_ = cutStages(cfg_, *full, *world_, grid_.pp, ckpt_dir_.string(), resume_step_ >= 0);
    shard_ = parallel::makeShardedModel(*full, grid_.tp_comm, grid_.pp > 1 ? grid_.pp_comm : nullptr, cut_.bounds,
                                        static_cast<int>(cfg_.parallel.virtual_stages));
    model_ = shard_;
  } else {
    model_ = full;
  }
  if (grid_.pp > 1)
    pipeline_ = std::make_unique<parallel::Pipeline>(
        shard_, grid_.pp_comm,
        parallel::PipelineOptions{static_cast<int>(cfg_.parallel.micro_batches), cfg_.parallel.schedule}, &trace_);
  criterion_ = Criterion{cfg_.optimizer.label_smoothing, shard_.get()};
}

// The checkpoint resumeStep() chose, checked on every rank against its own file (checkpoint
// directories may be per host).
void TrainingRun::resumeOrStart() {
  state_.config_hash = resumeHash(cfg_, n_);
  state_.schedule_hash = resumeScheduleHash(cfg_);
  resumed_ = resume_step_ >= 0;
  if (!resumed_) {
    loader_->startEpoch(0);
    return;
  }
  const std::string file = checkpointFile(ckpt_dir_.string(), resume_step_, rank_);
  const auto bounds = shard_ ? shard_->boundaries() : std::vector<int>{};
  const TrainState want = state_;
  state_ = loadResumed(*world_, file, gridRecord(grid_), shard_ ? &bounds : nullptr, [&] {
    if (auto read = strategy_->stateReader()) loadStrategySection(file, read);
    TrainState st = loadCheckpoint(file, *model_, *optimizer_, strategy_->hook());
    if (st.config_hash != want.config_hash)
      throw ConfigError("--resume: '" + file + "' was written with a different model, data, batch, seed, world size or compress codec");
    if (st.schedule_hash != 0 && st.schedule_hash != want.schedule_hash)
      throw ConfigError("--resume: '" + file + "' was written with another optimizer.lr or schedule (name, warmup_steps, "
                        "step_size, gamma, min_lr); only schedule.max_steps and schedule.epochs may change on resume");
    st.schedule_hash = want.schedule_hash;
    return st;
  });
  checkResumedAlike(*world_, strategy_->replicas(), state_.step, resume_step_, *model_, file);
  loader_->seek(state_.position);
}

void TrainingRun::openMetrics() {
  step_ = state_.step;
  last_lr_ = schedule_->at(step_);
  t_start_ = Clock::now() - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(state_.elapsed_s));
  sent_before_ = state_.bytes_sent, recv_before_ = state_.bytes_recv;
  if (rank_ != 0) return;
  const std::string metrics = (out_dir_ / "metrics.jsonl").string();
  int64_t reached = state_.step;  // the last step the interrupted run logged
  if (resumed_) reached = truncateMetricsAfterCheckpoint(metrics, state_.step);  // no step twice
  else removeLatest(ckpt_dir_.string());  // a --resume after this run must not find an older run's
  jsonl_ = std::make_unique<JsonlWriter>(metrics, resumed_);
  if (resumed_)
    jsonl_->write({{"type", "resume"}, {"step", state_.step}, {"from_step", state_.step},
                   {"steps_lost", std::max<int64_t>(0, reached - state_.step)}, {"restart", opts_.restart_count}});
}

std::pair<int64_t, int64_t> TrainingRun::bytes() const {
  const auto s = world_->meter().snapshot();
  return {sent_before_ + static_cast<int64_t>(s.total.bytes_sent), recv_before_ + static_cast<int64_t>(s.total.bytes_recv)};
}

nlohmann::json TrainingRun::withBytes(nlohmann::json j) const {
  j["bytes_sent"] = bytes().first;
  j["time_s"] = since(t_start_);
  return j;
}

void TrainingRun::saveAt(int64_t step) {
  TrainState st = state_;
  st.step = step;
  st.position = loader_->position();
  st.elapsed_s = since(t_start_);
  st.grid = gridRecord(grid_);
  if (shard_) for (int b : shard_->boundaries()) st.stage_bounds.push_back(b);
  std::tie(st.bytes_sent, st.bytes_recv) = bytes();
  saveCheckpoint(checkpointFile(ckpt_dir_.string(), step, rank_), *model_, *optimizer_, st, strategy_->hook(),
                 strategy_->stateWriter());
  world_->barrier();  // every rank's file is complete before `latest` names it
  if (rank_ == 0) writeLatest(ckpt_dir_.string(), step, opts_.job_id);
  if (jsonl_) jsonl_->write({{"type", "checkpoint"}, {"step", step}, {"time_s", since(t_start_)}});
  if (cfg_.checkpoint.keep_last > 0) {
    world_->barrier();  // `latest` names the new checkpoint before any rank removes an old one
    pruneCheckpoints(ckpt_dir_.string(), rank_, step, cfg_.checkpoint.keep_last);
  }
}

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
  const std::string phase = strategy_->beginStep(step_);
  ++win_.phases[phase];
  for (const auto& e : strategy_->takeEvents())
    if (jsonl_) jsonl_->write(withBytes(e));
  TraceScope step_span(&trace_, phase, "phase", 2);
  const auto t0 = Clock::now();
  double step_loss = 0;
  data::Batch b;
  for (int64_t a = 0; a < accum_; ++a) {
    loader_->next(b);
    if (pipeline_) {
      AutocastScope amp(cfg_.model.autocast == "bf16");
      step_loss += pipeline_->trainStep(
          b.x, b.y, 1.0 / static_cast<double>(accum_),
          [this](const torch::Tensor& out, const torch::Tensor& y) { return criterion_.mean(out, y); },
          [&](bool last) { strategy_->setSync(last && a == accum_ - 1); });
      continue;
    }
    strategy_->setSync(a == accum_ - 1);
    torch::Tensor loss;
    {
      TraceScope s(&trace_, "forward", "compute", 0);
      AutocastScope amp(cfg_.model.autocast == "bf16");
      const int64_t heap0 = heapInUseBytes();
      loss = criterion_.mean(strategy_->forward(b.x), b.y) / static_cast<double>(accum_);
      peak_activation_bytes_ = std::max(peak_activation_bytes_, heapInUseBytes() - heap0);  // what backward will free
    }
    {
      TraceScope s(&trace_, "backward", "compute", 0);
      loss.backward();
    }
    step_loss += loss.item<double>();
  }
  if (rank_ == cfg_.fault.slow_rank && cfg_.fault.slow_factor > 1) {  // the benchmark knob: a slower rank
    TraceScope s(&trace_, "fault-slowdown", "compute", 0);
    std::this_thread::sleep_for(std::chrono::duration<double>((cfg_.fault.slow_factor - 1) * since(t0)));
  }
  const double wait_before = strategy_->stats().wait_s;
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
  ++win_.steps;
  if (step_ % cfg_.logging.log_every == 0 || step_ == total_) logStep(phase);
}

void TrainingRun::logStep(const std::string& phase) {
  const auto [sent, recv] = bytes();
  const double sps = static_cast<double>(win_.steps * accum_ * cfg_.data.batch_size * n_) / std::max(win_.time, 1e-9);
  if (jsonl_) {
    const auto snap = world_->meter().snapshot();
    nlohmann::json rec = {{"type", "step"}, {"step", step_}, {"epoch", loader_->position().epoch + 1},
                          {"loss", win_.loss / win_.steps}, {"lr", last_lr_}, {"samples_per_s", sps},
                          {"compute_s", win_.compute / win_.steps}, {"comm_s", strategy_->stats().comm_s},
                          {"wait_s", (win_.time - win_.compute) / win_.steps}, {"bytes_sent", sent},
                          {"bytes_recv", recv}, {"bytes_by_phase", phasesJson(snap)},
                          {"compression_ratio", strategy_->hook().compressionRatio()}, {"time_s", since(t_start_)},
                          {"phase", phase}, {"phases", win_.phases}};
    rec.update(strategy_->stepFields());
    jsonl_->write(rec);
  }
  char line[256];
  const double eta = (since(t_start_) / std::max<int64_t>(1, step_ - state_.step)) * static_cast<double>(total_ - step_);
  std::snprintf(line, sizeof(line), "epoch %lld  step %lld/%lld  loss %.4f  lr %.4g  %.0f samples/s  sent %s  ETA %s",
                static_cast<long long>(loader_->position().epoch + 1), static_cast<long long>(step_),
                static_cast<long long>(total_), win_.loss / win_.steps, schedule_->at(step_ - 1), sps,
                human(static_cast<double>(sent)).c_str(), duration(eta).c_str());
  progress_.update(line);
  win_ = Window{};
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
  while (step_ < total_) {
    const auto pos = loader_->position();
    if (pos.batch + accum_ > loader_->batchesPerEpoch()) {  // end of an epoch
      if (last_eval_step_ != step_) evalNow(pos.epoch + 1);
      announce("epoch", static_cast<long long>(pos.epoch + 1));
      loader_->startEpoch(pos.epoch + 1);
      continue;
    }
    trainStep();
    if (cfg_.logging.eval_every > 0 && step_ % cfg_.logging.eval_every == 0 && step_ < total_ &&
        loader_->position().batch + accum_ <= loader_->batchesPerEpoch()) {  // an epoch end evaluates anyway
      evalNow(loader_->position().epoch + 1);
      announce("step", static_cast<long long>(step_));
    }
    if (checkpoints.due(*world_, step_, since(t_run))) saveAt(step_);
  }
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

// model_state.pt: the full model, gathered from the tensor-parallel shards (collective).
void TrainingRun::saveFullModel() {
  std::shared_ptr<nn::Model> full = model_;
  if (shard_) {
    full = nn::makeModel(modelSpec());
    shard_->gatherInto(*full);
  }
  if (rank_ == 0) savePythonStateDict((out_dir_ / "model_state.pt").string(), *full);
}

// The grid and the bytes each axis sent, summed over the ranks (collective). The data-parallel
// axis is everything the strategy sent (all phases but "tp" and "pp").
nlohmann::json TrainingRun::parallelJson() const {
  const auto snap = world_->meter().snapshot();
  auto phase = [&](const char* p) {
    const auto it = snap.by_phase.find(p);
    return it == snap.by_phase.end() ? 0.0 : static_cast<double>(it->second.bytes_sent);
  };
  double v[3] = {phase(parallel::kTensorParallelPhase), phase(parallel::kPipelineParallelPhase),
                 static_cast<double>(snap.total.bytes_sent)};
  v[2] -= v[0] + v[1];
  world_->allreduce(v, 3, comm::DType::f64, comm::ReduceOp::sum);
  nlohmann::json j = {{"dp", grid_.dp}, {"tp", grid_.tp}, {"pp", grid_.pp}, {"order", grid_.order},
                      {"coordinates", {{"dp", grid_.dp_rank}, {"tp", grid_.tp_rank}, {"pp", grid_.pp_rank}}},
                      {"parameters_this_rank", nn::parameterCount(*model_)},
                      {"bytes_sent_by_axis", {{"dp", static_cast<int64_t>(v[2])}, {"tp", static_cast<int64_t>(v[0])},
                                              {"pp", static_cast<int64_t>(v[1])}}}};
  if (pipeline_) j["pipeline"] = pipelineJson();
  return j;
}

// Per stage (gathered over the pipeline): measured bubble, in-flight micro-batches, activation
// memory; and the schedule's theoretical bubble (collective over the pipeline).
nlohmann::json TrainingRun::pipelineJson() const {
  const auto& st = pipeline_->stats();
  const int p = grid_.pp;
  double mine[4] = {st.bubble(), static_cast<double>(st.max_in_flight), static_cast<double>(st.peak_activation_bytes),
                    st.wall_s / std::max<int64_t>(1, st.steps)};
  std::vector<double> all(4 * p);
  grid_.pp_comm->allgather(mine, all.data(), 4, comm::DType::f64);
  nlohmann::json stages = nlohmann::json::array();
  double bubble = 0;
  for (int s = 0; s < p; ++s) {
    stages.push_back({{"stage", s}, {"bubble_fraction", all[4 * s]}, {"max_in_flight", static_cast<int>(all[4 * s + 1])},
                      {"peak_activation_bytes", static_cast<int64_t>(all[4 * s + 2])}, {"step_s", all[4 * s + 3]}});
    bubble += all[4 * s] / p;
  }
  nlohmann::json chunks = nlohmann::json::array();  // [first, last) units of each of this rank's chunks
  for (int k = 0; k < shard_->chunks(); ++k) chunks.push_back({shard_->chunkUnits(k).first, shard_->chunkUnits(k).second});
  return {{"schedule", cfg_.parallel.schedule}, {"micro_batches", cfg_.parallel.micro_batches},
          {"virtual_stages", shard_->chunks()}, {"bubble_fraction", bubble}, {"bubble_fraction_theory", st.theory},
          {"stages", stages}, {"units_this_stage", chunks.size() == 1 ? chunks[0] : chunks},
          {"stage_cut", cut_.json(cfg_.parallel.balance)}};
}

// Totals over ranks, and the straggler (the rank that waited least: the others waited for it).
nlohmann::json TrainingRun::summary(double wall) {
  const auto [sent, recv] = bytes();
  const auto final_traffic = world_->meter().snapshot();  // before the summary's own reductions
  const double total_sent = sumOver(*world_, static_cast<double>(sent));
  // Summed over ranks, like bytes_sent; bytes_by_phase and bytes_by_phase_link are rank 0's.
  nlohmann::json linkTotals = linksJson(final_traffic);
  for (const char* link : {comm::kIntraNode, comm::kInterNode})
    linkTotals[link] = static_cast<int64_t>(sumOver(*world_, linkTotals[link]["sent"].get<double>()));
  const auto st = strategy_->stats();
  std::vector<double> waits(n_);
  double my_wait = st.wait_s;
  world_->allgather(&my_wait, waits.data(), 1, comm::DType::f64);
  const int straggler = static_cast<int>(std::min_element(waits.begin(), waits.end()) - waits.begin());
  const int64_t samples = (step_ - state_.step) * accum_ * cfg_.data.batch_size * n_;
  nlohmann::json s = {
      {"strategy", cfg_.strategy.name}, {"model", cfg_.model.name}, {"dataset", cfg_.data.dataset}, {"world", n_},
      {"steps", step_}, {"epochs", static_cast<double>(step_) / static_cast<double>(per_epoch_)}, {"wall_s", wall},
      {"test_accuracy", last_eval_.accuracy}, {"test_loss", last_eval_.loss},
      {"bytes_sent", static_cast<int64_t>(total_sent)}, {"bytes_sent_per_rank", static_cast<int64_t>(total_sent / n_)},
      {"bytes_by_phase", phasesJson(final_traffic)},
      {"bytes_by_phase_link", phaseLinksJson(final_traffic)},
      {"bytes_sent_by_link", linkTotals},
      {"compression_ratio", strategy_->hook().compressionRatio()},
      {"checkpoint", checkpointFile(ckpt_dir_.string(), step_, 0)},
      {"samples_per_s", static_cast<double>(samples) / std::max(1e-9, wall - state_.elapsed_s)},
      {"comm_s", st.comm_s}, {"wait_s", st.wait_s}, {"compute_s", total_compute_},
      {"comm_hidden_fraction", st.comm_s > 0 ? std::max(0.0, 1.0 - st.wait_s / st.comm_s) : 0.0},
      {"straggler_rank", straggler}, {"wait_s_by_rank", waits},
      {"parameters", full_parameters_}, {"buckets", strategy_->buckets()},
      {"codec", cfg_.compress.codec}, {"compression", compressionJson(compressors_, cfg_)},
      {"memory", memory_}};
  double rss = static_cast<double>(peakRssBytes());  // serialising the final checkpoint included
  world_->allreduce(&rss, 1, comm::DType::f64, comm::ReduceOp::max);
  s["memory"]["peak_rss_with_checkpoint_bytes_max_rank"] = static_cast<int64_t>(rss);
  if (lm()) s["bits_per_byte"] = bitsPerByte(last_eval_.loss);
  s["parallel"] = parallelJson();
  if (cfg_.fault.slow_rank >= 0)
    s["fault"] = {{"slow_rank", cfg_.fault.slow_rank}, {"slow_factor", cfg_.fault.slow_factor}};
  s["restarts"] = opts_.restart_count;
  s["resumes"] = rank_ == 0 ? resumeRecords((out_dir_ / "metrics.jsonl").string()) : nlohmann::json::array();
  if (auto block = strategy_->summary(); !block.is_null()) s[cfg_.strategy.name] = block;
  // A strategy that rebuilds its DDP (and codec) has one compressor per rebuild: the ratio over
  // the whole run is the summed one, not the last hook's.
  if (!compressors_.empty()) s["compression_ratio"] = s["compression"]["ratio"];
  return s;
}

}  // namespace

nlohmann::json runTraining(const TrainConfig& cfg, std::shared_ptr<comm::Communicator> world, const TrainOptions& opts) {
  TrainingRun run(cfg, std::move(world), opts);
  return run.run();
}

}  // namespace lowcomm::train
