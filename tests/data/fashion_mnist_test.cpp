// Fashion-MNIST: the real Debian files, and every way a file can be missing or broken.
#include <gtest/gtest.h>

#include "lowcomm/base/error.h"
#include "lowcomm/data/dataset.h"
#include "data/test_util.h"

using namespace lowcomm;
using namespace lowcomm::data;
using namespace lowcomm::data::testing;

namespace {

const std::string kReal = kFashionMnistDefaultDir;

// Expects DataError whose message contains every fragment.
template <typename F>
void expectDataError(F&& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no DataError thrown";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    for (const auto& frag : fragments) EXPECT_NE(msg.find(frag), std::string::npos) << "'" << frag << "' not in: " << msg;
  }
}

// A small valid test split: n images whose pixel (i, y, x) = (i + y + x) % 256, labels i % 10.
void writeSmallSplit(const TempDir& dir, uint32_t n, uint32_t nLabels) {
  std::vector<uint8_t> pixels, labels;
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t y = 0; y < 28; ++y)
      for (uint32_t x = 0; x < 28; ++x) pixels.push_back(static_cast<uint8_t>((i + y + x) % 256));
  for (uint32_t i = 0; i < nLabels; ++i) labels.push_back(static_cast<uint8_t>(i % 10));
  writeGz(dir.file("t10k-images-idx3-ubyte.gz"), idxBytes({n, 28, 28}, pixels));
  writeGz(dir.file("t10k-labels-idx1-ubyte.gz"), idxBytes({nLabels}, labels));
}

}  // namespace

TEST(FashionMnist, RealFilesLoadAndAreNormalised) {
  ASSERT_TRUE(std::filesystem::exists(kReal + "/train-images-idx3-ubyte.gz"))
      << "install Debian's dataset-fashion-mnist (scripts/setup)";
  for (bool train : {true, false}) {
    Dataset ds = loadFashionMnist(kReal, train);
    const int64_t n = train ? 60000 : 10000;
    EXPECT_EQ(ds.name, "fashion-mnist");
    EXPECT_EQ(ds.classes, 10);
    EXPECT_EQ(ds.images.sizes(), (std::vector<int64_t>{n, 1, 28, 28}));
    EXPECT_EQ(ds.images.scalar_type(), torch::kFloat32);
    EXPECT_EQ(ds.labels.sizes(), (std::vector<int64_t>{n}));
    EXPECT_EQ(ds.labels.scalar_type(), torch::kInt64);
    EXPECT_GE(ds.labels.min().item<int64_t>(), 0);
    EXPECT_LE(ds.labels.max().item<int64_t>(), 9);
    // Both splits are balanced: n/10 per class.
    EXPECT_TRUE(torch::bincount(ds.labels).eq(n / 10).all().item<bool>());
    EXPECT_NEAR(ds.images.mean().item<double>(), 0.0, 0.05);
    EXPECT_NEAR(ds.images.std().item<double>(), 1.0, 0.05);
    // Raw 0 and 255 map to the ends of the normalised range.
    EXPECT_NEAR(ds.images.min().item<double>(), -0.2860 / 0.3530, 1e-5);
    EXPECT_NEAR(ds.images.max().item<double>(), (1 - 0.2860) / 0.3530, 1e-5);
  }
  EXPECT_EQ(loadDataset("fashion-mnist", "", false, 0).size(), 10000);  // empty dir = Debian's
}

TEST(FashionMnist, SmallFileRoundTrip) {
  TempDir dir;
  writeSmallSplit(dir, 5, 5);
  Dataset ds = loadFashionMnist(dir.path(), false);
  ASSERT_EQ(ds.size(), 5);
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(ds.labels[i].item<int64_t>(), i % 10);
    for (int64_t y : {0, 13, 27})
      for (int64_t x : {0, 5, 27}) {
        const double raw = static_cast<double>((i + y + x) % 256);
        EXPECT_NEAR(ds.images[i][0][y][x].item<double>(), (raw / 255 - 0.2860) / 0.3530, 1e-5);
      }
  }

  // Uncompressed files are used when the .gz names are absent.
  std::filesystem::remove(dir.file("t10k-images-idx3-ubyte.gz"));
  std::filesystem::remove(dir.file("t10k-labels-idx1-ubyte.gz"));
  std::vector<uint8_t> pixels(2 * 28 * 28, 7);
  writeRaw(dir.file("t10k-images-idx3-ubyte"), idxBytes({2, 28, 28}, pixels));
  writeRaw(dir.file("t10k-labels-idx1-ubyte"), idxBytes({2}, {3, 4}));
  ds = loadFashionMnist(dir.path(), false);
  EXPECT_EQ(ds.size(), 2);
  EXPECT_EQ(ds.labels[1].item<int64_t>(), 4);
}

