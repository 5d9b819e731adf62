#include "lowcomm/nn/factor_layers.h"

#include "lowcomm/base/error.h"

namespace lowcomm::nn {
void checkFactorShapes(const torch::Tensor& a, const torch::Tensor& b, int64_t rows, int64_t cols, const char* what) {
  LC_ENFORCE(a.defined() == b.defined(), what, ": set both factors or neither");
  if (!a.defined()) return;
  LC_ENFORCE(a.dim() == 2 && b.dim() == 2 && a.size(0) == rows && b.size(1) == cols && a.size(1) == b.size(0), what,
             ": factors ", a.sizes(), " x ", b.sizes(), " do not make a ", rows, " x ", cols, " weight");
}

bool FactorConv2dImpl::canFactor() const {
  return options.groups() == 1 && c10::get_if<torch::enumtype::kZeros>(&options.padding_mode()) &&
         c10::get_if<torch::ExpandingArray<2>>(&options.padding());
}

void FactorConv2dImpl::setFactors(torch::Tensor a, torch::Tensor b) {
  const auto k = options.kernel_size();
  const int64_t rows = options.out_channels(), cols = options.in_channels() * (*k)[0] * (*k)[1];
  checkFactorShapes(a, b, rows, cols, "FactorConv2d");
  LC_ENFORCE(!a.defined() || canFactor(), "FactorConv2d: grouped or non-zero-padded convolutions cannot factor");
  a_ = std::move(a);
  b_ = std::move(b);
}

torch::Tensor FactorConv2dImpl::forward(const torch::Tensor& x) {
  if (!factored()) return torch::nn::Conv2dImpl::forward(x);
  const auto k = options.kernel_size();
  const auto pad = *c10::get_if<torch::ExpandingArray<2>>(&options.padding());
  const int64_t r = b_.size(0);
  auto mid = torch::conv2d(x, b_.view({r, options.in_channels(), (*k)[0], (*k)[1]}), {}, options.stride(), *pad,
                           options.dilation());
  return torch::conv2d(mid, a_.view({options.out_channels(), r, 1, 1}), bias);
}

void FactorLinearImpl::setFactors(torch::Tensor a, torch::Tensor b) {
  checkFactorShapes(a, b, options.out_features(), options.in_features(), "FactorLinear");
  a_ = std::move(a);
  b_ = std::move(b);
}

torch::Tensor FactorLinearImpl::forward(const torch::Tensor& x) {
  if (!factored()) return torch::nn::LinearImpl::forward(x);
  return torch::nn::functional::linear(torch::nn::functional::linear(x, b_), a_, bias);
}

}  // namespace lowcomm::nn
