// A model split over the ranks of a tensor-parallel communicator `tp` (Megatron-LM, Shoeybi et
// al. 2019), built from the full model a single process would train.
//
// Contract (model.name = "gpt", the only model split so far):
// - Each block's attention is split by heads: QKV column-parallel (rank r holds the query, key and
//   value rows of heads [r H/T, (r+1) H/T)), the output projection row-parallel; the MLP's fc1
//   column-parallel, fc2 row-parallel: one allreduce forward and one backward per sub-block. The
//   token embedding is vocab-parallel (rank r holds rows [r V/T, (r+1) V/T) and the lookups are
//   summed over `tp`), and so is the head (its own weight's rows, or the tied embedding's), so
//   forward() returns this rank's slice of the logits [B, T, V/T], classes [vocabStart(),
//   vocabStart() + V/T). Position embedding and LayerNorms are replicated.
// - Parameters keep the full model's names (named_parameters() is the full model's list, same
//   order) with sharded shapes; the same tp_rank on two replicas has the same shapes.
// - Built from `full` (same spec, any weights): the shards are exactly `full`'s values, so a run
//   starts where the single-process run starts. forward() and gradients equal the full model's up
//   to the order of float sums; replicated parameters get identical gradients on every TP rank.
// - Heads, the MLP width (4 dim) or the vocabulary not divisible by T: ConfigError naming
//   parallel.tp. Another model: ConfigError naming model.name.
// - Collectives over `tp` (forward, backward, loss, correct, gatherInto, clipGradNorm): every
//   rank of `tp` calls them in the same order. The model keeps `tp` alive.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>

#include "lowcomm/comm/communicator.h"
#include "lowcomm/nn/models.h"

namespace lowcomm::parallel {

class TensorParallelModel : public nn::Model {
 public:
  using nn::Model::Model;
  // Per-position cross-entropy of this rank's logits slice against the full targets (f32,
  // label smoothing as torch's cross_entropy): see vocab_parallel.h.
  virtual torch::Tensor loss(const torch::Tensor& logits, const torch::Tensor& targets, double label_smoothing) = 0;
  // Positions whose target is the argmax over the whole vocabulary.
  virtual int64_t correct(const torch::Tensor& logits, const torch::Tensor& targets) = 0;
  // Whether parameter `name` is split over `tp` (false: replicated on every TP rank).
  virtual bool sharded(const std::string& name) const = 0;
  // Copies the gathered full weights into `full` (same spec as the one this was built from).
  virtual void gatherInto(nn::Model& full) = 0;
  // torch::nn::utils::clip_grad_norm_ over the full model: the global L2 norm of every shard's
  // gradient (replicated parameters counted once), scaling .grad by max_norm / (norm + 1e-6)
  // when that is below 1. Returns the norm.
  virtual double clipGradNorm(double max_norm) = 0;
  virtual comm::Communicator& tp() = 0;
};

std::shared_ptr<TensorParallelModel> makeTensorParallel(const nn::Model& full, std::shared_ptr<comm::Communicator> tp);

}  // namespace lowcomm::parallel
