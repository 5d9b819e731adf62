// Training configuration: a TOML file (the common sections model, data, optimizer, schedule,
// strategy, parallel, fault, compress, comm, logging, checkpoint, plus one section per
// registered strategy: ab, local_sgd, diloco, gossip, ssp, ...) and `--set section.key=value`
// overrides. Every key is declared once (src/train/config_keys.cpp for the common sections, the
// strategy's spec for its own); `lowcomm config keys` prints them all.
//
// Contract: an unknown key, a value of the wrong type, out of range or not among the choices is a
// ConfigError naming the file (or "--set") and the key. toToml() writes the resolved
// configuration, which loads back to the same values.
#pragma once

#include <any>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lowcomm/base/schema.h"
#include "lowcomm/compress/compressor.h"

namespace lowcomm::parallel {
class StrategyRegistry;
struct StrategySpec;
}  // namespace lowcomm::parallel

namespace lowcomm::train {

struct ModelConfig {
  std::string name = "cnn";
  int64_t vit_patch = 7;
  int64_t vit_depth = 12;
  double width = 1.0;            // vgg16_timm channel multiplier
  double dropout = 0.0;          // vgg16_timm dropout
  std::string init = "default";  // default | ortho-sigma
  std::string autocast = "off";  // off | bf16: forward and loss under bf16 autocast, f32 master weights
  // gpt (byte-level decoder LM): blocks, width, heads, context length, vocabulary (the text
  // data set's 256 byte values), head tied to the token embedding
  int64_t layers = 4;
  int64_t dim = 128;
  int64_t heads = 4;
  int64_t seq_len = 128;
  int64_t vocab = 256;
  bool tied = false;
  std::string path;  // torchscript: the torch.jit.save file
};
struct DataConfig {
  std::string dataset = "fashion-mnist";
  std::string dir = "/usr/share/datasets/fashion-mnist";
  std::string glob = "*";  // text: which files under `dir` (shell pattern on the relative path)
  int64_t batch_size = 128;  // per rank and accumulation step (a model-parallel replica takes tp x pp of them)
  int64_t test_batch_size = 1000;
  bool augment = false;
  int64_t train_limit = 0;  // use only the first N training samples (0 = all)
  int64_t test_limit = 0;
};
struct OptimizerConfig {
  std::string name = "sgd";  // sgd | adamw
  double lr = 0.05;
  double momentum = 0.9;
  bool nesterov = false;
  bool sign = false;  // sgd: step along the sign of the gradient (signSGD; DeMo's update)
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double grad_clip = 0.0;  // max global L2 norm; 0 = off
  double label_smoothing = 0.0;
};
struct ScheduleConfig {
  std::string name = "constant";  // constant | step | cosine
  int64_t epochs = 10;
  int64_t max_steps = 0;  // stop after this many optimizer steps (0 = run all epochs)
  double warmup_steps = 0;  // steps, or a fraction of the run (schema::RunSteps)
  int64_t step_size = 1000;  // step schedule: multiply by gamma every step_size steps
  double gamma = 0.1;
  double min_lr = 0.0;
};
struct StrategyConfig {
  std::string name = "ddp";
  double bucket_mb = 25.0;
  bool overlap = true;
  int64_t accumulation = 1;  // micro-batches per optimizer step
  int64_t zero = 0;  // ddp only: ZeRO stage 1 or 2 (lowcomm/parallel/zero.h), 0 = off
};
struct ParallelConfig {
  int64_t tp = 1;              // tensor-parallel ranks per stage (gpt only; Megatron-style)
  int64_t pp = 1;              // pipeline stages (gpt only)
  int64_t micro_batches = 1;   // pipeline: micro-batches per step of a pipeline (dividing its batch, data.batch_size x tp x pp)
  std::string schedule = "1f1b";  // pipeline schedule: 1f1b | gpipe | interleaved (1F1B over virtual_stages chunks per rank)
  int64_t virtual_stages = 1;     // interleaved: model chunks per pipeline rank (Megatron's virtual pipeline size)
  std::string order = "tp-dp-pp";  // rank layout, fastest-varying axis first (Megatron's default: tp inside a node)
  std::string balance = "params";  // pipeline stage cut: params (parameter counts) | time (units timed on rank 0 at start)
};
struct FaultConfig {
  int64_t slow_rank = -1;    // the slowed rank; -1 = none
  double slow_factor = 1.0;  // its forward + backward take this many times as long (it sleeps the rest)
  // A test knob (--elastic): workers that kill themselves (SIGKILL), "SLOT[.INCARNATION]:WHERE[:STEP]"
  // comma-separated; WHERE is step | collective | heal | checkpoint (heal: the first heal, any step).
  std::string kill;
};
// Live membership (`lowcomm train --nproc N --elastic`, docs/elastic.md).
struct ElasticConfig {
  int64_t min_replicas = 1;            // fewer live members wait for replacements instead of training
  int64_t heartbeat_ms = 200;
  int64_t heartbeat_timeout_ms = 3000;  // a worker silent this long is killed and replaced
  int64_t max_replacements = 1000;      // deaths replaced before the job stops
};
struct CommConfig {
  int64_t timeout_s = 300;
  std::string algo = "auto";
  std::string allgather = "auto";  // allgather(v) (sparse codecs, ZeRO): auto, ring or hier
  std::string tuning;              // a `lowcomm simulate tune` file: the automatic allreduce follows it
  std::string shm = "auto";
  bool deterministic = false;
  bool debug_check = false;
  std::string iface;
  std::string address;
  int64_t streams = 0;                       // TCP connections per cross-site pair (striping); 0 = auto
  int64_t stripe_min_bytes = 256 << 10;      // smaller cross-site messages use one connection
  int64_t eager_max_bytes = 64 << 10;        // sites allreduce: WAN messages sent without a ready notice
  std::string congestion_control = "system"; // per-socket TCP congestion control of the pairs
};
struct LoggingConfig {
  std::string out_dir = "runs/default";
  int64_t log_every = 10;  // steps between progress lines / JSONL step records
  int64_t eval_every = 0;  // steps between test evaluations besides each epoch's end; 0 = epoch ends only
  bool progress = true;
};
struct CheckpointConfig {
  int64_t every_steps = 0;     // 0 = only at the end (and every_minutes)
  double every_minutes = 30;   // also about this often, converted to steps from the measured rate; 0 = off
  int64_t keep_last = 3;       // checkpoints kept (older ones removed once a newer one is durable); 0 = all
  std::string dir;          // empty = <out_dir>/checkpoints
};

struct TrainConfig {
  uint64_t seed = 42;
  ModelConfig model;
  DataConfig data;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  StrategyConfig strategy;
  // Model parallelism (lowcomm/parallel/grid.h): the world is a dp x pp x tp grid, the strategy
  // runs on the data-parallel axis (dp = world / (tp pp)).
  ParallelConfig parallel;
  // A benchmark knob: one rank made slower, to see which strategies wait for it.
  FaultConfig fault;
  ElasticConfig elastic;
  // Gradient compression of the data-parallel strategy ([compress], codec "none" = plain
  // allreduce). compress.seed is taken from the top-level seed.
  compress::CompressConfig compress;
  CommConfig comm;
  LoggingConfig logging;
  CheckpointConfig checkpoint;
  // Every registered strategy's section, by section name, as its spec parsed it (the trainer
  // builds strategy.name's); and the registry they came from.
  std::map<std::string, std::any> strategy_options;
  std::shared_ptr<const parallel::StrategyRegistry> strategies;

