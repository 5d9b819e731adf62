#include "evaluate.h"

#include <algorithm>
#include <cmath>


namespace lowcomm::train {

torch::Tensor Criterion::mean(const torch::Tensor& logits, const torch::Tensor& targets) const {
  if (tp) return tp->loss(logits, targets, label_smoothing).mean();
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}),
                                              torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(label_smoothing));
}

std::pair<double, double> Criterion::sumAndCorrect(const torch::Tensor& logits, const torch::Tensor& targets) const {
  if (tp) return {tp->loss(logits, targets, 0.0).sum().item<double>(), static_cast<double>(tp->correct(logits, targets))};
  const double loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}),
                                                           torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                          .item<double>();
  return {loss, logits.argmax(-1).eq(targets).sum().item<double>()};
}

double bitsPerByte(double nats) { return nats / std::log(2.0); }

Eval evaluate(nn::Model& model, parallel::Strategy& strategy, comm::Communicator& dp, const data::Dataset& test,
              int64_t test_batch, uint64_t seed, const ScoreFn& score) {
  strategy.beforeEval();
  model.eval();
  torch::NoGradGuard no_grad;
  const int64_t shard = test.size() / dp.size();
  const int64_t batch = std::max<int64_t>(1, std::min(test_batch, shard));
  data::BatchLoader loader(test, dp.rank(), dp.size(), batch, seed, {}, /*shuffle=*/false, /*dropLast=*/false);
  loader.startEpoch(0);
  double correct = 0, loss = 0, count = 0;
  data::Batch b;
  while (loader.next(b)) {
    const auto [l, c] = score(b);
    loss += l, correct += c;
    count += static_cast<double>(b.y.numel());
  }
  model.train();
  double v[3] = {correct, loss, count};
  dp.allreduce(v, 3, comm::DType::f64, comm::ReduceOp::sum);
  return Eval{v[0] / std::max(1.0, v[2]), v[1] / std::max(1.0, v[2]), static_cast<int64_t>(v[2])};
}

}  // namespace lowcomm::train
