// CIFAR-10 "binary version": records of 1 label byte + 3072 pixel bytes (R, G, B 32x32 planes).
#include "idx_file.h"
#include "lowcomm/base/error.h"
#include "lowcomm/data/dataset.h"

namespace lowcomm::data {
namespace {

constexpr int kClasses = 10;
constexpr int64_t kPixels = 3 * 32 * 32;
constexpr int64_t kRecord = 1 + kPixels;

std::vector<std::string> fileNames(bool train) {
  if (!train) return {"test_batch.bin"};
  std::vector<std::string> names;
  for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  return names;
}

// Accepts either the folder holding the .bin files or the one the tarball was unpacked in.
std::string resolveDir(const std::string& dir, const std::string& probe) {
  const std::string nested = dir + "/cifar-10-batches-bin";
  if (!detail::fileExists(dir + "/" + probe) && detail::fileExists(nested + "/" + probe)) return nested;
  return dir;
}

}  // namespace

Dataset loadCifar10(const std::string& dir, bool train) {
  if (dir.empty()) throw ConfigError("cifar10: no data directory given (--data-dir holding data_batch_1.bin...)");
  const std::vector<std::string> names = fileNames(train);
  const std::string root = resolveDir(dir, names.front());

  std::vector<uint8_t> all;
  for (const std::string& name : names) {
    const std::string path = root + "/" + name;
    if (!detail::fileExists(path)) {
      throw DataError("cifar10: missing file " + path + " (expected data_batch_1..5.bin and test_batch.bin)");
    }
    std::vector<uint8_t> bytes = detail::readWholeFile(path);
    if (bytes.empty() || bytes.size() % kRecord != 0) {
      throw DataError(path + ": size " + std::to_string(bytes.size()) +
                      " bytes is not a non-zero multiple of the 3073-byte CIFAR-10 record");
    }
    for (size_t r = 0; r < bytes.size() / kRecord; ++r) {
      const uint8_t label = bytes[r * kRecord];
      if (label >= kClasses) {
        throw DataError(path + ": label " + std::to_string(label) + " of record " + std::to_string(r) +
                        " is outside 0..9");
      }
    }
    all.insert(all.end(), bytes.begin(), bytes.end());
  }

  const int64_t n = static_cast<int64_t>(all.size()) / kRecord;
  const torch::Tensor records = torch::from_blob(all.data(), {n, kRecord}, torch::kUInt8);
  Dataset ds;
  ds.name = "cifar10";
  ds.classes = kClasses;
  ds.norm = kCifar10Norm;
  ds.labels = records.select(1, 0).to(torch::kInt64);
  ds.images = normalizeImages(records.narrow(1, 1, kPixels).contiguous().view({n, 3, 32, 32}), ds.norm);
  return ds;
}

}  // namespace lowcomm::data
