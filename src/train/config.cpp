#include "lowcomm/train/config.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>
#include <toml++/toml.h>

#include "lowcomm/base/error.h"
#include "strategies.h"

namespace lowcomm::train {

namespace {

// One schema entry per key: how to read it from a TOML node and how to print it.
struct Field {
  std::function<void(TrainConfig&, const toml::node&, const std::string& where)> set;
  std::function<std::string(const TrainConfig&)> show;
};

// Deadlines are steady_clock time points in nanoseconds: a timeout of centuries overflows them.
constexpr int64_t kMaxTimeoutS = 30 * 24 * 3600;

[[noreturn]] void bad(const std::string& where, const std::string& key, const std::string& why) {
  throw ConfigError(where + ": key '" + key + "' " + why);
}

template <typename T>
T get(const toml::node& n, const std::string& where, const std::string& key) {
  if constexpr (std::is_same_v<T, bool>) {
    if (auto v = n.value_exact<bool>()) return *v;
    bad(where, key, "must be true or false");
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (auto v = n.value_exact<std::string>()) return *v;
    bad(where, key, "must be a string");
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    // A TOML array of strings, or one string of comma-separated names (handy with --set).
    std::vector<std::string> out;
    if (const auto* arr = n.as_array()) {
      for (const auto& e : *arr) {
        auto v = e.value_exact<std::string>();
        if (!v) bad(where, key, "must be an array of strings");
        out.push_back(*v);
      }
      return out;
    }
    if (auto v = n.value_exact<std::string>()) {
      std::stringstream ss(*v);
      for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty()) out.push_back(item);
      return out;
    }
    bad(where, key, "must be an array of strings");
  } else if constexpr (std::is_same_v<T, int64_t>) {
    if (auto v = n.value_exact<int64_t>()) return *v;
    bad(where, key, "must be an integer");
  } else {
    if (auto v = n.value<double>()) return *v;
    bad(where, key, "must be a number");
  }
}

// Integer keys: every one has a range, checked where it is read, that fits the narrowest type
// the value goes into (most become an int somewhere: model sizes, ranks, step counts), so no
// value is ever truncated or wrapped on the way.
constexpr int64_t kIntMax = 2147483647;  // INT32_MAX

int64_t getInt(const toml::node& n, const std::string& where, const std::string& key, int64_t lo, int64_t hi) {
  const int64_t v = get<int64_t>(n, where, key);
  if (v < lo || v > hi)
    bad(where, key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(v));
  return v;
}

std::string quote(const std::string& s) {
  std::ostringstream os;
  os << toml::value<std::string>(s);
  return os.str();
}
std::string show(bool b) { return b ? "true" : "false"; }
std::string show(int64_t v) { return std::to_string(v); }
std::string show(double v) {
  std::ostringstream os;
  os << toml::value<double>(v);
  return os.str();
}
std::string show(const std::string& s) { return quote(s); }
std::string show(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + quote(v[i]);
  return out + "]";
}

// A step count (integer >= 0) or a fraction of the run (a number in (0, 1)).
Field stepsField(const char* key, double& (*ref)(TrainConfig&)) {
  return Field{[key, ref](TrainConfig& c, const toml::node& n, const std::string& w) {
                 if (n.value_exact<int64_t>()) {
                   ref(c) = static_cast<double>(getInt(n, w, key, 0, kIntMax));
                   return;
                 }
                 auto v = n.value<double>();
                 if (!v) bad(w, key, "must be a step count (integer) or a fraction of the run in (0, 1)");
                 if (!(*v > 0 && *v < 1)) bad(w, key, "is a number: a fraction of the run must be in (0, 1); a step count must be an integer");
                 ref(c) = *v;
               },
               [ref](const TrainConfig& c) {
                 const double v = ref(const_cast<TrainConfig&>(c));
                 return v >= 1 || v == 0 ? std::to_string(static_cast<int64_t>(v)) : show(v);
               }};
}

#define LC_STEPS(key, member) \
  { key, stepsField(key, [](TrainConfig& c) -> double& { return c.member; }) }

#define LC_INT(key, member, lo, hi)                                                                     \
  {                                                                                                     \
    key, Field {                                                                                        \
      [](TrainConfig& c, const toml::node& n, const std::string& w) { c.member = getInt(n, w, key, lo, hi); }, \
          [](const TrainConfig& c) { return show(static_cast<int64_t>(c.member)); }                    \
    }                                                                                                   \
  }

#define LC_FIELD(key, member, T)                                                                         \
  {                                                                                                      \
    key, Field {                                                                                         \
      [](TrainConfig& c, const toml::node& n, const std::string& w) { c.member = get<T>(n, w, key); }, \
          [](const TrainConfig& c) { return show(static_cast<T>(c.member)); }                           \
    }                                                                                                    \
  }

const std::map<std::string, Field>& schema() {
  static const std::map<std::string, Field> fields = {
      {"seed", Field{[](TrainConfig& c, const toml::node& n, const std::string& w) {
                       const int64_t v = get<int64_t>(n, w, "seed");
                       if (v < 0) bad(w, "seed", "must be >= 0");
                       c.seed = static_cast<uint64_t>(v);
                     },
                     [](const TrainConfig& c) { return std::to_string(c.seed); }}},
      LC_FIELD("model.name", model.name, std::string),
      LC_INT("model.vit_patch", model.vit_patch, 1, 4096),
      LC_INT("model.vit_depth", model.vit_depth, 1, 4096),
      LC_FIELD("model.width", model.width, double),
      LC_FIELD("model.dropout", model.dropout, double),
      LC_FIELD("model.init", model.init, std::string),
      LC_FIELD("model.autocast", model.autocast, std::string),
      LC_INT("model.layers", model.layers, 1, 4096),
      LC_INT("model.dim", model.dim, 1, 1 << 20),
      LC_INT("model.heads", model.heads, 1, 1 << 16),
      LC_INT("model.seq_len", model.seq_len, 1, 1 << 24),
      LC_INT("model.vocab", model.vocab, 1, 1 << 24),
      LC_FIELD("model.tied", model.tied, bool),
      LC_FIELD("model.path", model.path, std::string),
      LC_FIELD("data.dataset", data.dataset, std::string),
      LC_FIELD("data.dir", data.dir, std::string),
      LC_FIELD("data.glob", data.glob, std::string),
      LC_INT("data.batch_size", data.batch_size, 1, 1 << 24),
      LC_INT("data.test_batch_size", data.test_batch_size, 1, 1 << 24),
      LC_FIELD("data.augment", data.augment, bool),
      LC_INT("data.train_limit", data.train_limit, 0, kIntMax),
      LC_INT("data.test_limit", data.test_limit, 0, kIntMax),
      LC_FIELD("optimizer.name", optimizer.name, std::string),
      LC_FIELD("optimizer.lr", optimizer.lr, double),
      LC_FIELD("optimizer.momentum", optimizer.momentum, double),
      LC_FIELD("optimizer.nesterov", optimizer.nesterov, bool),
      LC_FIELD("optimizer.weight_decay", optimizer.weight_decay, double),
      LC_FIELD("optimizer.beta1", optimizer.beta1, double),
      LC_FIELD("optimizer.beta2", optimizer.beta2, double),
      LC_FIELD("optimizer.eps", optimizer.eps, double),
      LC_FIELD("optimizer.grad_clip", optimizer.grad_clip, double),
      LC_FIELD("optimizer.label_smoothing", optimizer.label_smoothing, double),
      LC_FIELD("schedule.name", schedule.name, std::string),
      LC_INT("schedule.epochs", schedule.epochs, 1, kIntMax),
      LC_INT("schedule.max_steps", schedule.max_steps, 0, kIntMax),
      LC_STEPS("schedule.warmup_steps", schedule.warmup_steps),
      LC_INT("schedule.step_size", schedule.step_size, 1, kIntMax),
      LC_FIELD("schedule.gamma", schedule.gamma, double),
      LC_FIELD("schedule.min_lr", schedule.min_lr, double),
      LC_FIELD("strategy.name", strategy.name, std::string),
      LC_FIELD("strategy.bucket_mb", strategy.bucket_mb, double),
      LC_FIELD("strategy.overlap", strategy.overlap, bool),
      LC_INT("strategy.accumulation", strategy.accumulation, 1, 1 << 20),
      LC_INT("strategy.zero", strategy.zero, 0, 2),
      LC_INT("parallel.tp", parallel.tp, 1, 4096),
      LC_INT("parallel.pp", parallel.pp, 1, 4096),
      LC_INT("parallel.micro_batches", parallel.micro_batches, 1, 1 << 20),
      LC_FIELD("parallel.schedule", parallel.schedule, std::string),
      LC_INT("parallel.virtual_stages", parallel.virtual_stages, 1, 4096),
      LC_FIELD("parallel.order", parallel.order, std::string),
      LC_FIELD("parallel.balance", parallel.balance, std::string),
      {"ab.group_size", Field{[](TrainConfig& c, const toml::node& n, const std::string& w) {
                                if (auto v = n.value_exact<std::string>()) {
                                  if (*v == "node") c.ab.group_size = -2;
                                  else if (*v == "world") c.ab.group_size = -3;
                                  else bad(w, "ab.group_size", "is '" + *v + "'; expected \"node\", \"world\", -1 or a size >= 1");
                                } else {
                                  const int64_t size = getInt(n, w, "ab.group_size", -1, 65536);
                                  if (size == 0)
                                    bad(w, "ab.group_size", "must be \"node\", \"world\", -1 (two halves; one group with only-b) or >= 1");
                                  c.ab.group_size = size;
                                }
                              },
                              [](const TrainConfig& c) {
                                if (c.ab.group_size == -2) return quote("node");
                                if (c.ab.group_size == -3) return quote("world");
                                return std::to_string(c.ab.group_size);
                              }}},
      LC_FIELD("ab.sync_mode", ab.sync_mode, std::string),
      LC_STEPS("ab.warmup_steps", ab.warmup_steps),
      LC_STEPS("ab.steps_btw_syncing", ab.steps_btw_syncing),
      LC_STEPS("ab.ddp_steps_after_sync", ab.ddp_steps_after_sync),
      LC_STEPS("ab.lr_rebound_steps", ab.lr_rebound_steps),
      LC_FIELD("ab.low_rank_cutoff", ab.low_rank_cutoff, double),
      LC_FIELD("ab.split_sigma", ab.split_sigma, bool),
      LC_FIELD("ab.full_rank_layers", ab.full_rank_layers, std::vector<std::string>),
      LC_FIELD("ab.train_setup", ab.train_setup, std::string),
      LC_FIELD("ab.reset_opt", ab.reset_opt, bool),
      LC_FIELD("ab.factored_forward", ab.factored_forward, bool),
      LC_FIELD("ab.svd", ab.svd, std::string),
      LC_FIELD("ab.svd_split", ab.svd_split, bool),
      LC_FIELD("ab.sync_weights", ab.sync_weights, std::string),
      LC_FIELD("ab.regroup", ab.regroup, std::string),
      LC_FIELD("ab.group_lr", ab.group_lr, std::string),
      LC_FIELD("ab.group_lr_spread", ab.group_lr_spread, double),
      LC_INT("local_sgd.period", local_sgd.period, 1, kIntMax),
      LC_STEPS("local_sgd.start_step", local_sgd.start_step),
      LC_FIELD("local_sgd.average_optimizer", local_sgd.average_optimizer, bool),
      LC_FIELD("local_sgd.hierarchical", local_sgd.hierarchical, bool),
      LC_INT("diloco.period", diloco.period, 1, kIntMax),
      LC_FIELD("diloco.outer_lr", diloco.outer_lr, double),
      LC_FIELD("diloco.outer_momentum", diloco.outer_momentum, double),
      LC_FIELD("diloco.nesterov", diloco.nesterov, bool),
      LC_FIELD("gossip.topology", gossip.topology, std::string),
      LC_INT("gossip.period", gossip.period, 1, kIntMax),
      LC_INT("gossip.consensus_every", gossip.consensus_every, 0, kIntMax),
      LC_INT("ssp.staleness", ssp.staleness, -1, kIntMax),
      LC_FIELD("ssp.overlap", ssp.overlap, bool),
      LC_INT("fault.slow_rank", fault.slow_rank, -1, 65535),
      LC_FIELD("fault.slow_factor", fault.slow_factor, double),
      LC_FIELD("compress.codec", compress.codec, std::string),
      LC_FIELD("compress.memory", compress.memory, std::string),
      LC_FIELD("compress.ratio", compress.codec_params.ratio, double),
      LC_INT("compress.levels", compress.codec_params.levels, 1, 127),
      LC_FIELD("compress.threshold", compress.codec_params.threshold, double),
      LC_INT("compress.block", compress.codec_params.block, 8, 1 << 30),
      LC_FIELD("compress.sample_ratio", compress.codec_params.sample_ratio, double),
      LC_FIELD("compress.momentum", compress.memory_params.momentum, double),
      LC_FIELD("compress.clip", compress.memory_params.clip, double),
      LC_FIELD("compress.skip_1d", compress.skip_1d, bool),
      LC_INT("compress.min_numel", compress.min_numel, 0, kIntMax),
      LC_FIELD("compress.exclude", compress.exclude, std::vector<std::string>),
      LC_INT("compress.rank", compress.rank, 1, 1 << 16),
      LC_INT("compress.start_step", compress.start_step, 0, kIntMax),
      LC_FIELD("compress.min_compression", compress.min_compression, double),
      LC_FIELD("compress.warm_start", compress.warm_start, bool),
      LC_FIELD("compress.auto_candidates", compress.auto_candidates, std::vector<std::string>),
      LC_INT("compress.auto_trial_steps", compress.auto_trial_steps, 1, 1 << 20),
      LC_INT("compress.auto_recheck_every", compress.auto_recheck_every, 0, kIntMax),
      LC_INT("comm.timeout_s", comm.timeout_s, 1, kMaxTimeoutS),
      LC_FIELD("comm.algo", comm.algo, std::string),
      LC_FIELD("comm.allgather", comm.allgather, std::string),
      LC_FIELD("comm.tuning", comm.tuning, std::string),
      LC_FIELD("comm.shm", comm.shm, std::string),
      LC_FIELD("comm.deterministic", comm.deterministic, bool),
      LC_FIELD("comm.debug_check", comm.debug_check, bool),
      LC_FIELD("comm.iface", comm.iface, std::string),
      LC_FIELD("comm.address", comm.address, std::string),
      LC_FIELD("logging.out_dir", logging.out_dir, std::string),
      LC_INT("logging.log_every", logging.log_every, 1, kIntMax),
      LC_INT("logging.eval_every", logging.eval_every, 0, kIntMax),
      LC_FIELD("logging.progress", logging.progress, bool),
      LC_INT("checkpoint.every_steps", checkpoint.every_steps, 0, kIntMax),
      LC_FIELD("checkpoint.every_minutes", checkpoint.every_minutes, double),
      LC_INT("checkpoint.keep_last", checkpoint.keep_last, 0, kIntMax),
      LC_FIELD("checkpoint.dir", checkpoint.dir, std::string),
  };
  return fields;
}
#undef LC_FIELD
#undef LC_INT
#undef LC_STEPS

void apply(TrainConfig& c, const std::string& key, const toml::node& n, const std::string& where) {
  auto it = schema().find(key);
  if (it == schema().end()) bad(where, key, "is unknown (valid keys: see `lowcomm train --list-keys`)");
  it->second.set(c, n, where);
}

void walk(TrainConfig& c, const toml::table& t, const std::string& prefix, const std::string& where) {
  for (const auto& [k, v] : t) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const auto* sub = v.as_table()) {
      if (!prefix.empty()) bad(where, key, "is nested too deeply");
      walk(c, *sub, key, where);
    } else {
      apply(c, key, v, where);
    }
  }
}

