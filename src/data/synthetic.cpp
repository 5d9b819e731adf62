// Seeded synthetic classification data for tests and benchmarks (no files needed).
#include <ATen/CPUGeneratorImpl.h>

#include "lowcomm/base/error.h"
#include "lowcomm/data/dataset.h"
#include "rng.h"

namespace lowcomm::data {
namespace {

// Class means are drawn on a grid 4x coarser than the image and upsampled, so they are smooth
// enough for convolutions and pooling to pick up; kSignal sets the mean's per-pixel std
// relative to the unit noise (small enough that one pixel says little, large enough that a
// whole image is nearly unambiguous).
constexpr int64_t kBlock = 4;
constexpr double kSignal = 0.4;

}  // namespace

Dataset makeSynthetic(int64_t n, int channels, int height, int width, int classes, uint64_t seed, uint64_t split) {
  if (n < 1 || channels < 1 || height < 1 || width < 1 || classes < 1) {
    throw ConfigError("synthetic data set: n, channels, height, width and classes must be >= 1 (got n=" +
                      std::to_string(n) + ", " + std::to_string(channels) + "x" + std::to_string(height) + "x" +
                      std::to_string(width) + ", classes=" + std::to_string(classes) + ")");
  }
  torch::NoGradGuard noGrad;
  at::Generator meansGen = at::detail::createCPUGenerator(detail::mixSeed(seed, {detail::kTagSynthMeans}));
  at::Generator sampleGen = at::detail::createCPUGenerator(detail::mixSeed(seed, {detail::kTagSynthSamples, split}));

  const int64_t gh = (height + kBlock - 1) / kBlock;
  const int64_t gw = (width + kBlock - 1) / kBlock;
  torch::Tensor means = torch::randn({classes, channels, gh, gw}, meansGen, torch::kFloat32)
                            .repeat_interleave(kBlock, 2)
                            .repeat_interleave(kBlock, 3)
                            .narrow(2, 0, height)
                            .narrow(3, 0, width)
                            .mul(kSignal);

  Dataset ds;
  ds.name = "synthetic";
  ds.classes = classes;
  ds.norm = Normalization{std::vector<float>(channels, 0.0f), std::vector<float>(channels, 1.0f)};
  ds.labels = torch::randint(0, classes, {n}, sampleGen, torch::kInt64);
  ds.images = torch::randn({n, channels, height, width}, sampleGen, torch::kFloat32);
  ds.images.add_(means.index_select(0, ds.labels));
  return ds;
}

}  // namespace lowcomm::data
