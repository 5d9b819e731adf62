// The loss a run trains on and its test evaluation (private to lowcomm_train), for a full model
// or a sharded one (whose logits are vocabulary slices over the tensor-parallel ranks: the loss
// and the argmax are computed without gathering the logits).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <utility>

#include "lowcomm/comm/communicator.h"
#include "lowcomm/data/dataset.h"
#include "lowcomm/data/loader.h"
#include "lowcomm/nn/models.h"
#include "lowcomm/parallel/strategy.h"
#include "lowcomm/parallel/sharded_model.h"

namespace lowcomm::train {

struct Criterion {
  double label_smoothing = 0;
  parallel::ShardedModel* tp = nullptr;  // null: the logits are full

  // Mean cross-entropy of logits [..., classes] against targets [...] (one sample per image, one
  // per token for a language model), with label smoothing.
  torch::Tensor mean(const torch::Tensor& logits, const torch::Tensor& targets) const;
  // Summed cross-entropy without smoothing, and the number of correct argmax predictions.
  std::pair<double, double> sumAndCorrect(const torch::Tensor& logits, const torch::Tensor& targets) const;
};

struct Eval {
  double accuracy = 0, loss = 0;  // language models: per token (next-byte accuracy, nats)
  int64_t samples = 0;
};

// A byte-level language model's loss per token (nats) in bits per byte.
double bitsPerByte(double nats);

// A batch's summed loss and correct predictions, on every rank of a model replica.
using ScoreFn = std::function<std::pair<double, double>(const data::Batch&)>;

// Every data-parallel replica evaluates its shard of the test set (batches of at most
// `test_batch`) with `score`; the sums are combined over `dp`. The tensor-parallel ranks and
// pipeline stages of one replica evaluate the same shard together.
Eval evaluate(nn::Model& model, parallel::Strategy& strategy, comm::Communicator& dp, const data::Dataset& test,
              int64_t test_batch, uint64_t seed, const ScoreFn& score);

}  // namespace lowcomm::train
