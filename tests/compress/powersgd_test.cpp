// PowerSGD compressor: exactness at full rank, error feedback, warm-up phase, agreement across
// ranks, uncompressed segments, checkpoint state and byte accounting (ranks as threads).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "comm/harness.h"
#include "compress/compressors.h"
#include "lowcomm/base/error.h"

using namespace lowcomm;
using namespace lowcomm::compress;
using lowcomm::test::CommPtr;

namespace {

struct Spec {
  std::string name;
  std::vector<int64_t> shape;
};

struct Layout {
  std::vector<Segment> segs;
  size_t numel = 0;
};

Layout makeLayout(const std::vector<Spec>& specs) {
  Layout l;
  for (const Spec& s : specs) {
    size_t n = 1;
    for (int64_t d : s.shape) n *= size_t(d);
    l.segs.push_back({s.name, s.shape, l.numel, n});
    l.numel += n;
  }
  return l;
}

BucketView bucket(int index, std::vector<float>& data, const Layout& l) {
  BucketView b;
  b.index = index;
  b.data = data.data();
  b.numel = data.size();
  b.segments = l.segs;
  return b;
}

std::vector<float> grads(size_t n, int rank, int step, unsigned salt = 0) {
  std::mt19937 gen(unsigned(rank * 7919 + step * 104729) ^ (salt * 2654435761u));
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

CompressConfig config(int64_t rank, int64_t start_step = 0) {
  CompressConfig c;
  c.codec = "powersgd";
  c.rank = rank;
  c.start_step = start_step;
  c.seed = 42;
  return c;
}

std::vector<std::unique_ptr<Compressor>> compressors(int n, const CompressConfig& cfg) {
  std::vector<std::unique_ptr<Compressor>> cs;
  for (int r = 0; r < n; ++r) cs.push_back(makePowerSgdCompressor(cfg));
  return cs;
}

std::vector<float> residualOf(const Compressor& c, int bucket, int seg, size_t numel) {
  StateMap s;
  c.save(s);
  std::vector<float> v;
  if (!getState(s, "powersgd." + std::to_string(bucket) + ".residual." + std::to_string(seg), v))
    v.assign(numel, 0.0f);
  return v;
}

// Mixed layout: two matrices worth compressing at rank 4, a bias, a conv kernel.
const std::vector<Spec> kMixed = {
    {"fc1.weight", {64, 48}}, {"fc1.bias", {64}}, {"conv.weight", {16, 8, 3, 3}}, {"fc2.weight", {10, 64}}};

TEST(PowerSgd, ConfigIsValidated) {
  EXPECT_THROW(makePowerSgdCompressor(config(0)), ConfigError);
  EXPECT_THROW(makePowerSgdCompressor(config(-3)), ConfigError);
  EXPECT_THROW(makePowerSgdCompressor(config(4, -1)), ConfigError);
  EXPECT_EQ(makePowerSgdCompressor(config(1))->name(), "powersgd");
}

TEST(PowerSgd, WarmupStepsEqualPlainAllreduce) {
  const int n = 3;
  auto comms = test::makeComms(n);
  const Layout l = makeLayout(kMixed);
  auto cs = compressors(n, config(2, /*start_step=*/2));
  std::vector<std::vector<float>> got(n), want(n);
  for (int step = 0; step < 3; ++step)
    for (int index : {0, 1}) {  // step counters are per bucket
      test::onRanks(n, [&](int r) {
        got[r] = grads(l.numel, r, step, unsigned(index));
        want[r] = got[r];
        comms[r]->allreduce(want[r].data(), want[r].size(), comm::DType::f32, comm::ReduceOp::avg);
        BucketView b = bucket(index, got[r], l);
        cs[r]->reduce(*comms[r], b);
      });
      for (int r = 0; r < n; ++r) {
        const bool same = std::memcmp(got[r].data(), want[r].data(), l.numel * 4) == 0;
        EXPECT_EQ(same, step < 2) << "step " << step << " bucket " << index << " rank " << r;
      }
    }
}

// At rank >= min(m, n) the power iteration spans the averaged matrix: the result is the average.
TEST(PowerSgd, FullRankReproducesAverage) {
  const int n = 3;
  auto comms = test::makeComms(n);
  const Layout l = makeLayout({{"a", {8, 6}}, {"b", {5, 12}}, {"c", {4, 3, 2}}, {"d", {7}}, {"e", {1, 9}}});
  CompressConfig cfg = config(16);
  cfg.min_compression = 0;
  for (bool warm : {true, false}) {
    cfg.warm_start = warm;
    auto cs = compressors(n, cfg);
    for (int step = 0; step < 3; ++step) {
      std::vector<std::vector<float>> data(n);
      test::onRanks(n, [&](int r) {
        data[r] = grads(l.numel, r, step);
        BucketView b = bucket(0, data[r], l);
        cs[r]->reduce(*comms[r], b);
      });
      double scale = 0, err = 0;
      std::vector<std::vector<float>> in(n);
      for (int r = 0; r < n; ++r) in[r] = grads(l.numel, r, step);
      for (size_t i = 0; i < l.numel; ++i) {
        double avg = 0;
        for (int r = 0; r < n; ++r) avg += in[r][i];
        avg /= n;
        scale = std::max(scale, std::abs(avg));
        for (int r = 0; r < n; ++r) err = std::max(err, std::abs(data[r][i] - avg));
      }
      EXPECT_LT(err, 2e-4 * scale) << "warm " << warm << " step " << step;
    }
    // Payload at full rank is not smaller, yet compressed as configured: (m+n)*r per matrix.
    const int64_t per_call = 4 * ((8 + 6) * 6 + (5 + 12) * 5 + (4 + 6) * 4 + 7 + (1 + 9) * 1);
    EXPECT_EQ(cs[0]->stats().payload_bytes, 3 * per_call);
  }
}

TEST(PowerSgd, RankOneMatrixReproducedExactly) {
  const int n = 2;
  auto comms = test::makeComms(n);
  const int64_t m = 40, k = 30;
  const Layout l = makeLayout({{"w", {m, k}}});
  std::vector<float> u = grads(m, 9, 0), v = grads(k, 9, 1), want(size_t(m * k));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < k; ++j) want[size_t(i * k + j)] = u[size_t(i)] * v[size_t(j)];
  auto cs = compressors(n, config(1));
  std::vector<std::vector<float>> data(n);
  test::onRanks(n, [&](int r) {
    data[r] = want;
    BucketView b = bucket(0, data[r], l);
    cs[r]->reduce(*comms[r], b);
  });
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(data[r][i], want[i], 1e-5f) << "rank " << r << " at " << i;
}

// approx + new residual == gradient + old residual on each rank, step after step.
TEST(PowerSgd, ErrorFeedbackInvariant) {
  const Layout l = makeLayout(kMixed);
  for (int n : {1, 2}) {
    auto comms = test::makeComms(n);
    auto cs = compressors(n, config(2, 1));
    for (int step = 0; step < 5; ++step) {
      test::onRanks(n, [&](int r) {
        std::vector<float> g = grads(l.numel, r, step), data = g;
        std::vector<std::vector<float>> before;
        for (int s : {0, 3}) before.push_back(residualOf(*cs[r], 0, s, l.segs[size_t(s)].numel));
        BucketView b = bucket(0, data, l);
        cs[r]->reduce(*comms[r], b);
        for (int k = 0; k < 2; ++k) {
          const Segment& seg = l.segs[size_t(k == 0 ? 0 : 3)];
          std::vector<float> after = residualOf(*cs[r], 0, k == 0 ? 0 : 3, seg.numel);
          if (step == 0) {  // warm-up: no error feedback yet
            EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](float x) { return x == 0; }));
            continue;
          }
          double maxdiff = 0, maxres = 0;
          for (size_t i = 0; i < seg.numel; ++i) {
            const double lhs = double(data[seg.offset + i]) + after[i];
            const double rhs = double(g[seg.offset + i]) + before[size_t(k)][i];
            maxdiff = std::max(maxdiff, std::abs(lhs - rhs));
            maxres = std::max(maxres, double(std::abs(after[i])));
          }
          EXPECT_LT(maxdiff, 1e-5) << "world " << n << " step " << step << " segment " << seg.name;
          EXPECT_GT(maxres, 0.1) << "rank 2 of a random matrix leaves a residual";
        }
      });
    }
  }
}