void oneOf(const std::string& where, const std::string& key, const std::string& v,
           const std::vector<std::string>& allowed) {
  std::string list;
  for (const auto& a : allowed) {
    if (v == a) return;
    list += (list.empty() ? "" : ", ") + a;
  }
  bad(where, key, "is '" + v + "'; expected one of: " + list);
}

// Names and ranges; the codecs check their own parameters again when built.
void validateCompress(const TrainConfig& c, const std::string& where) {
  const auto& z = c.compress;
  const auto names = compress::compressorNames();
  auto known = [&](const std::string& key, const std::string& v) {
    if (std::find(names.begin(), names.end(), v) != names.end()) return;
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    bad(where, key, "is '" + v + "'; expected one of: " + list);
  };
  known("compress.codec", z.codec);
  for (const auto& a : z.auto_candidates) {
    known("compress.auto_candidates", a);
    if (a == "auto" || a == "none") bad(where, "compress.auto_candidates", "must not contain '" + a + "'");
  }
  oneOf(where, "compress.memory", z.memory, {"default", "none", "residual", "dgc", "momentum"});
  if (!(z.codec_params.ratio > 0 && z.codec_params.ratio <= 1)) bad(where, "compress.ratio", "must be in (0, 1]");
  if (!(z.codec_params.threshold > 0)) bad(where, "compress.threshold", "must be > 0");
  if (!(z.codec_params.sample_ratio > 0 && z.codec_params.sample_ratio <= 1))
    bad(where, "compress.sample_ratio", "must be in (0, 1]");
  if (!(z.memory_params.momentum >= 0 && z.memory_params.momentum < 1)) bad(where, "compress.momentum", "must be in [0, 1)");
  if (!(z.memory_params.clip >= 0)) bad(where, "compress.clip", "must be >= 0");
  if (!(z.min_compression >= 1)) bad(where, "compress.min_compression", "must be >= 1");
  const std::string memory = z.memory == "default" ? compress::defaultMemory(z.codec) : z.memory;
  // DGC's momentum correction moves momentum into the compressor (Lin et al. 2018, sec. 3.2):
  // optimizer momentum on top would apply it twice.
  if (memory == "dgc" && c.optimizer.name == "sgd" && c.optimizer.momentum > 0)
    bad(where, "compress.memory", "is dgc, which applies momentum itself (momentum correction); set optimizer.momentum = 0");
}

