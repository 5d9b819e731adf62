// CIFAR-10 binary batches written by the test, the synthetic set, and the name registry.
#include <gtest/gtest.h>

#include "lowcomm/base/error.h"
#include "lowcomm/data/dataset.h"
#include "data/test_util.h"

using namespace lowcomm;
using namespace lowcomm::data;
using namespace lowcomm::data::testing;

namespace {

constexpr int kRecord = 3073;

uint8_t pixelValue(int file, int rec, int c, int y, int x) { return static_cast<uint8_t>(file * 50 + rec * 7 + c * 80 + y + x); }

// `records` records with label (file + rec) % 10 and pixelValue() pixels in R, G, B plane order.
std::vector<uint8_t> cifarBytes(int file, int records) {
  std::vector<uint8_t> v;
  for (int r = 0; r < records; ++r) {
    v.push_back(static_cast<uint8_t>((file + r) % 10));
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) v.push_back(pixelValue(file, r, c, y, x));
  }
  return v;
}

void writeCifar(const std::string& dir, int records) {
  for (int f = 1; f <= 5; ++f) writeRaw(dir + "/data_batch_" + std::to_string(f) + ".bin", cifarBytes(f, records));
  writeRaw(dir + "/test_batch.bin", cifarBytes(0, records));
}

template <typename F>
std::string dataErrorMessage(F&& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no DataError thrown";
  return "";
}

}  // namespace

TEST(Cifar10, RoundTrip) {
  TempDir dir;
  writeCifar(dir.path(), 3);
  Dataset train = loadCifar10(dir.path(), true);
  EXPECT_EQ(train.name, "cifar10");
  EXPECT_EQ(train.classes, 10);
  ASSERT_EQ(train.images.sizes(), (std::vector<int64_t>{15, 3, 32, 32}));
  ASSERT_EQ(train.labels.sizes(), (std::vector<int64_t>{15}));
  for (int f = 1; f <= 5; ++f)
    for (int r = 0; r < 3; ++r) {
      const int64_t i = (f - 1) * 3 + r;
      EXPECT_EQ(train.labels[i].item<int64_t>(), (f + r) % 10);
      for (int c = 0; c < 3; ++c) {
        for (auto [y, x] : {std::pair{0, 0}, std::pair{3, 31}, std::pair{31, 17}}) {
          const double raw = pixelValue(f, r, c, y, x) / 255.0;
          EXPECT_NEAR(train.images[i][c][y][x].item<double>(), (raw - kCifar10Norm.mean[c]) / kCifar10Norm.stdev[c], 1e-5);
        }
      }
    }
  Dataset test = loadDataset("cifar10", dir.path(), false, 0);
  EXPECT_EQ(test.size(), 3);
  EXPECT_EQ(test.labels[2].item<int64_t>(), 2);

  // The folder the tarball was unpacked in works too.
  TempDir parent;
  std::filesystem::create_directory(parent.file("cifar-10-batches-bin"));
  writeCifar(parent.file("cifar-10-batches-bin"), 1);
  EXPECT_EQ(loadCifar10(parent.path(), true).size(), 5);
}

TEST(Cifar10, BadFilesAreNamed) {
  TempDir dir;
  writeCifar(dir.path(), 2);
  std::vector<uint8_t> bad = cifarBytes(3, 2);
  bad.resize(bad.size() - 5);
  writeRaw(dir.file("data_batch_3.bin"), bad);
  std::string msg = dataErrorMessage([&] { loadCifar10(dir.path(), true); });
  EXPECT_NE(msg.find(dir.file("data_batch_3.bin")), std::string::npos) << msg;
  EXPECT_NE(msg.find("3073"), std::string::npos) << msg;

  writeRaw(dir.file("data_batch_3.bin"), {});
  msg = dataErrorMessage([&] { loadCifar10(dir.path(), true); });
  EXPECT_NE(msg.find("size 0"), std::string::npos) << msg;

  bad = cifarBytes(3, 2);
  bad[kRecord] = 10;  // label of record 1
  writeRaw(dir.file("data_batch_3.bin"), bad);
  msg = dataErrorMessage([&] { loadCifar10(dir.path(), true); });
  EXPECT_NE(msg.find("label 10 of record 1"), std::string::npos) << msg;

  std::filesystem::remove(dir.file("test_batch.bin"));
  msg = dataErrorMessage([&] { loadCifar10(dir.path(), false); });
  EXPECT_NE(msg.find(dir.file("test_batch.bin")), std::string::npos) << msg;

  EXPECT_THROW(loadDataset("cifar10", "", true, 0), ConfigError);
}