TEST(PowerSgd, AllRanksAgreeForWorldSizes1To4) {
  const Layout l = makeLayout(kMixed);
  for (int n = 1; n <= 4; ++n)
    for (bool warm : {true, false}) {
      auto comms = test::makeComms(n);
      CompressConfig cfg = config(3, 1);
      cfg.warm_start = warm;
      auto cs = compressors(n, cfg);
      for (int step = 0; step < 4; ++step) {
        std::vector<std::vector<float>> data(n);
        test::onRanks(n, [&](int r) {
          data[r] = grads(l.numel, r, step);
          BucketView b = bucket(0, data[r], l);
          cs[r]->reduce(*comms[r], b);
        });
        for (int r = 1; r < n; ++r)
          ASSERT_EQ(std::memcmp(data[r].data(), data[0].data(), l.numel * 4), 0)
              << "world " << n << " warm " << warm << " step " << step << " rank " << r;
        for (float x : data[0]) ASSERT_TRUE(std::isfinite(x));
      }
    }
}

// 1-D, excluded, too small and not-worth-it segments go through one plain f32 allreduce average.
TEST(PowerSgd, UncompressedSegmentsAveragedExactly) {
  const int n = 3;
  auto comms = test::makeComms(n);
  const Layout l = makeLayout({{"embed.weight", {50, 40}},   // excluded by name
                               {"fc.weight", {64, 48}},      // compressed
                               {"fc.bias", {64}},            // 1-D
                               {"tiny.weight", {3, 3}},      // below min_numel
                               {"conv.weight", {8, 4, 3, 3}},  // 288/(4*44) < 2: not worth it
                               {"head.weight", {32, 64}}});  // compressed
  CompressConfig cfg = config(4);
  cfg.exclude = {"embed."};
  cfg.min_numel = 10;
  const std::vector<int> flat = {0, 2, 3, 4};
  size_t flat_numel = 0;
  for (int s : flat) flat_numel += l.segs[size_t(s)].numel;
  auto cs = compressors(n, cfg);
  for (int step = 0; step < 2; ++step) {
    std::vector<std::vector<float>> data(n), want(n);
    test::onRanks(n, [&](int r) {
      data[r] = grads(l.numel, r, step);
      for (int s : flat) {
        const Segment& seg = l.segs[size_t(s)];
        want[r].insert(want[r].end(), data[r].begin() + long(seg.offset), data[r].begin() + long(seg.offset + seg.numel));
      }
      comms[r]->allreduce(want[r].data(), want[r].size(), comm::DType::f32, comm::ReduceOp::avg);
      BucketView b = bucket(0, data[r], l);
      cs[r]->reduce(*comms[r], b);
    });
    for (int r = 0; r < n; ++r) {
      size_t pos = 0;
      for (int s : flat) {
        const Segment& seg = l.segs[size_t(s)];
        EXPECT_EQ(std::memcmp(data[r].data() + seg.offset, want[r].data() + pos, seg.numel * 4), 0)
            << "segment " << seg.name << " rank " << r;
        pos += seg.numel;
      }
    }
  }
  const int64_t per_call = int64_t(4 * (flat_numel + (64 + 48) * 4 + (32 + 64) * 4));
  EXPECT_EQ(cs[0]->stats().payload_bytes, 2 * per_call);
}

