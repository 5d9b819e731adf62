// Every key of the common config sections, declared once: type, default (the struct's), range or
// choices (from the registry that owns them where there is one) and a one-line doc.
#include <algorithm>

#include "config_schema.h"
#include "lowcomm/data/dataset.h"
#include "lowcomm/nn/models.h"

namespace lowcomm::train {

namespace {

using schema::Range;
using schema::Section;

// Integer keys fit the narrowest type their value goes into (most become an int somewhere:
// model sizes, ranks, step counts), so no value is ever truncated or wrapped on the way.
constexpr int64_t kIntMax = 2147483647;
// Deadlines are steady_clock time points in nanoseconds: a timeout of centuries overflows them.
constexpr int64_t kMaxTimeoutS = 30 * 24 * 3600;

Section<TrainConfig> top() {
  Section<TrainConfig> s("");
  s.integer("seed", &TrainConfig::seed, 0, INT64_MAX, "seed of the model's initialisation, the data order and the codecs");
  return s;
}

Section<ModelConfig> model() {
  using O = ModelConfig;
  Section<O> s("model", "the network trained");
  s.choice("name", &O::name, nn::modelNames(), "the model (gpt: the byte-level decoder LM, needs data.dataset = \"text\")")
      .integer("vit_patch", &O::vit_patch, 1, 4096, "vit-tiny: patch size")
      .integer("vit_depth", &O::vit_depth, 1, 4096, "vit-tiny: transformer blocks")
      .number("width", &O::width, Range::openClosed(0, 4), "vgg16_timm: channel multiplier")
      .number("dropout", &O::dropout, Range::halfOpen(0, 1), "vgg16_timm: dropout")
      .choice("init", &O::init, nn::initNames(), "weight initialisation")
      .choice("autocast", &O::autocast, {"off", "bf16"}, "bf16: forward and loss under bf16 autocast, f32 master weights")
      .integer("layers", &O::layers, 1, 4096, "gpt: transformer blocks")
      .integer("dim", &O::dim, 1, 1 << 20, "gpt: model width")
      .integer("heads", &O::heads, 1, 1 << 16, "gpt: attention heads (dividing model.dim)")
      .integer("seq_len", &O::seq_len, 1, 1 << 24, "gpt: context length in bytes")
      .integer("vocab", &O::vocab, 1, 1 << 24, "gpt: vocabulary (the text data set's 256 byte values)")
      .flag("tied", &O::tied, "gpt: the head tied to the token embedding")
      .text("path", &O::path, "torchscript: the torch.jit.save file");
  return s;
}

Section<DataConfig> data() {
  using O = DataConfig;
  Section<O> s("data", "the data set and batches");
  s.choice("dataset", &O::dataset, data::datasetNames(), "the data set")
      .text("dir", &O::dir, "its directory")
      .text("glob", &O::glob, "text: which files under `dir` (shell pattern on the relative path)")
      .integer("batch_size", &O::batch_size, 1, 1 << 24,
               "per rank and accumulation step (a model-parallel replica takes tp x pp of them)")
      .integer("test_batch_size", &O::test_batch_size, 1, 1 << 24, "evaluation batch")
      .flag("augment", &O::augment, "image augmentation (random crop and flip)")
      .integer("train_limit", &O::train_limit, 0, kIntMax, "use only the first N training samples (0 = all)")
      .integer("test_limit", &O::test_limit, 0, kIntMax, "use only the first N test samples (0 = all)");
  return s;
}

Section<OptimizerConfig> optimizer() {
  using O = OptimizerConfig;
  Section<O> s("optimizer", "the inner optimizer");
  s.choice("name", &O::name, {"sgd", "adamw"}, "the optimizer")
      .number("lr", &O::lr, Range::above(0), "peak learning rate")
      .number("momentum", &O::momentum, Range::atLeast(0), "sgd momentum")
      .flag("nesterov", &O::nesterov, "sgd: Nesterov momentum")
      .flag("sign", &O::sign, "sgd: step along the sign of the averaged gradient (signSGD; DeMo's update)")
      .number("weight_decay", &O::weight_decay, Range::atLeast(0), "weight decay (decoupled for adamw)")
      .number("beta1", &O::beta1, Range::halfOpen(0, 1), "adamw: first-moment decay")
      .number("beta2", &O::beta2, Range::halfOpen(0, 1), "adamw: second-moment decay")
      .number("eps", &O::eps, Range::above(0), "adamw: denominator epsilon")
      .number("grad_clip", &O::grad_clip, Range::atLeast(0), "max global L2 norm of the gradient; 0 = off")
      .number("label_smoothing", &O::label_smoothing, Range::halfOpen(0, 1), "cross-entropy label smoothing");
  return s;
}

Section<ScheduleConfig> schedule() {
  using O = ScheduleConfig;
  Section<O> s("schedule", "how long and at which learning rate");
  s.choice("name", &O::name, {"constant", "step", "cosine"}, "learning-rate schedule after the warmup")
      .integer("epochs", &O::epochs, 1, kIntMax, "passes over the training set")
      .integer("max_steps", &O::max_steps, 0, kIntMax, "stop after this many optimizer steps (0 = run all epochs)")
      .steps("warmup_steps", &O::warmup_steps, 0, "linear warmup")
      .integer("step_size", &O::step_size, 1, kIntMax, "step schedule: multiply by gamma every step_size steps")
      .number("gamma", &O::gamma, Range::openClosed(0, 1), "step schedule: the factor")
      .number("min_lr", &O::min_lr, Range::atLeast(0), "cosine: the floor (<= optimizer.lr)");
  return s;
}

Section<StrategyConfig> strategy(const parallel::StrategyRegistry& strategies) {
  using O = StrategyConfig;
  Section<O> s("strategy", "the data-parallel strategy and its buckets (its own keys: the section of its name)");
  s.choice("name", &O::name, strategies.names(), "the training strategy (docs/strategies.md)")
      .number("bucket_mb", &O::bucket_mb, Range::openClosed(0, 65536), "gradient bucket size in MiB")
      .flag("overlap", &O::overlap, "launch each bucket's allreduce during backward")
      .integer("accumulation", &O::accumulation, 1, 1 << 20, "micro-batches per optimizer step")
      .integer("zero", &O::zero, 0, 2, "ZeRO stage (sharded optimizer state, and gradients at 2); 0 = off");
  return s;
}

Section<ParallelConfig> parallelGrid() {
  using O = ParallelConfig;
  Section<O> s("parallel", "model parallelism: the world is a dp x tp x pp grid, the strategy runs on dp");
  s.integer("tp", &O::tp, 1, 4096, "tensor-parallel ranks per stage (gpt only; Megatron-style)")
      .integer("pp", &O::pp, 1, 4096, "pipeline stages (gpt only)")
      .integer("micro_batches", &O::micro_batches, 1, 1 << 20,
               "pipeline: micro-batches per step (dividing data.batch_size x tp x pp)")
      .choice("schedule", &O::schedule, {"1f1b", "gpipe", "interleaved"},
              "pipeline schedule (interleaved: 1F1B over virtual_stages chunks per rank)")
      .integer("virtual_stages", &O::virtual_stages, 1, 4096, "interleaved: model chunks per pipeline rank")
      .choice("order", &O::order, {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"},
              "rank layout, fastest-varying axis first (tp inside a node by default)")
      .choice("balance", &O::balance, {"params", "time"},
              "pipeline stage cut: parameter counts, or units timed on rank 0 at start");
  return s;
}

Section<FaultConfig> fault() {
  using O = FaultConfig;
  Section<O> s("fault", "a benchmark knob: one rank made slower, to see which strategies wait for it");
  s.integer("slow_rank", &O::slow_rank, -1, 65535, "the slowed rank; -1 = none")
      .number("slow_factor", &O::slow_factor, Range::closed(1, 100),
              "its forward + backward take this many times as long (it sleeps the rest)")
      .text("kill", &O::kill,
            "--elastic test knob: workers that SIGKILL themselves, SLOT[.INCARNATION]:WHERE[:STEP], comma-separated; "
            "WHERE = step (before it), collective (inside its gradient allreduce), checkpoint, heal (the first one), setup (while the first epoch builds its strategy)");
  return s;
}

Section<ElasticConfig> elastic() {
  using O = ElasticConfig;
  Section<O> s("elastic", "live membership with lowcomm train --nproc N --elastic (docs/elastic.md)");
  s.integer("min_replicas", &O::min_replicas, 1, 65536, "fewer live members wait for replacements instead of training")
      .integer("heartbeat_ms", &O::heartbeat_ms, 10, 60000, "how often each worker beats")
      .integer("heartbeat_timeout_ms", &O::heartbeat_timeout_ms, 100, 3600000,
               "a worker silent this long is killed and replaced")
      .integer("max_replacements", &O::max_replacements, 0, 1000000, "deaths replaced before the job stops");
  return s;
}

}  // namespace

// config_keys_run.cpp
Section<CommConfig> commSection();
Section<LoggingConfig> loggingSection();
Section<CheckpointConfig> checkpointSection();

std::vector<BoundSection> commonSections(const parallel::StrategyRegistry& strategies) {
  return {bindSection<TrainConfig>(top(), [](TrainConfig& c) -> TrainConfig& { return c; }),
          bindSection<ModelConfig>(model(), [](TrainConfig& c) -> ModelConfig& { return c.model; }),
          bindSection<DataConfig>(data(), [](TrainConfig& c) -> DataConfig& { return c.data; }),
          bindSection<OptimizerConfig>(optimizer(), [](TrainConfig& c) -> OptimizerConfig& { return c.optimizer; }),
          bindSection<ScheduleConfig>(schedule(), [](TrainConfig& c) -> ScheduleConfig& { return c.schedule; }),
          bindSection<StrategyConfig>(strategy(strategies), [](TrainConfig& c) -> StrategyConfig& { return c.strategy; }),
          bindSection<ParallelConfig>(parallelGrid(), [](TrainConfig& c) -> ParallelConfig& { return c.parallel; }),
          bindSection<FaultConfig>(fault(), [](TrainConfig& c) -> FaultConfig& { return c.fault; }),
          bindSection<ElasticConfig>(elastic(), [](TrainConfig& c) -> ElasticConfig& { return c.elastic; }),
          bindSection<compress::CompressConfig>(compress::compressSection(),
                                                [](TrainConfig& c) -> compress::CompressConfig& { return c.compress; }),
          bindSection<compress::CodecParams>(compress::codecParamsSection(),
                                             [](TrainConfig& c) -> compress::CodecParams& { return c.compress.codec_params; }),
          bindSection<compress::MemoryParams>(compress::memoryParamsSection(), [](TrainConfig& c) -> compress::MemoryParams& {
            return c.compress.memory_params;
          }),
          bindSection<CommConfig>(commSection(), [](TrainConfig& c) -> CommConfig& { return c.comm; }),
          bindSection<LoggingConfig>(loggingSection(), [](TrainConfig& c) -> LoggingConfig& { return c.logging; }),
          bindSection<CheckpointConfig>(checkpointSection(), [](TrainConfig& c) -> CheckpointConfig& { return c.checkpoint; })};
}

}  // namespace lowcomm::train