TEST(Synthetic, ShapesAndDeterminism) {
  Dataset a = makeSynthetic(500, 3, 10, 12, 7, 42);
  EXPECT_EQ(a.images.sizes(), (std::vector<int64_t>{500, 3, 10, 12}));
  EXPECT_EQ(a.labels.sizes(), (std::vector<int64_t>{500}));
  EXPECT_EQ(a.labels.scalar_type(), torch::kInt64);
  EXPECT_EQ(a.classes, 7);
  EXPECT_GE(a.labels.min().item<int64_t>(), 0);
  EXPECT_LE(a.labels.max().item<int64_t>(), 6);
  EXPECT_EQ(a.blackValue(), std::vector<float>(3, 0.0f));

  Dataset b = makeSynthetic(500, 3, 10, 12, 7, 42);
  EXPECT_TRUE(torch::equal(a.images, b.images));
  EXPECT_TRUE(torch::equal(a.labels, b.labels));
  EXPECT_FALSE(torch::equal(a.images, makeSynthetic(500, 3, 10, 12, 7, 43).images));
  EXPECT_FALSE(torch::equal(a.images, makeSynthetic(500, 3, 10, 12, 7, 42, 1).images));
  EXPECT_THROW(makeSynthetic(0, 1, 28, 28, 10, 0), ConfigError);

  Dataset t = a.take(10);  // shares storage
  EXPECT_EQ(t.size(), 10);
  EXPECT_EQ(t.images.data_ptr(), a.images.data_ptr());
  EXPECT_EQ(a.take(1000).size(), 500);
}

// The split shares class means: nearest class mean fit on train classifies test well.
TEST(Synthetic, LearnableAcrossSplits) {
  Dataset train = loadDataset("synthetic", "", true, 5);
  Dataset test = loadDataset("synthetic", "", false, 5);
  EXPECT_EQ(train.size(), 8192);
  EXPECT_EQ(test.size(), 2048);
  EXPECT_EQ(train.images.sizes().slice(1), (std::vector<int64_t>{1, 28, 28}));
  torch::Tensor x = train.images.flatten(1);
  torch::Tensor onehot = torch::one_hot(train.labels, 10).to(torch::kFloat32);  // [N, 10]
  torch::Tensor means = onehot.t().mm(x) / onehot.sum(0).unsqueeze(1);           // [10, D]
  torch::Tensor pred = torch::cdist(test.images.flatten(1), means).argmin(1);
  const double acc = pred.eq(test.labels).to(torch::kFloat64).mean().item<double>();
  EXPECT_GT(acc, 0.9);
  // ...but single pixels are weak evidence (the task is not trivial per feature).
  EXPECT_LT(means.std().item<double>(), 0.6);
}

TEST(Registry, UnknownNameListsValidOnes) {
  try {
    loadDataset("imagenet", "", true, 0);
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    for (const char* n : {"imagenet", "fashion-mnist", "cifar10", "synthetic", "text"})
      EXPECT_NE(msg.find(n), std::string::npos) << msg;
  }
  EXPECT_EQ(datasetNames(), (std::vector<std::string>{"fashion-mnist", "cifar10", "synthetic", "text"}));
}