void validateAb(const TrainConfig& c, const std::string& where) {
  const auto& a = c.ab;
  oneOf(where, "ab.train_setup", a.train_setup, {"groups", "individual"});
  oneOf(where, "ab.svd", a.svd, {"exact", "randomized"});
  oneOf(where, "ab.sync_weights", a.sync_weights, {"equal", "inverse-loss"});
  oneOf(where, "ab.regroup", a.regroup, {"none", "random"});
  oneOf(where, "ab.group_lr", a.group_lr, {"fixed", "explore"});
  if (!(a.group_lr_spread >= 1 && a.group_lr_spread <= 16)) bad(where, "ab.group_lr_spread", "must be in [1, 16]");
  oneOf(where, "ab.sync_mode", a.sync_mode, {"full", "with-stale", "only-learned", "only-b", "only-smaller"});
  if (a.steps_btw_syncing == 0) bad(where, "ab.steps_btw_syncing", "must be >= 1 (or a fraction of the run)");
  if (!(a.low_rank_cutoff >= 0 && a.low_rank_cutoff < 1)) bad(where, "ab.low_rank_cutoff", "must be in [0, 1)");
}

// Interleaved 1F1B (Narayanan et al., 2021): v >= 2 chunks per rank, micro-batches in groups of
// pp, and a strategy whose forward is the model's (AB-training rebuilds whole stages).
void validateVirtualStages(const TrainConfig& c, const std::string& where) {
  const auto& p = c.parallel;
  if (p.schedule != "interleaved") {
    if (p.virtual_stages != 1)
      bad(where, "parallel.virtual_stages", "splits each rank's stage into chunks for parallel.schedule = \"interleaved\" only");
    return;
  }
  if (p.pp < 2) bad(where, "parallel.schedule", "\"interleaved\" runs a pipeline (parallel.pp > 1)");
  if (p.virtual_stages < 2)
    bad(where, "parallel.virtual_stages", "\"interleaved\" needs at least 2 model chunks per pipeline rank");
  if (p.micro_batches % p.pp != 0)
    bad(where, "parallel.micro_batches", "\"interleaved\" runs micro-batches in groups of parallel.pp = " +
                                            std::to_string(p.pp) + ": " + std::to_string(p.micro_batches) + " is not a multiple");
  if (c.strategy.name == "ab")
    bad(where, "parallel.virtual_stages", "AB-training rebuilds each stage's weights in one forward; run it with "
                                          "parallel.schedule = \"1f1b\" or \"gpipe\"");
}