  // A strategy section's options (e.g. section<parallel::AbOptions>("ab")); throws when absent.
  template <class Options>
  const Options& section(const std::string& name) const {
    return std::any_cast<const Options&>(strategy_options.at(name));
  }
};

// Step-count keys (schedule.warmup_steps and the strategies' steps keys) take an integer number of
// optimizer steps or a number in (0, 1): that fraction of the run's total steps, rounded (at
// least 1), so a config keeps a reference run's proportions at any run length.
int64_t runSteps(double value, int64_t total_steps);

// Loads `path` (empty: defaults only), then applies overrides "section.key=value" in order, and
// validates. The strategy sections are those of `strategies` (null: the built-in ones).
TrainConfig loadConfig(const std::string& path, const std::vector<std::string>& overrides = {},
                       std::shared_ptr<const parallel::StrategyRegistry> strategies = nullptr);
std::string toToml(const TrainConfig& c);
// Every declared key (common sections, then each strategy's), with type, default, range or
// choices and doc; section order as in toToml().
std::vector<schema::KeyInfo> configKeyInfo(std::shared_ptr<const parallel::StrategyRegistry> strategies = nullptr);
// Every valid key, "section.key".
std::vector<std::string> configKeys();
// The key reference as a Markdown page (docs/config.md is this output).
std::string configKeysMarkdown();
// The spec of c.strategy.name and its parsed options.
const parallel::StrategySpec& strategySpec(const TrainConfig& c);
const std::any& strategyOptions(const TrainConfig& c);
// A value as TOML source text.
std::string tomlText(const schema::Value& v);

}  // namespace lowcomm::train