TEST(PowerSgd, StatsCountBytesOnAKnownLayout) {
  auto comms = test::makeComms(1);
  const Layout l = makeLayout(kMixed);
  // fc1 (64+48)*4, fc2 (10+64)*4; conv 16x72 at r=4: 1152/352 >= 2 -> compressed too; bias plain.
  auto c = makePowerSgdCompressor(config(4, 2));
  std::vector<float> data = grads(l.numel, 0, 0);
  for (int step = 0; step < 5; ++step) {
    BucketView b = bucket(0, data, l);
    c->reduce(*comms[0], b);
  }
  const int64_t compressed = 4 * ((64 + 48) * 4 + 64 + (16 + 72) * 4 + (10 + 64) * 4);
  const CompressStats s = c->stats();
  EXPECT_EQ(s.buckets, 5);
  EXPECT_EQ(s.raw_bytes, int64_t(5 * 4 * l.numel));
  EXPECT_EQ(s.payload_bytes, int64_t(2 * 4 * l.numel) + 3 * compressed);
  EXPECT_GE(s.codec_s, 0.0);
  EXPECT_GT(s.ratio(), 1.0);
}

// Resume from save(): the next reduce is bit-identical to the uninterrupted run.
TEST(PowerSgd, SaveLoadContinuesBitIdentically) {
  const int n = 2;
  auto comms = test::makeComms(n);
  const Layout l = makeLayout(kMixed);
  for (bool warm : {true, false}) {
    CompressConfig cfg = config(2, 2);
    cfg.warm_start = warm;
    for (int saved_at : {1, 4}) {  // during the warm-up and after it
      auto orig = compressors(n, cfg);
      auto fresh = compressors(n, cfg);
      std::vector<std::vector<float>> a(n), b(n);
      test::onRanks(n, [&](int r) {
        for (int step = 0; step < saved_at; ++step)
          for (int index : {0, 1}) {
            std::vector<float> g = grads(l.numel, r, step, unsigned(index));
            BucketView v = bucket(index, g, l);
            orig[r]->reduce(*comms[r], v);
          }
        StateMap s;
        orig[r]->save(s);
        fresh[r]->load(s);
        for (int step = saved_at; step < saved_at + 3; ++step)
          for (int index : {0, 1}) {
            a[r] = b[r] = grads(l.numel, r, step, unsigned(index));
            BucketView va = bucket(index, a[r], l), vb = bucket(index, b[r], l);
            orig[r]->reduce(*comms[r], va);
            fresh[r]->reduce(*comms[r], vb);
            EXPECT_EQ(std::memcmp(a[r].data(), b[r].data(), l.numel * 4), 0)
                << "warm " << warm << " saved at " << saved_at << " step " << step << " bucket " << index;
          }
        StateMap s1, s2;
        orig[r]->save(s1);
        fresh[r]->save(s2);
        EXPECT_EQ(s1, s2);
      });
    }
  }
}

