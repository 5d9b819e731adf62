// Random crop (with padding) and horizontal flip as one gather pass per sample.
#include "lowcomm/data/augment.h"

#include <ATen/Parallel.h>

#include <random>

#include "lowcomm/base/error.h"
#include "rng.h"

namespace lowcomm::data {

Augment Augment::standard(int64_t height) {
  Augment a;
  a.crop = true;
  a.pad = height >= 32 ? 4 : 2;
  a.flip = true;
  return a;
}

torch::Tensor augmentBatch(const torch::Tensor& x, const Augment& aug, const std::vector<float>& fill, uint64_t seed) {
  LC_ENFORCE(x.dim() == 4 && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
             "augmentBatch expects a contiguous float32 [B, C, H, W] tensor");
  const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  LC_ENFORCE_EQ(static_cast<int64_t>(fill.size()), C, "one fill value per channel");
  const int64_t pad = aug.crop ? aug.pad : 0;
  if (pad < 0 || pad >= std::min(H, W)) {
    throw ConfigError("augmentation: crop padding " + std::to_string(aug.pad) + " must be in [0, " +
                      std::to_string(std::min(H, W)) + ") for " + std::to_string(H) + "x" + std::to_string(W) +
                      " images");
  }

  // Draw all per-sample choices serially first, so the result does not depend on threading.
  struct Choice {
    int64_t dy, dx;
    bool flip;
  };
  std::vector<Choice> choice(static_cast<size_t>(B));
  std::mt19937_64 gen(seed);
  for (Choice& ch : choice) {
    ch.dy = pad > 0 ? static_cast<int64_t>(detail::uniformBelow(gen, 2 * pad + 1)) : pad;
    ch.dx = pad > 0 ? static_cast<int64_t>(detail::uniformBelow(gen, 2 * pad + 1)) : pad;
    ch.flip = aug.flip && (gen() >> 63) != 0;
  }

  torch::Tensor out = torch::empty_like(x);
  const float* src = x.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  const int64_t plane = H * W;
  at::parallel_for(0, B, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const Choice ch = choice[static_cast<size_t>(i)];
      for (int64_t c = 0; c < C; ++c) {
        const float* s = src + (i * C + c) * plane;
        float* d = dst + (i * C + c) * plane;
        const float f = fill[static_cast<size_t>(c)];
        // Output (y, x) = padded(y + dy, x' + dx) with x' = W-1-x when flipped, i.e. source
        // pixel (y + dy - pad, x' + dx - pad), or the fill when that lies in the padding.
        for (int64_t y = 0; y < H; ++y) {
          const int64_t sy = y + ch.dy - pad;
          float* drow = d + y * W;
          if (sy < 0 || sy >= H) {
            std::fill(drow, drow + W, f);
            continue;
          }
          const float* srow = s + sy * W;
          for (int64_t xo = 0; xo < W; ++xo) {
            const int64_t sx = (ch.flip ? W - 1 - xo : xo) + ch.dx - pad;
            drow[xo] = (sx >= 0 && sx < W) ? srow[sx] : f;
          }
        }
      }
    }
  });
  return out;
}

}  // namespace lowcomm::data
