// BatchLoader: shapes, drop-last, augmentation correctness and reproducibility, seek/resume.
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "lowcomm/base/error.h"
#include "lowcomm/data/loader.h"

using namespace lowcomm;
using namespace lowcomm::data;

namespace {

const Dataset& small() {
  static const Dataset ds = makeSynthetic(1000, 1, 28, 28, 10, 3);
  return ds;
}

std::vector<Batch> drain(BatchLoader& l) {
  std::vector<Batch> out;
  Batch b;
  while (l.next(b)) out.push_back(b);
  return out;
}

void expectSame(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i].x, b[i].x)) << "batch " << i;
    EXPECT_TRUE(torch::equal(a[i].y, b[i].y)) << "batch " << i;
  }
}

// Reference augmentation of one [C, H, W] image (crop offset dy, dx in the padded image, then flip).
torch::Tensor reference(const torch::Tensor& img, int64_t pad, int64_t dy, int64_t dx, bool flip, float fill) {
  const int64_t H = img.size(1), W = img.size(2);
  torch::Tensor padded = torch::constant_pad_nd(img, {pad, pad, pad, pad}, fill);
  torch::Tensor out = padded.narrow(1, dy, H).narrow(2, dx, W);
  return flip ? out.flip({2}) : out;
}

}  // namespace

TEST(Loader, ShapesDropLastEvaluationAndArguments) {
  const int world = 3;
  for (int r = 0; r < world; ++r) {
    BatchLoader l(small(), r, world, 32, 11);
    EXPECT_EQ(l.sampler().size(), 333);
    EXPECT_EQ(l.batchesPerEpoch(), 10);  // 333 = 10 * 32 + 13, the 13 dropped
    std::vector<Batch> bs = drain(l);
    ASSERT_EQ(bs.size(), 10u);
    for (size_t k = 0; k < bs.size(); ++k) {
      EXPECT_EQ(bs[k].x.sizes(), (std::vector<int64_t>{32, 1, 28, 28}));
      EXPECT_EQ(bs[k].y.sizes(), (std::vector<int64_t>{32}));
      EXPECT_EQ(bs[k].y.scalar_type(), torch::kInt64);
      const auto& idx = l.sampler().indices();
      torch::Tensor want = torch::tensor(std::vector<int64_t>(idx.begin() + k * 32, idx.begin() + (k + 1) * 32));
      EXPECT_TRUE(torch::equal(bs[k].x, small().images.index_select(0, want)));
      EXPECT_TRUE(torch::equal(bs[k].y, small().labels.index_select(0, want)));
    }
    EXPECT_EQ(l.position(), (BatchLoader::Position{0, 10}));
    Batch b;
    EXPECT_FALSE(l.next(b));
  }

  // Evaluation mode: world 1, no shuffle, no drop-last visits every sample once, in order.
  BatchLoader l(small(), 0, 1, 64, 0, {}, /*shuffle=*/false, /*dropLast=*/false);
  EXPECT_EQ(l.batchesPerEpoch(), 16);
  std::vector<Batch> bs = drain(l);
  EXPECT_EQ(bs.back().x.size(0), 1000 - 15 * 64);
  std::vector<torch::Tensor> ys;
  for (auto& b : bs) ys.push_back(b.y);
  EXPECT_TRUE(torch::equal(torch::cat(ys), small().labels));

  EXPECT_THROW(BatchLoader(small(), 0, 1, 0, 0), ConfigError);
  EXPECT_THROW(BatchLoader(small(), 3, 3, 8, 0), ConfigError);
  EXPECT_THROW(BatchLoader(small(), 0, 4, 251, 0), ConfigError);  // 250 per rank < one batch
  EXPECT_NO_THROW(BatchLoader(small(), 0, 4, 250, 0));
}

TEST(Loader, AugmentationMatchesReferenceAndIsReproducible) {
  Dataset ds = makeSynthetic(200, 2, 12, 10, 4, 8);
  ds.norm = Normalization{{0.5f, 0.25f}, {0.5f, 0.25f}};  // fill = -1 in both channels
  Augment aug;
  aug.crop = true;
  aug.pad = 2;
  aug.flip = true;
  BatchLoader plain(ds, 1, 2, 16, 77, {});
  BatchLoader a(ds, 1, 2, 16, 77, aug), b(ds, 1, 2, 16, 77, aug), other(ds, 1, 2, 16, 78, aug);
  std::vector<Batch> pa = drain(plain), aa = drain(a), ab = drain(b);
  expectSame(aa, ab);
  Batch o;
  ASSERT_TRUE(other.next(o));
  EXPECT_FALSE(torch::equal(o.x, aa[0].x));

  // Every augmented image is one of the (2 pad + 1)^2 * 2 crops/flips of its source image,
  // and the draws are varied (not always the same offset).
  std::set<std::tuple<int64_t, int64_t, bool>> used;
  for (size_t k = 0; k < aa.size(); ++k) {
    EXPECT_EQ(aa[k].x.sizes(), pa[k].x.sizes());
    EXPECT_TRUE(torch::equal(aa[k].y, pa[k].y));
    for (int64_t i = 0; i < aa[k].x.size(0); ++i) {
      bool found = false;
      for (int64_t dy = 0; dy <= 4 && !found; ++dy)
        for (int64_t dx = 0; dx <= 4 && !found; ++dx)
          for (bool flip : {false, true})
            if (!found && torch::equal(aa[k].x[i], reference(pa[k].x[i], 2, dy, dx, flip, -1.0f))) {
              found = true;
              used.insert({dy, dx, flip});
            }
      EXPECT_TRUE(found) << "batch " << k << " sample " << i;
    }
  }
  EXPECT_GT(used.size(), 20u);
  EXPECT_THROW(BatchLoader(ds, 0, 1, 8, 0, Augment{true, 10, false}), ConfigError);
}

TEST(Loader, EpochsAndSeekReproduceUninterruptedStream) {
  const Augment aug = Augment::standard(28);
  EXPECT_EQ(aug.pad, 2);
  BatchLoader full(small(), 1, 2, 40, 5, aug);
  std::vector<std::vector<Batch>> epochs;
  for (int64_t e = 0; e < 3; ++e) {
    full.startEpoch(e);
    epochs.push_back(drain(full));
  }
  ASSERT_EQ(epochs[0].size(), 12u);  // 500 per rank / 40
  EXPECT_FALSE(torch::equal(epochs[0][0].y, epochs[1][0].y));  // epochs reshuffle
  full.startEpoch(0);
  expectSame(drain(full), epochs[0]);  // ...and repeat

  // Interrupted at epoch 1 after batch 7: a fresh loader seeks to the saved position.
  BatchLoader first(small(), 1, 2, 40, 5, aug);
  first.startEpoch(1);
  Batch b;
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(first.next(b));
  const BatchLoader::Position saved = first.position();
  EXPECT_EQ(saved, (BatchLoader::Position{1, 7}));

  BatchLoader resumed(small(), 1, 2, 40, 5, aug);
  resumed.seek(saved);
  std::vector<Batch> rest = drain(resumed);
  expectSame(rest, std::vector<Batch>(epochs[1].begin() + 7, epochs[1].end()));
  resumed.startEpoch(2);
  expectSame(drain(resumed), epochs[2]);

  // Seeking to the end of an epoch yields nothing until the next startEpoch.
  resumed.seek({0, 12});
  EXPECT_FALSE(resumed.next(b));
  EXPECT_THROW(resumed.seek({0, 13}), ConfigError);
  EXPECT_THROW(resumed.seek({-1, 0}), ConfigError);
}