TEST(PowerSgd, LoadRejectsStateOfTheWrongSize) {
  auto comms = test::makeComms(1);
  const Layout l = makeLayout(kMixed);
  auto c = makePowerSgdCompressor(config(2));
  std::vector<float> g = grads(l.numel, 0, 0);
  BucketView v = bucket(0, g, l);
  c->reduce(*comms[0], v);
  StateMap good;
  c->save(good);
  ASSERT_TRUE(good.count("powersgd.0.q.0") && good.count("powersgd.0.residual.3") && good.count("powersgd.0.step"));

  auto expectDataError = [](const StateMap& s, const std::string& key) {
    auto fresh = makePowerSgdCompressor(config(2));
    try {
      fresh->load(s);
      ADD_FAILURE() << "no DataError for " << key;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  for (const std::string key : {"powersgd.0.q.0", "powersgd.0.residual.3", "powersgd.0.step"}) {
    StateMap s = good;
    s[key].resize(s[key].size() - 4);
    expectDataError(s, key);
  }
  StateMap odd = good;
  odd["powersgd.0.q.0"].push_back(1);  // not a whole number of floats
  expectDataError(odd, "powersgd.0.q.0");
  StateMap stray = good;
  stray["powersgd.0.q.1"] = std::vector<uint8_t>(16);  // segment 1 (the bias) is not compressed
  expectDataError(stray, "powersgd.0.q.1");
  StateMap junk = good;
  junk["powersgd.x"] = {};
  expectDataError(junk, "powersgd.x");

  // Without the layout, sizes are checked when the bucket is next reduced.
  StateMap nolayout = good;
  nolayout.erase("powersgd.0.layout");
  nolayout["powersgd.0.residual.0"].resize(8);
  auto fresh = makePowerSgdCompressor(config(2));
  fresh->load(nolayout);
  std::vector<float> g2 = grads(l.numel, 0, 1);
  BucketView v2 = bucket(0, g2, l);
  try {
    fresh->reduce(*comms[0], v2);
    ADD_FAILURE() << "no DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("powersgd.0.residual.0"), std::string::npos) << e.what();
  }

  // State of another model: the layout does not match the bucket.
  auto other = makePowerSgdCompressor(config(2));
  other->load(good);
  const Layout l2 = makeLayout({{"w", {32, 32}}});
  std::vector<float> g3 = grads(l2.numel, 0, 1);
  BucketView v3 = bucket(0, g3, l2);
  try {
    other->reduce(*comms[0], v3);
    ADD_FAILURE() << "no DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("powersgd.0.layout"), std::string::npos) << e.what();
  }
}

// Error feedback makes the running sum of the approximations track the running sum of the
// (averaged) gradients even at rank 1: their gap is the current residual, which stays bounded,
// so the relative gap shrinks like 1/steps (without feedback it stays near the rank-1 error).
TEST(PowerSgd, ErrorFeedbackTracksTheGradientSum) {
  const int n = 2;
  auto comms = test::makeComms(n);
  const Layout l = makeLayout({{"w", {32, 24}}});
  auto cs = compressors(n, config(1));
  std::vector<double> sum_approx(l.numel, 0), sum_avg(l.numel, 0);
  const int steps = 300;
  for (int step = 0; step < steps; ++step) {
    std::vector<std::vector<float>> data(n);
    test::onRanks(n, [&](int r) {
      data[r] = grads(l.numel, r, step % 3);  // the same three gradients again and again
      BucketView b = bucket(0, data[r], l);
      cs[r]->reduce(*comms[r], b);
    });
    const std::vector<float> g0 = grads(l.numel, 0, step % 3), g1 = grads(l.numel, 1, step % 3);
    for (size_t i = 0; i < l.numel; ++i) {
      sum_approx[i] += data[0][i];
      sum_avg[i] += (double(g0[i]) + g1[i]) / 2.0;
    }
  }
  double gap = 0, total = 0;
  for (size_t i = 0; i < l.numel; ++i) {
    gap += (sum_approx[i] - sum_avg[i]) * (sum_approx[i] - sum_avg[i]);
    total += sum_avg[i] * sum_avg[i];
  }
  EXPECT_LT(std::sqrt(gap / total), 0.1) << "relative gap after " << steps << " steps";
}

}  // namespace
