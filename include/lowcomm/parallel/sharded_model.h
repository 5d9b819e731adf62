// A model split over a tensor-parallel communicator `tp` (Megatron-LM, Shoeybi et al. 2019) and
// into pipeline stages over `pp` (GPipe, Huang et al. 2019), built from the full model a single
// process would train.
//
// Contract (model.name = "gpt", the only model split so far):
// - Tensor parallelism over T ranks: each block's attention is split by heads, QKV
//   column-parallel (rank r holds the query, key and value rows of heads [r H/T, (r+1) H/T)), the
//   output projection row-parallel; the MLP's fc1 column-parallel, fc2 row-parallel: one
//   allreduce forward and one backward per sub-block. The token embedding is vocab-parallel (rank
//   r holds rows [r V/T, (r+1) V/T) and the lookups are summed over `tp`), and so is the head (its
//   own weight's rows, or the tied embedding's), so the last stage's forward() returns this rank's
//   slice of the logits [B, T, V/T], classes [r V/T, (r+1) V/T). Position embedding and
//   LayerNorms are replicated. T = 1 is a model without splits.
// - Pipeline stages over P ranks: the units [embedding (stem, pos), block 0, ..., block L-1, head
//   (norm, head)] are cut into P contiguous stages, by parameter count (stageBounds) unless the
//   caller gives the boundaries (e.g. from measured unit times, stage_balance.h); stage 0 takes
//   tokens [B, T], the others activations [B, T, dim]; every stage but the last returns
//   activations [B, T, dim]. A tied head needs the embedding on the last stage: model.tied with
//   P > 1 is a ConfigError naming parallel.pp.
// - Interleaved (virtual) stages (Megatron-LM's virtual pipeline, Narayanan et al. 2021): with
//   v > 1 chunks per rank the units are cut into P v contiguous model chunks and rank r holds
//   chunks r, r + P, ..., r + (v - 1) P (its local chunks 0..v-1); chunk c feeds chunk c + 1 on
//   rank (r + 1) mod P. forwardChunk(k, x) runs local chunk k; forward() is the whole stage and
//   only defined for v = 1. v = 1 is the plain contiguous cut above.
// - Parameters keep the full model's names ("blocks.3.attn.qkv.weight", same order) with sharded
//   shapes; a stage holds only its units' parameters.
// - Built from `full` (same spec, any weights): the shards are exactly `full`'s values, so a run
//   starts where the single-process run starts; forward and gradients equal the full model's up
//   to the order of float sums; replicated parameters get identical gradients on every TP rank.
// - Heads or the vocabulary not divisible by T: ConfigError naming parallel.tp and the model key;
//   more stages (chunks) than units: ConfigError naming parallel.pp (parallel.virtual_stages); another model: ConfigError naming
//   model.name.
// - Collectives over `tp` (forward, backward, loss, correct) and over `tp` and `pp` (gatherInto,
//   clipGradNorm): every rank calls them in the same order. The model keeps both alive.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lowcomm/comm/communicator.h"
#include "lowcomm/nn/models.h"

namespace lowcomm::parallel {

class ShardedModel : public nn::Model {
 public:
  using nn::Model::Model;
  // Last stage: per-position cross-entropy of this rank's logits slice against the full targets
  // (f32, label smoothing as torch's cross_entropy): see vocab_parallel.h.
  virtual torch::Tensor loss(const torch::Tensor& logits, const torch::Tensor& targets, double label_smoothing) = 0;
  // Last stage: positions whose target is the argmax over the whole vocabulary.
  virtual int64_t correct(const torch::Tensor& logits, const torch::Tensor& targets) = 0;
  // Whether parameter `name` is split over `tp` (false: replicated on every TP rank).
  virtual bool sharded(const std::string& name) const = 0;
  // Copies the gathered full weights into `full` (same spec as the one this was built from), on
  // every rank.
  virtual void gatherInto(nn::Model& full) = 0;
  // torch::nn::utils::clip_grad_norm_ over the full model: the global L2 norm of every shard's
  // gradient (replicated parameters counted once), scaling .grad by max_norm / (norm + 1e-6)
  // when that is below 1. Returns the norm.
  virtual double clipGradNorm(double max_norm) = 0;
  // The full model's squared gradient norm from this rank's sums of squares over its split and
  // its replicated parameters (collective over tp and pp; replicated parameters counted once).
  virtual double reduceSquaredNorm(double split_sq, double replicated_sq) = 0;
  virtual comm::Communicator& tp() = 0;
  virtual int stage() const = 0;
  virtual int stages() const = 0;
  bool firstStage() const { return stage() == 0; }
  bool lastStage() const { return stage() == stages() - 1; }
  // The activations a stage passes on for tokens [B, T]: [B, T, dim].
  virtual std::vector<int64_t> activationShape(const torch::Tensor& tokens) const = 0;
  // Model chunks this rank holds (v; 1 without interleaving).
  virtual int chunks() const = 0;
  // Units [embedding, blocks..., head] of local chunk k: [first, last).
  virtual std::pair<int, int> chunkUnits(int k) const = 0;
  // Units this stage holds when v = 1 (chunk 0's with v > 1): chunkUnits(0).
  std::pair<int, int> units() const { return chunkUnits(0); }
  // Local chunk k's position in the whole pipeline (k P + stage()): 0 takes tokens, P v - 1
  // returns the logits.
  int globalChunk(int k) const { return k * stages() + stage(); }
  // Every chunk's first unit, then the number of units (P v + 1 entries): chunk c is
  // [b[c], b[c + 1]), on rank c mod P.
  virtual std::vector<int> boundaries() const = 0;
  // Runs local chunk k (its units in order) on tokens or activations.
  virtual torch::Tensor forwardChunk(int k, torch::Tensor x) = 0;
  // Runs one of this stage's units alone: the embedding takes tokens [B, T], a block activations
  // [B, T, dim], the head (final norm and head) activations, returning this rank's logits slice.
  // forwardChunk() is the composition of the chunk's units. Another stage's unit: an error naming both.
  virtual torch::Tensor forwardUnit(int unit, torch::Tensor x) = 0;
};

// `pp` null: one stage. `bounds` (P v + 1 entries, 0 first, strictly increasing, the number of
// units last) cut the chunks; empty: stageBounds(unitParameters(full), P v). Bounds that do not
// cut the units into P v chunks: ConfigError naming parallel.pp (parallel.virtual_stages when
// v > 1).
std::shared_ptr<ShardedModel> makeShardedModel(const nn::Model& full, std::shared_ptr<comm::Communicator> tp,
                                               std::shared_ptr<comm::Communicator> pp = nullptr,
                                               std::vector<int> bounds = {}, int virtual_stages = 1);

// Parameters of each unit [embedding, block 0, ..., block L-1, head] of a gpt.
std::vector<int64_t> unitParameters(const nn::Model& full);

// Cuts units of the given weights into `stages` contiguous non-empty parts minimising the
// heaviest part (among such cuts, earlier stages take as many units as fit); returns the
// stages + 1 boundaries, 0 first and weights.size() last. ConfigError naming parallel.pp when
// there are fewer units than stages.
std::vector<int> stageBounds(const std::vector<int64_t>& weights, int stages);

}  // namespace lowcomm::parallel