TEST(FashionMnist, MissingTruncatedOrCorruptFilesAreNamed) {
  TempDir dir;
  expectDataError([&] { loadFashionMnist(dir.path(), true); }, {dir.file("train-images-idx3-ubyte.gz"), "missing"});
  expectDataError([&] { loadFashionMnist(dir.path() + "/nonexistent", false); }, {"nonexistent", "t10k-images"});

  // A real file cut short inside the gzip stream.
  std::vector<uint8_t> gz = readRaw(kReal + "/t10k-images-idx3-ubyte.gz");
  ASSERT_GT(gz.size(), 200000u);
  gz.resize(200000);
  writeRaw(dir.file("t10k-images-idx3-ubyte.gz"), gz);
  writeRaw(dir.file("t10k-labels-idx1-ubyte.gz"), readRaw(kReal + "/t10k-labels-idx1-ubyte.gz"));
  expectDataError([&] { loadFashionMnist(dir.path(), false); }, {dir.file("t10k-images-idx3-ubyte.gz"), "truncated"});

  // Flipped bytes inside the compressed data.
  gz = readRaw(kReal + "/t10k-labels-idx1-ubyte.gz");
  for (size_t i = 100; i < 140; ++i) gz[i] ^= 0x5a;
  writeRaw(dir.file("t10k-labels-idx1-ubyte.gz"), gz);
  writeRaw(dir.file("t10k-images-idx3-ubyte.gz"), readRaw(kReal + "/t10k-images-idx3-ubyte.gz"));
  expectDataError([&] { loadFashionMnist(dir.path(), false); }, {dir.file("t10k-labels-idx1-ubyte.gz")});

  // Valid gzip, but the idx payload is shorter than the header declares.
  writeSmallSplit(dir, 3, 3);
  std::vector<uint8_t> pixels(2 * 28 * 28 + 100, 1);  // header says 3 images
  writeGz(dir.file("t10k-images-idx3-ubyte.gz"), idxBytes({3, 28, 28}, pixels));
  expectDataError([&] { loadFashionMnist(dir.path(), false); },
                  {dir.file("t10k-images-idx3-ubyte.gz"), "truncated", "1668 of the 2352"});
}

TEST(FashionMnist, HeaderChecks) {
  TempDir dir;
  // More payload than the header declares.
  writeSmallSplit(dir, 3, 3);
  writeGz(dir.file("t10k-labels-idx1-ubyte.gz"), idxBytes({3}, {1, 2, 3, 4}));
  expectDataError([&] { loadFashionMnist(dir.path(), false); }, {dir.file("t10k-labels-idx1-ubyte.gz"), "trailing"});

  writeSmallSplit(dir, 3, 3);
  // A labels file where the images file should be.
  writeGz(dir.file("t10k-images-idx3-ubyte.gz"), idxBytes({3}, {1, 2, 3}));
  expectDataError([&] { loadFashionMnist(dir.path(), false); },
                  {dir.file("t10k-images-idx3-ubyte.gz"), "magic 0x00000801", "expected 0x00000803"});
  // Not an idx file at all (the float-typed magic 0x0d03).
  writeGz(dir.file("t10k-images-idx3-ubyte.gz"), idxBytes({3, 28, 28}, {}, 0x00000d03));
  expectDataError([&] { loadFashionMnist(dir.path(), false); }, {"magic 0x00000d03"});
  writeGz(dir.file("t10k-images-idx3-ubyte.gz"), {0x00, 0x00});
  expectDataError([&] { loadFashionMnist(dir.path(), false); }, {"shorter than the 4-byte idx magic"});

  writeSmallSplit(dir, 4, 3);
  expectDataError([&] { loadFashionMnist(dir.path(), false); }, {"4 images", "3 labels"});

  writeSmallSplit(dir, 2, 2);
  writeGz(dir.file("t10k-images-idx3-ubyte.gz"), idxBytes({2, 32, 32}, std::vector<uint8_t>(2 * 32 * 32)));
  expectDataError([&] { loadFashionMnist(dir.path(), false); }, {"32x32", "28x28"});

  writeGz(dir.file("t10k-images-idx3-ubyte.gz"), idxBytes({0, 28, 28}, {}));
  expectDataError([&] { loadFashionMnist(dir.path(), false); }, {"dimension 0 is 0"});

  // A corrupt count must fail on the size check, not try to allocate 200 GB.
  writeGz(dir.file("t10k-images-idx3-ubyte.gz"), idxBytes({0xffffffffu, 28, 28}, {}));
  expectDataError([&] { loadFashionMnist(dir.path(), false); }, {"1024 MiB"});

  writeSmallSplit(dir, 2, 2);
  writeGz(dir.file("t10k-labels-idx1-ubyte.gz"), idxBytes({2}, {3, 10}));
  expectDataError([&] { loadFashionMnist(dir.path(), false); }, {"label 10 at index 1"});
}
