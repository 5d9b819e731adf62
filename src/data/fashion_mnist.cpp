// Fashion-MNIST from the gzip idx files Debian's dataset-fashion-mnist installs.
#include "idx_file.h"
#include "lowcomm/base/error.h"
#include "lowcomm/data/dataset.h"

namespace lowcomm::data {
namespace {

constexpr int kClasses = 10;
constexpr int64_t kSide = 28;

// Prefers <dir>/<name>.gz, falls back to the uncompressed <dir>/<name>.
std::string locate(const std::string& dir, const std::string& name) {
  const std::string base = (dir.empty() ? std::string(".") : dir) + "/" + name;
  if (detail::fileExists(base + ".gz")) return base + ".gz";
  if (detail::fileExists(base)) return base;
  throw DataError("fashion-mnist: missing file " + base + ".gz (nor uncompressed " + name +
                  "); install Debian's dataset-fashion-mnist or point --data-dir at the idx files");
}

}  // namespace

Dataset loadFashionMnist(const std::string& dir, bool train) {
  const std::string prefix = train ? "train" : "t10k";
  const std::string imagesPath = locate(dir, prefix + "-images-idx3-ubyte");
  const std::string labelsPath = locate(dir, prefix + "-labels-idx1-ubyte");

  detail::IdxArray images = detail::readIdxFile(imagesPath, 3);
  detail::IdxArray labels = detail::readIdxFile(labelsPath, 1);

  const int64_t n = images.dims[0];
  if (images.dims[1] != kSide || images.dims[2] != kSide) {
    throw DataError(imagesPath + ": images are " + std::to_string(images.dims[1]) + "x" +
                    std::to_string(images.dims[2]) + ", Fashion-MNIST has 28x28");
  }
  if (labels.dims[0] != n) {
    throw DataError(imagesPath + " holds " + std::to_string(n) + " images but " + labelsPath + " holds " +
                    std::to_string(labels.dims[0]) + " labels");
  }
  for (int64_t i = 0; i < n; ++i) {
    if (labels.data[i] >= kClasses) {
      throw DataError(labelsPath + ": label " + std::to_string(labels.data[i]) + " at index " + std::to_string(i) +
                      " is outside 0..9");
    }
  }

  Dataset ds;
  ds.name = "fashion-mnist";
  ds.classes = kClasses;
  ds.norm = kFashionMnistNorm;
  // from_blob does not own the vectors; both results are fresh tensors made before they die.
  ds.images = normalizeImages(torch::from_blob(images.data.data(), {n, 1, kSide, kSide}, torch::kUInt8), ds.norm);
  ds.labels = torch::from_blob(labels.data.data(), {n}, torch::kUInt8).to(torch::kInt64);
  return ds;
}

}  // namespace lowcomm::data
