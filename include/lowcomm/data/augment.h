// Batch augmentation: random crop with padding and horizontal flip (torchvision's
// RandomCrop(size, padding) followed by RandomHorizontalFlip(0.5)).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace lowcomm::data {

struct Augment {
  bool crop = false;  // crop an HxW window at a uniform offset from the image padded by `pad`
  int pad = 0;        // padding on every side; the padded area holds raw-black pixels
  bool flip = false;  // mirror left-right with probability 1/2
  bool enabled() const { return (crop && pad > 0) || flip; }
  // Usual recipe: crop with pad 4 for images >= 32 px high, pad 2 below; flip on.
  static Augment standard(int64_t height);
};

// Returns a new [B, C, H, W] tensor; `x` must be float32 contiguous [B, C, H, W].
// `fill[c]` is the value padding takes in channel c (Dataset::blackValue(), so padding matches
// zero-padding before normalisation). Per sample, in order, draws the crop offsets (dy, dx) in
// [0, 2 pad] and then the flip bit, from std::mt19937_64(seed); the result depends only on
// (x, aug, fill, seed). Throws ConfigError for pad < 0 or pad >= min(H, W).
torch::Tensor augmentBatch(const torch::Tensor& x, const Augment& aug, const std::vector<float>& fill,
                           uint64_t seed);

}  // namespace lowcomm::data
