// Cross-entropy over a vocabulary split across the ranks of a tensor-parallel communicator
// (Megatron's vocab-parallel cross-entropy): no rank ever holds the full logits.
//
// Contract:
// - `logits` [..., V/T] is this rank's slice of the vocabulary, classes [start, start + V/T) of V,
//   `targets` [...] (int64) the full class index, the same on every rank of `tp`.
// - vocabParallelCrossEntropy returns the per-position loss [...] (f32) that
//   torch::nn::functional::cross_entropy with `label_smoothing` and reduction none computes on the
//   full logits, up to the order of float sums; its gradient flows into `logits` only. Forward costs
//   two allreduces over `tp` (a max, then the sums), backward none.
// - vocabParallelCorrect counts positions whose target has the largest logit over the whole
//   vocabulary (argmax == target; a tie with another class counts as correct). Two allreduces.
// - Both are collectives: every rank of `tp` calls them with the same shapes.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "lowcomm/comm/communicator.h"

namespace lowcomm::parallel {

torch::Tensor vocabParallelCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets, int64_t start,
                                        int64_t vocab, comm::Communicator& tp, double label_smoothing = 0.0);

int64_t vocabParallelCorrect(const torch::Tensor& logits, const torch::Tensor& targets, int64_t start,
                             comm::Communicator& tp);

}  // namespace lowcomm::parallel
