// Training configuration: a TOML file (sections model, data, optimizer, schedule, strategy,
// parallel, ab, compress, comm, logging, checkpoint) plus `--set section.key=value` overrides.
//
// Contract: an unknown key, a value of the wrong type or out of range is a ConfigError naming
// the file (or "--set") and the key. toToml() writes the resolved configuration, which loads
// back to the same values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lowcomm/compress/compressor.h"

namespace lowcomm::train {

struct TrainConfig {
  uint64_t seed = 42;
  struct {
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
  } model;
  struct {
    std::string dataset = "fashion-mnist";
    std::string dir = "/usr/share/datasets/fashion-mnist";
    std::string glob = "*";  // text: which files under `dir` (shell pattern on the relative path)
    int64_t batch_size = 128;  // per rank and accumulation step (a model-parallel replica takes tp x pp of them)
    int64_t test_batch_size = 1000;
    bool augment = false;
    int64_t train_limit = 0;  // use only the first N training samples (0 = all)
    int64_t test_limit = 0;
  } data;
  struct {
    std::string name = "sgd";  // sgd | adamw
    double lr = 0.05;
    double momentum = 0.9;
    bool nesterov = false;
    double weight_decay = 0.0;
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
    double grad_clip = 0.0;  // max global L2 norm; 0 = off
    double label_smoothing = 0.0;
  } optimizer;
  struct {
    std::string name = "constant";  // constant | step | cosine
    int64_t epochs = 10;
    int64_t max_steps = 0;  // stop after this many optimizer steps (0 = run all epochs)
    double warmup_steps = 0;  // steps, or a fraction of the run (see RunSteps)
    int64_t step_size = 1000;  // step schedule: multiply by gamma every step_size steps
    double gamma = 0.1;
    double min_lr = 0.0;
  } schedule;
  struct {
    std::string name = "ddp";
    double bucket_mb = 25.0;
    bool overlap = true;
    int64_t accumulation = 1;  // micro-batches per optimizer step
    int64_t zero = 0;  // ddp only: ZeRO stage 1 or 2 (lowcomm/parallel/zero.h), 0 = off
  } strategy;
  // Model parallelism (lowcomm/parallel/grid.h): the world is a dp x pp x tp grid, the strategy
  // runs on the data-parallel axis (dp = world / (tp pp)).
  struct {
    int64_t tp = 1;              // tensor-parallel ranks per stage (gpt only; Megatron-style)
    int64_t pp = 1;              // pipeline stages (gpt only)
    int64_t micro_batches = 1;   // pipeline: micro-batches per step of a pipeline (dividing its batch, data.batch_size x tp x pp)
    std::string schedule = "1f1b";  // pipeline schedule: 1f1b | gpipe | interleaved (1F1B over virtual_stages chunks per rank)
    int64_t virtual_stages = 1;     // interleaved: model chunks per pipeline rank (Megatron's virtual pipeline size)
    std::string order = "tp-dp-pp";  // rank layout, fastest-varying axis first (Megatron's default: tp inside a node)
    std::string balance = "params";  // pipeline stage cut: params (parameter counts) | time (units timed on rank 0 at start)
  } parallel;
  // AB-training (strategy.name = "ab"; docs/ab-training.md). Defaults follow the reference's
  // experiment configs where they are not step counts.
  struct {
    // Ranks per group (>= 1), or "node" (-2: one group per node, two halves on one node), -1 (the
    // reference's: two halves, one global group with only-b), "world" (-3: one global group).
    int64_t group_size = -2;
    std::string sync_mode = "with-stale";  // full | with-stale | only-learned | only-b | only-smaller
    // Step counts, or fractions of the run (see RunSteps).
    double warmup_steps = 500;             // global full-rank DDP steps before the first SVD
    double steps_btw_syncing = 200;        // a sync at every step divisible by this
    double ddp_steps_after_sync = 20;      // global full-rank steps after each sync
    double lr_rebound_steps = 50;          // LR ramp from 1e-5 after every switch
    double low_rank_cutoff = 0.15;         // keep singular values > cutoff * s_max
    bool split_sigma = true;               // A = U sqrt(S), B = sqrt(S) Vh
    std::vector<std::string> full_rank_layers = {"stem", "head"};
    std::string train_setup = "groups";    // groups | individual (each rank trains alone between syncs)
    bool reset_opt = false;                // zero optimizer moments at every switch
    bool factored_forward = true;          // truncated layers run as two thin ops
    std::string svd = "randomized";        // exact | randomized (sketch of the previous rank + 8)
    bool svd_split = false;                // each rank decomposes a share of the layers, then broadcasts
    std::string sync_weights = "equal";    // equal | inverse-loss (groups weighted by 1 / their loss)
    std::string regroup = "none";          // none | random (new groups after every sync)
    std::string group_lr = "fixed";        // fixed | explore (per-group LR multipliers, best group wins at a sync)
    double group_lr_spread = 2.0;          // explore: the multipliers span center / spread .. center * spread
  } ab;
  // Local SGD (strategy.name = "local_sgd"; contract in lowcomm/parallel/local_sgd.h).
  struct {
    int64_t period = 4;              // local steps between parameter averagings
    double start_step = 0;           // DDP steps first (post-local SGD); steps or a fraction of the run
    bool average_optimizer = false;  // average the optimizer's moments with the parameters
    bool hierarchical = false;       // DDP inside each node every step, averaging across nodes
  } local_sgd;
  // DiLoCo (strategy.name = "diloco"; contract in lowcomm/parallel/diloco.h).
  struct {
    int64_t period = 16;          // inner steps between outer steps
    double outer_lr = 0.7;        // outer SGD learning rate on the averaged pseudo-gradient
    double outer_momentum = 0.9;  // outer momentum
    bool nesterov = true;
  } diloco;
  // Gossip (strategy.name = "gossip"; contract in lowcomm/parallel/gossip.h).
  struct {
    std::string topology = "ring";  // ring | exponential
    int64_t period = 1;             // steps between mixings
    int64_t consensus_every = 10;   // mixings between consensus-distance measurements; 0 = never
  } gossip;
  // Stale-synchronous parallel (strategy.name = "ssp"; contract in lowcomm/parallel/ssp.h).
  struct {
    int64_t staleness = 2;  // steps a rank may run ahead of the slowest; -1 = unbounded (asynchronous)
    bool overlap = false;   // with staleness != 0: a step's push and pull run during the next step
  } ssp;
  // A benchmark knob: one rank made slower, to see which strategies wait for it.
  struct {
    int64_t slow_rank = -1;    // the slowed rank; -1 = none
    double slow_factor = 1.0;  // its forward + backward take this many times as long (it sleeps the rest)
  } fault;
  // Gradient compression of the data-parallel strategy ([compress], codec "none" = plain
  // allreduce). compress.seed is taken from the top-level seed.
  compress::CompressConfig compress;
  struct {
    int64_t timeout_s = 300;
    std::string algo = "auto";
    std::string allgather = "auto";  // allgather(v) (sparse codecs, ZeRO): auto, ring or hier
    std::string tuning;              // a `lowcomm simulate tune` file: the automatic allreduce follows it
    std::string shm = "auto";
    bool deterministic = false;
    bool debug_check = false;
    std::string iface;
    std::string address;
  } comm;
  struct {
    std::string out_dir = "runs/default";
    int64_t log_every = 10;  // steps between progress lines / JSONL step records
    int64_t eval_every = 0;  // steps between test evaluations besides each epoch's end; 0 = epoch ends only
    bool progress = true;
  } logging;
  struct {
    int64_t every_steps = 0;     // 0 = only at the end (and every_minutes)
    double every_minutes = 30;   // also about this often, converted to steps from the measured rate; 0 = off
    int64_t keep_last = 3;       // checkpoints kept (older ones removed once a newer one is durable); 0 = all
    std::string dir;          // empty = <out_dir>/checkpoints
  } checkpoint;
};

// Step-count keys (schedule.warmup_steps, ab.warmup_steps, ab.steps_btw_syncing,
// ab.ddp_steps_after_sync, ab.lr_rebound_steps, local_sgd.start_step) take an integer number of optimizer steps or a
// number in (0, 1): that fraction of the run's total steps, rounded (at least 1). So a config can
// keep a reference run's proportions at any run length.
int64_t runSteps(double value, int64_t total_steps);

// Loads `path` (empty: defaults only), then applies overrides "section.key=value" in order.
TrainConfig loadConfig(const std::string& path, const std::vector<std::string>& overrides = {});
std::string toToml(const TrainConfig& c);
// Every valid key, "section.key".
std::vector<std::string> configKeys();

}  // namespace lowcomm::train
