// Conv2d and Linear layers that can run from low-rank factors W = A*B as two thin operations
// instead of materialising W (AB-training's factored forward; see low_rank.h).
//
// They are the LibTorch layers (as<torch::nn::Conv2d>() / as<torch::nn::Linear>() still find
// them, parameters and options are the same); models that want the factored forward register
// these instead. While factors are set (setFactors with defined tensors):
//  - FactorLinear:  y = (x Bᵀ) Aᵀ + bias                         (A [out x r], B [r x in])
//  - FactorConv2d:  y = conv1x1(conv_kxk(x, B as [r, in, kh, kw]), A as [out, r, 1, 1]) + bias,
//                   with the layer's stride, padding and dilation on the k x k conv.
// This equals the layer with W = A*B up to floating-point rounding. Without factors they behave
// exactly like the LibTorch layer (reading `weight`).
#pragma once

#include <torch/torch.h>

namespace lowcomm::nn {

// A layer of another kind that LowRankModel factorises as a Linear: its forward reads
// factorWeight() (the 2-D weight LowRankModel replaces by A*B), or, while setFactors got defined
// tensors, runs from the factors with the rest of its forward (bias, communication) unchanged.
// setFactors with undefined tensors returns to the weight. A layer whose canFactor() is false
// (an unsplit layer with no two-op form, e.g. a TorchScript module's Linear or Conv) only ever
// gets undefined factors: LowRankModel then always writes A*B into factorWeight().
//
// A split layer (a tensor-parallel shard) holds part `splitIndex()` of `splitParts()` of a
// larger weight W: splitDim() 0, its rows (a column-parallel Linear), or 1, its columns (a
// row-parallel Linear). LowRankModel then factorises the whole W = A*B (gatherSplit, a
// collective over the parts, puts the parts' weights together along splitDim, in part order) and
// gives the layer the matching part of one factor and all of the other: rows split, A's rows and
// all of B; columns split, all of A and B's columns. The part's weight is then exactly its A*B.
class FactorisableLinear {
 public:
  virtual ~FactorisableLinear() = default;
  virtual torch::Tensor& factorWeight() = 0;
  virtual void setFactors(torch::Tensor a, torch::Tensor b) = 0;
  virtual bool canFactor() const { return true; }
  virtual int splitDim() const { return -1; }  // -1: not split
  virtual int64_t splitParts() const { return 1; }
  virtual int64_t splitIndex() const { return 0; }
  virtual torch::Tensor gatherSplit(const torch::Tensor& part) { return part; }
};

// Throws lowcomm::Error unless a [rows x r] and b [r x cols] are both defined or both undefined.
void checkFactorShapes(const torch::Tensor& a, const torch::Tensor& b, int64_t rows, int64_t cols, const char* what);

class FactorConv2dImpl : public torch::nn::Conv2dImpl {
 public:
  using torch::nn::Conv2dImpl::Conv2dImpl;
  torch::Tensor forward(const torch::Tensor& x);
  // Whether this layer's options allow the two-conv form (zeros padding given as numbers, one group).
  bool canFactor() const;
  // Undefined tensors return to the weight-based forward. Throws lowcomm::Error for shapes that do
  // not match the weight or for a layer that cannot factor.
  void setFactors(torch::Tensor a, torch::Tensor b);
  bool factored() const { return a_.defined(); }

 private:
  torch::Tensor a_, b_;
};
TORCH_MODULE(FactorConv2d);

class FactorLinearImpl : public torch::nn::LinearImpl {
 public:
  using torch::nn::LinearImpl::LinearImpl;
  torch::Tensor forward(const torch::Tensor& x);
  void setFactors(torch::Tensor a, torch::Tensor b);
  bool factored() const { return a_.defined(); }

 private:
  torch::Tensor a_, b_;
};
TORCH_MODULE(FactorLinear);

}  // namespace lowcomm::nn
