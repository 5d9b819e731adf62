// Rules across config sections. Single-key ranges and choices are declared with the keys
// (config_keys.cpp, the strategies' specs); what remains relates keys of different sections.
#include <algorithm>
#include <cmath>
#include <string>

#include "config_schema.h"

namespace lowcomm::train {

namespace {

using schema::KeyError;

void modelAndData(const TrainConfig& c) {
  if (c.model.dim % c.model.heads != 0)
    throw KeyError("model.heads", std::to_string(c.model.heads) + " does not divide model.dim " + std::to_string(c.model.dim));
  if ((c.model.name == "torchscript") != !c.model.path.empty())
    throw KeyError("model.path", c.model.path.empty() ? "model.name = \"torchscript\" needs the module file (torch.jit.save)"
                                                      : "is only for model.name = \"torchscript\", not '" + c.model.name + "'");
  const bool text = c.data.dataset == "text", gpt = c.model.name == "gpt";
  if (text != gpt)
    throw KeyError(text ? "model.name" : "data.dataset",
                   text ? "'" + c.model.name + "' is an image model; the text data set needs model.name = \"gpt\""
                        : "model 'gpt' is a language model; it needs data.dataset = \"text\", not '" + c.data.dataset + "'");
  if (text && c.model.vocab != 256)
    throw KeyError("model.vocab", "the text data set has 256 byte tokens, got " + std::to_string(c.model.vocab));
  if (text && c.data.augment) throw KeyError("data.augment", "image augmentation does not apply to the text data set");
  if (text && c.data.glob.empty()) throw KeyError("data.glob", "must not be empty (\"*\" takes every file)");
  if (!(c.schedule.min_lr <= c.optimizer.lr)) throw KeyError("schedule.min_lr", "must be in [0, optimizer.lr]");
}

// DGC's momentum correction moves momentum into the compressor (Lin et al. 2018, sec. 3.2):
// optimizer momentum on top would apply it twice.
void codecAndOptimizer(const TrainConfig& c) {
  const auto& z = c.compress;
  const std::string memory = z.memory == "default" ? compress::defaultMemory(z.codec) : z.memory;
  if (memory == "dgc" && c.optimizer.name == "sgd" && c.optimizer.momentum > 0)
    throw KeyError("compress.memory", "is dgc, which applies momentum itself (momentum correction); set optimizer.momentum = 0");
  // Error feedback needs a contractive compressor: QSGD's error is bounded only by
  // min(B/s², √B/s)·||x||² per block (Alistarh et al., Lemma 3.1); at 1 or more the residual can
  // grow every step (4-bit, block 256 diverged on the gpt's outer gradient).
  if (memory == "residual" && z.codec == "qsgd") {
    const double s = static_cast<double>(z.codec_params.levels), b = static_cast<double>(z.codec_params.block);
    const double bound = std::min(b / (s * s), std::sqrt(b) / s);
    if (bound >= 1)
      throw KeyError("compress.memory", "residual over qsgd with levels " + std::to_string(z.codec_params.levels) +
                                            " and block " + std::to_string(z.codec_params.block) +
                                            " is not contractive (error bound min(B/s², √B/s) = " +
                                            std::to_string(bound) + " >= 1): error feedback would grow; use a block "
                                            "below levels² or memory = \"none\"");
  }
  if (c.optimizer.sign && c.optimizer.name != "sgd")
    throw KeyError("optimizer.sign", "is an sgd option (signSGD), not one of '" + c.optimizer.name + "'");
}

std::string acceptingZero(const parallel::StrategyRegistry& r) {
  std::string names;
  for (const auto& s : r.specs())
    if (s.accepts_zero) names += (names.empty() ? "\"" : " or \"") + s.name + "\"";
  return names;
}

void zeroStage(const TrainConfig& c, const parallel::StrategySpec& spec) {
  if (c.strategy.zero == 0) return;
  if (!spec.accepts_zero)
    throw KeyError("strategy.zero", "shards data parallelism: it needs strategy.name = " + acceptingZero(*c.strategies) +
                                        ", not \"" + c.strategy.name + "\"");
  if (c.compress.codec != "none")
    throw KeyError("strategy.zero", "reduce-scatters plain f32 gradients: it needs compress.codec = \"none\", not \"" +
                                        c.compress.codec + "\"");
}

// Interleaved 1F1B (Narayanan et al., 2021): v >= 2 chunks per rank, micro-batches in groups of
// pp, and a strategy whose forward is the model's.
void virtualStages(const TrainConfig& c, const parallel::StrategySpec& spec) {
  const auto& p = c.parallel;
  if (p.schedule != "interleaved") {
    if (p.virtual_stages != 1)
      throw KeyError("parallel.virtual_stages", "splits each rank's stage into chunks for parallel.schedule = \"interleaved\" only");
    return;
  }
  if (p.pp < 2) throw KeyError("parallel.schedule", "\"interleaved\" runs a pipeline (parallel.pp > 1)");
  if (p.virtual_stages < 2)
    throw KeyError("parallel.virtual_stages", "\"interleaved\" needs at least 2 model chunks per pipeline rank");
  if (p.micro_batches % p.pp != 0)
    throw KeyError("parallel.micro_batches", "\"interleaved\" runs micro-batches in groups of parallel.pp = " +
                                                 std::to_string(p.pp) + ": " + std::to_string(p.micro_batches) + " is not a multiple");
  if (!spec.accepts_interleaved)
    throw KeyError("parallel.virtual_stages", "strategy \"" + spec.name + "\" rebuilds each stage's weights in one forward; run it with "
                                              "parallel.schedule = \"1f1b\" or \"gpipe\"");
}

// What runs on a model-parallel grid: the gpt model, and on the data-parallel axis every strategy.
void grid(const TrainConfig& c) {
  const auto& p = c.parallel;
  if (p.pp == 1 && p.balance != "params") throw KeyError("parallel.balance", "cuts pipeline stages (parallel.pp > 1)");
  if (p.pp == 1 && p.micro_batches != 1)
    throw KeyError("parallel.micro_batches",
                   "splits a pipeline's batch (parallel.pp > 1); without a pipeline use strategy.accumulation");
  const int64_t replica_batch = c.data.batch_size * p.tp * p.pp;  // what one pipeline takes per step
  if (p.pp > 1 && replica_batch % p.micro_batches != 0)
    throw KeyError("parallel.micro_batches", std::to_string(p.micro_batches) + " micro-batches do not divide a pipeline's batch of " +
                                                 std::to_string(replica_batch) + " (data.batch_size x parallel.tp x parallel.pp)");
  if (p.tp == 1 && p.pp == 1) return;
  if (c.model.name != "gpt")
    throw KeyError(p.tp > 1 ? "parallel.tp" : "parallel.pp",
                   "splits the layers of model.name = \"gpt\"; \"" + c.model.name + "\" runs with parallel.tp = parallel.pp = 1");
}

}  // namespace

void validateAcrossSections(const TrainConfig& c) {
  const auto& spec = c.strategies->at(c.strategy.name);
  modelAndData(c);
  codecAndOptimizer(c);
  zeroStage(c, spec);
  virtualStages(c, spec);
  grid(c);
}

}  // namespace lowcomm::train
