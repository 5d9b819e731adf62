// Megatron-style tensor parallelism (Shoeybi et al., 2019) over a tensor-parallel communicator
// `tp` of T ranks: the building blocks a transformer's layers are split with.
//
// Contract:
// - copyToRegion (Megatron's f) is the identity forward and sums the gradient over `tp`
//   backward; reduceFromRegion (g) sums over `tp` forward and is the identity backward. Both
//   are collectives: every rank of `tp` calls them in the same order, in forward and backward.
// - ColumnParallelLinear(in, out): TP rank r holds rows [r out/T, (r+1) out/T) of W [out x in] and
//   of b; forward(x) = f(x) W_rᵀ + b_r, x replicated on the TP ranks, output the rank's slice of
//   the output features. RowParallelLinear(in, out): rank r holds columns [r in/T, (r+1) in/T) of
//   W and the whole bias; forward(x_r) = g(x_r W_rᵀ) + b with x_r the rank's slice of the input
//   features, output replicated. A column-parallel layer followed by a row-parallel one (an MLP,
//   attention's QKV and output projection) costs one allreduce forward and one backward.
// - Parameters of T ranks together equal the full layer's (loadFrom takes them out of one); the
//   results equal the full layer's up to the order of the floating-point sums.
// - A feature count that T does not divide is a ConfigError naming `parallel.tp`.
// - The layer keeps `tp` alive; its communicator must not be used by another thread meanwhile.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "lowcomm/comm/communicator.h"
#include "lowcomm/nn/factor_layers.h"

namespace lowcomm::parallel {

torch::Tensor copyToRegion(const torch::Tensor& x, comm::Communicator& tp);
torch::Tensor reduceFromRegion(const torch::Tensor& x, comm::Communicator& tp);

class ColumnParallelLinearImpl : public torch::nn::Module, public nn::FactorisableLinear {
 public:
  // init: torch::nn::Linear's default init of the full layer, sharded; false leaves the weights
  // uninitialised (for a loadFrom that follows) and draws nothing from torch's generator.
  ColumnParallelLinearImpl(int64_t in, int64_t out, std::shared_ptr<comm::Communicator> tp, bool bias = true,
                           bool init = true);
  torch::Tensor forward(const torch::Tensor& x);
  // Copies this rank's rows out of a full layer's weight [out x in] and bias [out].
  void loadFrom(const torch::Tensor& weight, const torch::Tensor& bias);
  torch::Tensor weight, bias;  // [out/T x in], [out/T] (undefined without bias)
  // AB-training factorises the whole layer W = A B: this rank holds A's rows A_r and all of B,
  // and runs y = f(x Bᵀ) A_rᵀ + b_r (the allreduce of f carries r features per token, not in).
  torch::Tensor& factorWeight() override { return weight; }
  void setFactors(torch::Tensor a, torch::Tensor b) override;
  int splitDim() const override { return tp_->size() > 1 ? 0 : -1; }  // one part: not split
  int64_t splitParts() const override { return tp_->size(); }
  int64_t splitIndex() const override { return tp_->rank(); }
  torch::Tensor gatherSplit(const torch::Tensor& part) override;

 private:
  torch::Tensor a_, b_;
  std::shared_ptr<comm::Communicator> tp_;
  int64_t in_, out_;
};
TORCH_MODULE(ColumnParallelLinear);

class RowParallelLinearImpl : public torch::nn::Module, public nn::FactorisableLinear {
 public:
  RowParallelLinearImpl(int64_t in, int64_t out, std::shared_ptr<comm::Communicator> tp, bool bias = true,
                        bool init = true);
  torch::Tensor forward(const torch::Tensor& x);
  // Copies this rank's columns out of a full layer's weight [out x in], and the whole bias [out].
  void loadFrom(const torch::Tensor& weight, const torch::Tensor& bias);
  torch::Tensor weight, bias;  // [out x in/T], [out] (undefined without bias)
  // AB-training factorises the whole layer W = A B: this rank holds all of A and B's columns
  // B_r, and runs y = g(x_r B_rᵀ) Aᵀ + b (the allreduce of g carries r features per token).
  torch::Tensor& factorWeight() override { return weight; }
  void setFactors(torch::Tensor a, torch::Tensor b) override;
  int splitDim() const override { return tp_->size() > 1 ? 1 : -1; }
  int64_t splitParts() const override { return tp_->size(); }
  int64_t splitIndex() const override { return tp_->rank(); }
  torch::Tensor gatherSplit(const torch::Tensor& part) override;

 private:
  torch::Tensor a_, b_;
  std::shared_ptr<comm::Communicator> tp_;
  int64_t in_, out_;
};
TORCH_MODULE(RowParallelLinear);

}  // namespace lowcomm::parallel