// What runs on a model-parallel grid: the gpt model, and on the data-parallel axis every strategy
// (DDP with any codec or ZeRO, AB-training, local SGD, DiLoCo, gossip, SSP: each moves its rank's
// shard over the dp axis).
void validateParallel(const TrainConfig& c, const std::string& where) {
  const auto& p = c.parallel;
  oneOf(where, "parallel.schedule", p.schedule, {"1f1b", "gpipe", "interleaved"});
  oneOf(where, "parallel.order", p.order, {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"});
  validateVirtualStages(c, where);
  oneOf(where, "parallel.balance", p.balance, {"params", "time"});
  if (p.pp == 1 && p.balance != "params") bad(where, "parallel.balance", "cuts pipeline stages (parallel.pp > 1)");
  if (p.pp == 1 && p.micro_batches != 1)
    bad(where, "parallel.micro_batches", "splits a pipeline's batch (parallel.pp > 1); without a pipeline use strategy.accumulation");
  const int64_t replica_batch = c.data.batch_size * p.tp * p.pp;  // what one pipeline takes per step
  if (p.pp > 1 && replica_batch % p.micro_batches != 0)
    bad(where, "parallel.micro_batches", std::to_string(p.micro_batches) + " micro-batches do not divide a pipeline's batch of " +
                                            std::to_string(replica_batch) + " (data.batch_size x parallel.tp x parallel.pp)");
  if (p.tp == 1 && p.pp == 1) return;
  const std::string key = p.tp > 1 ? "parallel.tp" : "parallel.pp";
  if (c.model.name != "gpt")
    bad(where, key, "splits the layers of model.name = \"gpt\"; \"" + c.model.name + "\" runs with parallel.tp = parallel.pp = 1");
}

void validate(const TrainConfig& c, const std::string& where) {
  auto positive = [&](const char* key, double v) {
    if (!(v > 0)) bad(where, key, "must be > 0");
  };
  auto nonneg = [&](const char* key, double v) {
    if (!(v >= 0)) bad(where, key, "must be >= 0");
  };
  auto finite = [&](const char* key, double v) {
    if (!std::isfinite(v)) bad(where, key, "must be finite");
  };
  if (!(c.model.width > 0 && c.model.width <= 4)) bad(where, "model.width", "must be in (0, 4]");
  if (!(c.model.dropout >= 0 && c.model.dropout < 1)) bad(where, "model.dropout", "must be in [0, 1)");
  oneOf(where, "model.init", c.model.init, {"default", "ortho-sigma"});
  oneOf(where, "model.autocast", c.model.autocast, {"off", "bf16"});
  if (c.model.dim % c.model.heads != 0)
    bad(where, "model.heads", std::to_string(c.model.heads) + " does not divide model.dim " + std::to_string(c.model.dim));
  if ((c.model.name == "torchscript") != !c.model.path.empty())
    bad(where, "model.path", c.model.path.empty() ? "model.name = \"torchscript\" needs the module file (torch.jit.save)"
                                                  : "is only for model.name = \"torchscript\", not '" + c.model.name + "'");
  const bool text = c.data.dataset == "text", gpt = c.model.name == "gpt";
  if (text != gpt)
    bad(where, text ? "model.name" : "data.dataset",
        text ? "'" + c.model.name + "' is an image model; the text data set needs model.name = \"gpt\""
             : "model 'gpt' is a language model; it needs data.dataset = \"text\", not '" + c.data.dataset + "'");
  if (text && c.model.vocab != 256)
    bad(where, "model.vocab", "the text data set has 256 byte tokens, got " + std::to_string(c.model.vocab));
  if (text && c.data.augment) bad(where, "data.augment", "image augmentation does not apply to the text data set");
  if (text && c.data.glob.empty()) bad(where, "data.glob", "must not be empty (\"*\" takes every file)");
  oneOf(where, "optimizer.name", c.optimizer.name, {"sgd", "adamw"});
  positive("optimizer.lr", c.optimizer.lr);
  nonneg("optimizer.momentum", c.optimizer.momentum);
  nonneg("optimizer.weight_decay", c.optimizer.weight_decay);
  nonneg("optimizer.grad_clip", c.optimizer.grad_clip);
  if (c.optimizer.label_smoothing < 0 || c.optimizer.label_smoothing >= 1)
    bad(where, "optimizer.label_smoothing", "must be in [0, 1)");
  if (!(c.optimizer.beta1 >= 0 && c.optimizer.beta1 < 1)) bad(where, "optimizer.beta1", "must be in [0, 1)");
  if (!(c.optimizer.beta2 >= 0 && c.optimizer.beta2 < 1)) bad(where, "optimizer.beta2", "must be in [0, 1)");
  if (!(c.optimizer.eps > 0 && std::isfinite(c.optimizer.eps))) bad(where, "optimizer.eps", "must be > 0 and finite");
  finite("optimizer.lr", c.optimizer.lr);
  finite("optimizer.momentum", c.optimizer.momentum);
  finite("optimizer.weight_decay", c.optimizer.weight_decay);
  finite("optimizer.grad_clip", c.optimizer.grad_clip);
  oneOf(where, "schedule.name", c.schedule.name, {"constant", "step", "cosine"});
  if (!(c.schedule.gamma > 0 && c.schedule.gamma <= 1)) bad(where, "schedule.gamma", "must be in (0, 1]");
  if (!(c.schedule.min_lr >= 0 && c.schedule.min_lr <= c.optimizer.lr))
    bad(where, "schedule.min_lr", "must be in [0, optimizer.lr]");
  oneOf(where, "strategy.name", c.strategy.name, strategyNames());
  validateAb(c, where);
  positive("diloco.outer_lr", c.diloco.outer_lr);
  finite("diloco.outer_lr", c.diloco.outer_lr);
  if (!(c.diloco.outer_momentum >= 0 && c.diloco.outer_momentum < 1)) bad(where, "diloco.outer_momentum", "must be in [0, 1)");
  oneOf(where, "gossip.topology", c.gossip.topology, {"ring", "exponential"});
  if (!(c.fault.slow_factor >= 1 && c.fault.slow_factor <= 100)) bad(where, "fault.slow_factor", "must be in [1, 100]");
  positive("strategy.bucket_mb", c.strategy.bucket_mb);
  if (!(c.strategy.bucket_mb <= 65536)) bad(where, "strategy.bucket_mb", "must be at most 65536 (64 GiB)");
  validateCompress(c, where);
  if (c.strategy.zero != 0 && c.strategy.name != "ddp")
    bad(where, "strategy.zero", "shards data parallelism: it needs strategy.name = \"ddp\", not \"" + c.strategy.name + "\"");
  if (c.strategy.zero != 0 && c.compress.codec != "none")
    bad(where, "strategy.zero", "reduce-scatters plain f32 gradients: it needs compress.codec = \"none\", not \"" +
                                    c.compress.codec + "\"");
  validateParallel(c, where);
  oneOf(where, "comm.algo", c.comm.algo, comm::algorithmChoices(comm::Op::allreduce));
  oneOf(where, "comm.allgather", c.comm.allgather, comm::algorithmChoices(comm::Op::allgather));
  oneOf(where, "comm.shm", c.comm.shm, {"auto", "on", "off"});
  if (!(c.checkpoint.every_minutes >= 0 && c.checkpoint.every_minutes <= 1e6))
    bad(where, "checkpoint.every_minutes", "must be in [0, 1e6] (0 = off)");
  if (c.logging.out_dir.empty()) bad(where, "logging.out_dir", "must not be empty");
}

}  // namespace

int64_t runSteps(double value, int64_t total_steps) {
  if (value >= 1 || value <= 0) return static_cast<int64_t>(value);
  return std::max<int64_t>(1, std::llround(value * static_cast<double>(total_steps)));
}

TrainConfig loadConfig(const std::string& path, const std::vector<std::string>& overrides) {
  TrainConfig c;
  if (!path.empty()) {
    toml::table t;
    try {
      t = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
      std::ostringstream os;
      os << path << ":" << e.source().begin.line << ":" << e.source().begin.column << ": " << e.description();
      throw ConfigError(os.str());
    }
    walk(c, t, "", path);
  }
  for (const auto& o : overrides) {
    const auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0) throw ConfigError("--set expects section.key=value, got '" + o + "'");
    const std::string key = o.substr(0, eq), value = o.substr(eq + 1);
    toml::table t;
    try {
      t = toml::parse("v = " + value);
    } catch (const toml::parse_error&) {
      t = toml::table{{"v", value}};  // a bare word is a string
    }
    apply(c, key, *t.get("v"), "--set");
  }
  validate(c, path.empty() ? "config" : path);
  return c;
}

std::string toToml(const TrainConfig& c) {
 std::string out, section;
  out += "seed = " + schema().at("seed").show(c) + "\n";
  for (const auto& [key, field] : schema()) {
    const auto dot = key.find('.');
    if (dot == std::string::npos) continue;
    const std::string sec = key.substr(0, dot);
    if (sec != section) {
      out += "\n[" + sec + "]\n";
      section = sec;
    }
    out += key.substr(dot + 1) + " = " + field.show(c) + "\n";
  }
  return out;
}

std::vector<std::string> configKeys() {
  std::vector<std::string> keys;
  for (const auto& kv : schema()) keys.push_back(kv.first);
  return keys;
}

}  // namespace lowcomm::train
