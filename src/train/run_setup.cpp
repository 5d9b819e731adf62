// TrainingRun's construction: data, model, grid, optimizer and strategy from the config.
#include <cstdio>
#include <filesystem>
#include <mutex>

#include "autocast.h"
#include "resume_point.h"
#include "lowcomm/parallel/strategy_spec.h"
#include "training_run.h"
#include "lowcomm/base/error.h"
#include "lowcomm/parallel/compress_hook.h"
#include "lowcomm/train/same_job.h"

namespace lowcomm::train {

namespace fs = std::filesystem;

TrainingRun::TrainingRun(const TrainConfig& cfg, std::shared_ptr<comm::Communicator> world, const TrainOptions& opts)
    : cfg_(cfg),
      world_(std::move(world)),
      opts_(opts),
      rank_(world_ ? world_->rank() : -1),
      n_(world_ ? world_->size() : 0),
      slot_(opts.elastic ? opts.elastic->slot() : rank_),
      slots_(opts.elastic ? opts.elastic->slots() : n_),
      out_dir_(cfg.logging.out_dir),
      ckpt_dir_(cfg.checkpoint.dir.empty() ? out_dir_ / "checkpoints" : fs::path(cfg.checkpoint.dir)),
      progress_(rank_ == 0 && cfg.logging.progress),
      elastic_(opts.elastic) {
  if (elastic_) checkElasticScope();
  else if (!cfg.fault.kill.empty()) throw ConfigError("fault.kill is a test knob of --elastic runs");
  build();
  if (!world_) {  // a replacement: built, now it joins the live members and takes their state
    joinAsReplacement();
    return;
  }
  if (elastic_) {
    const ElasticEpoch e = elastic_->initial();
    members_ = e.members;
    epoch_ = e.number;
  }
  resumeOrStart();
  if (elastic_) startElastic();
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
  if (cfg_.fault.slow_rank >= slots_)
    throw ConfigError("fault.slow_rank: " + std::to_string(cfg_.fault.slow_rank) + " is not a rank of this " +
                      std::to_string(slots_) + "-rank run");
  trace_.setEnabled(!opts_.timeline_path.empty());
  if (world_) {  // a replacement has none yet: the members it joins did all this at the start
    checkSameJob(*world_, jobDescription(toToml(cfg_), train_.size(), test_.size(), slots_));  // before anything is written
    locks_ = std::make_unique<DirLocks>(*world_, out_dir_, ckpt_dir_);  // creates them
    resume_step_ = resumeStep(*world_, ckpt_dir_.string(), opts_);
    if (rank_ == 0) writeFileAtomically((out_dir_ / "config.toml").string(), toToml(cfg_));
    // Every collective of the run (also of its splits) on the timeline, for `simulate replay`.
    if (trace_.enabled()) world_->setTrace(&trace_);
  }
  buildModel();
  if (rank_ == 0 && cfg_.model.autocast == "bf16" && !cpuRunsBf16Fast())
    std::fprintf(stderr, "warning: model.autocast = \"bf16\" on a CPU without AVX-512: LibTorch runs bf16 "
                         "convolutions through its slow fallback here (about 14x slower than \"off\" on an "
                         "AVX2-only CPU); the result is the same, only slower\n");
  if (rank_ == 0)
    if (const auto w = comm::idleRestartWarning(world_->topology().spansSites(), world_->options().congestion_control);
        !w.empty())
      std::fprintf(stderr, "warning: %s\n", w.c_str());
  // data.batch_size is per rank: a replica of tp x pp ranks takes tp x pp of them, so every grid
  // of the same world trains on the same global batch.
  // --elastic: the slot's shard of the launch's slots, whatever the membership (docs/elastic.md).
  loader_ = std::make_unique<data::BatchLoader>(train_, elastic_ ? slot_ : grid_.dp_rank, elastic_ ? slots_ : grid_.dp,
                                                cfg_.data.batch_size * grid_.tp * grid_.pp, cfg_.seed, augmentation());
  accum_ = cfg_.strategy.accumulation;
  per_epoch_ = loader_->batchesPerEpoch() / accum_;
  if (per_epoch_ < 1) throw ConfigError("data.batch_size x strategy.accumulation is larger than a rank's share of the data");
  total_ = cfg_.schedule.epochs * per_epoch_;
  if (cfg_.schedule.max_steps > 0) total_ = std::min(total_, cfg_.schedule.max_steps);
  schedule_ = std::make_unique<LrSchedule>(cfg_, total_);
  optimizer_ = makeOptimizer(cfg_, model_->parameters());
  if (world_ && !elastic_) makeStrategy(/*broadcast_initial=*/true);  // --elastic: in startElastic()
}

void TrainingRun::makeStrategy(bool broadcast_initial) {
  next_compressor_ = 0;
  parallel::StrategyContext ctx{grid_.dp_comm, model_, optimizer_.get(), {}, nullptr, &trace_, shard_.get(),
                                grid_.pp > 1 ? grid_.pp_comm : nullptr, grid_.tp > 1 ? grid_.tp_comm : nullptr};
  ctx.ddp.bucket_bytes = static_cast<size_t>(cfg_.strategy.bucket_mb * 1024 * 1024);
  ctx.ddp.overlap = cfg_.strategy.overlap;
  ctx.ddp.broadcast_initial = broadcast_initial;
  // --elastic rebuilds the strategy at every membership epoch: DDP then communicates on the
  // epoch's world itself (the trainer uses it only between steps) instead of connecting a split
  // of it, which costs seconds across a WAN.
  ctx.ddp.split_comm = !elastic_;
  ctx.ddp.label_own_calls = elastic_ != nullptr;
  ctx.hooks = [this]() -> std::shared_ptr<parallel::BucketHook> {
    if (cfg_.compress.codec == "none") return nullptr;
    if (next_compressor_ < compressors_.size()) return std::make_shared<parallel::CompressHook>(compressors_[next_compressor_++]);
    compress::CompressConfig cc = cfg_.compress;
    cc.seed = cfg_.seed;
    compressors_.push_back(compress::makeCompressor(cc));
    ++next_compressor_;
    return std::make_shared<parallel::CompressHook>(compressors_.back());
  };
  strategy_ = strategySpec(cfg_).make(ctx, strategyOptions(cfg_), {total_, cfg_.seed, static_cast<int>(cfg_.strategy.zero)});
  if (pipeline_) pipeline_->setForward([this](const torch::Tensor& x) { return strategy_->forward(x); });
}

data::Augment TrainingRun::augmentation() const {
  data::Augment aug;
  if (cfg_.data.augment) aug = data::Augment{true, train_.height() >= 32 ? 4 : 2, true};
  return aug;
}

// The full model a single process would build (same seed, same draws); with parallel.tp > 1 every
// rank keeps its tensor-parallel shard of it.
void TrainingRun::buildModel() {
  if (world_)  // a replacement's grid comes with its epoch (--elastic: data parallel only)
    grid_ = parallel::makeGrid(world_, static_cast<int>(cfg_.parallel.tp), static_cast<int>(cfg_.parallel.pp),
                               cfg_.parallel.order);
  // torch's default generator is process-wide: ranks running as threads of one process would
  // interleave their draws, so the seeded initialisation is done one rank at a time.
  decltype(nn::makeModel(modelSpec())) full;
  {
    static std::mutex seeded_init;
    std::lock_guard<std::mutex> lk(seeded_init);
    torch::manual_seed(cfg_.seed);
    full = nn::makeModel(modelSpec());
  }
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

}  // namespace lowcomm::train
