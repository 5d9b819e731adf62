// A model's parameters and f32 buffers as one flat f32 vector (private to parallel): what the
// strategies that move whole weights (gossip, ssp) send.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace lowcomm::parallel {

class FlatState {
 public:
  explicit FlatState(torch::nn::Module& model) {
    for (auto& p : model.parameters()) tensors_.push_back(p.detach());
    for (auto& b : model.buffers())
      if (b.scalar_type() == torch::kFloat32) tensors_.push_back(b);
    for (const auto& t : tensors_) numel_ += t.numel();
  }
  int64_t numel() const { return numel_; }
  // Copies the weights into `flat` (numel() elements).
  void pack(torch::Tensor& flat) const {
    int64_t off = 0;
    for (const auto& t : tensors_) {
      flat.narrow(0, off, t.numel()).copy_(t.reshape({-1}));
      off += t.numel();
    }
  }
  // Copies `flat` into the weights.
  void unpack(const torch::Tensor& flat) {
    int64_t off = 0;
    for (auto& t : tensors_) {
      t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  }

 private:
  std::vector<torch::Tensor> tensors_;  // parameters, then f32 buffers
  int64_t numel_ = 0;
};

}  // namespace lowcomm::parallel
