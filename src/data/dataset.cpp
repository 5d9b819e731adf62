// Dataset helpers, normalisation and the name -> loader registry.
#include <functional>

#include "lowcomm/base/error.h"
#include "lowcomm/data/dataset.h"

namespace lowcomm::data {
namespace {

using Loader = std::function<Dataset(const std::string& dir, bool train, uint64_t seed, const TextOptions& text)>;

struct Entry {
  const char* name;
  Loader load;
};

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
      {"fashion-mnist",
       [](const std::string& dir, bool train, uint64_t, const TextOptions&) {
         return loadFashionMnist(dir.empty() ? kFashionMnistDefaultDir : dir, train);
       }},
      {"cifar10",
       [](const std::string& dir, bool train, uint64_t, const TextOptions&) { return loadCifar10(dir, train); }},
      {"synthetic",
       [](const std::string&, bool train, uint64_t seed, const TextOptions&) {
         return makeSynthetic(train ? 8192 : 2048, 1, 28, 28, 10, seed, train ? 0 : 1);
       }},
      {"text",
       [](const std::string& dir, bool train, uint64_t, const TextOptions& text) {
         return loadTextCorpus(dir, text.glob, train, text.seq_len);
       }},
  };
  return entries;
}

}  // namespace

Dataset Dataset::take(int64_t n) const {
  Dataset out = *this;
  const int64_t k = std::max<int64_t>(0, std::min(n, size()));
  out.images = images.narrow(0, 0, k);
  out.labels = labels.narrow(0, 0, k);
  return out;
}

std::vector<float> Dataset::blackValue() const {
  std::vector<float> v(norm.mean.size());
  for (size_t c = 0; c < v.size(); ++c) v[c] = -norm.mean[c] / norm.stdev[c];
  return v;
}

torch::Tensor normalizeImages(const torch::Tensor& pixels, const Normalization& norm) {
  LC_ENFORCE(pixels.dim() == 4 && pixels.scalar_type() == torch::kUInt8, "expected uint8 [N, C, H, W] pixels");
  const int64_t c = pixels.size(1);
  LC_ENFORCE(static_cast<int64_t>(norm.mean.size()) == c && static_cast<int64_t>(norm.stdev.size()) == c,
             "normalisation has ", norm.mean.size(), " means and ", norm.stdev.size(), " stdevs for ", c,
             " channels");
  // (x/255 - m)/s computed as x * scale + shift: one multiply-add pass after the conversion.
  std::vector<float> scale(c), shift(c);
  for (int64_t i = 0; i < c; ++i) {
    LC_ENFORCE(norm.stdev[i] > 0.0f, "normalisation stdev of channel ", i, " is ", norm.stdev[i]);
    scale[i] = 1.0f / (255.0f * norm.stdev[i]);
    shift[i] = -norm.mean[i] / norm.stdev[i];
  }
  torch::NoGradGuard noGrad;
  torch::Tensor out = pixels.to(torch::kFloat32).contiguous();
  const auto view = std::vector<int64_t>{1, c, 1, 1};
  out.mul_(torch::tensor(scale).view(view)).add_(torch::tensor(shift).view(view));
  return out;
}

std::vector<std::string> datasetNames() {
  std::vector<std::string> names;
  for (const Entry& e : registry()) names.push_back(e.name);
  return names;
}

Dataset loadDataset(const std::string& name, const std::string& dir, bool train, uint64_t seed,
                    const TextOptions& text) {
  for (const Entry& e : registry()) {
    if (name == e.name) return e.load(dir, train, seed, text);
  }
  std::string valid;
  for (const Entry& e : registry()) valid += (valid.empty() ? "" : ", ") + std::string(e.name);
  throw ConfigError("unknown data set '" + name + "'; valid names: " + valid);
}

}  // namespace lowcomm::data
