// Sparse codecs (topk, dgc_topk, randomk, threshold) and the selection kernels under them:
// exactness against a sort reference on adversarial inputs, payload validation, randomk's shared
// indices and unbiasedness.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "compress/codecs.h"
#include "compress/topk_select.h"
#include "lowcomm/base/error.h"

using namespace lowcomm;
using namespace lowcomm::compress;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// Increasing indices of the k largest |x| (ties by lower index), by nth_element on a total order.
std::vector<uint32_t> reference(const std::vector<float>& x, size_t k) {
  std::vector<uint32_t> i(x.size());
  std::iota(i.begin(), i.end(), 0u);
  k = std::min(k, x.size());
  auto before = [&](uint32_t a, uint32_t b) {
    const float fa = std::fabs(x[a]), fb = std::fabs(x[b]);
    return fa != fb ? fa > fb : a < b;
  };
  std::nth_element(i.begin(), i.begin() + k, i.end(), before);
  i.resize(k);
  std::sort(i.begin(), i.end());
  return i;
}

std::vector<uint32_t> topk(const std::vector<float>& x, size_t k) {
  std::vector<uint32_t> out(std::min(k, x.size()));
  out.resize(selectTopK(x.data(), x.size(), k, out.data()));
  return out;
}

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> x(n);
  for (auto& v : x) v = d(g);
  return x;
}

// Named inputs chosen to defeat a sampled threshold and to reach every radix level.
std::vector<std::pair<std::string, std::vector<float>>> adversarial(size_t n) {
  std::vector<std::pair<std::string, std::vector<float>>> r;
  auto g = gaussian(n, static_cast<uint32_t>(n));
  r.push_back({"gaussian", g});
  auto t = g;
  for (auto& v : t) v = std::round(v * 2);  // few levels: heavy ties everywhere
  r.push_back({"ties", t});
  r.push_back({"all equal", std::vector<float>(n, -1.5f)});
  auto o = g;
  if (n) o[n / 2] = 1e30f;
  r.push_back({"outlier", o});
  auto s = g;
  std::sort(s.begin(), s.end(), [](float a, float b) { return std::fabs(a) < std::fabs(b); });
  r.push_back({"sorted ascending", s});
  std::reverse(s.begin(), s.end());
  r.push_back({"sorted descending", s});
  std::vector<float> low(n);  // keys differ only in the 9 low bits: all three radix levels
  for (size_t i = 0; i < n; ++i) low[i] = (i % 3 ? 1.0f : -1.0f) + static_cast<float>(i % 512) * 0x1p-23f;
  r.push_back({"low bits only", low});
  std::vector<float> u(n);  // one exponent: the level-0 bins are big, level 1 resolves
  for (size_t i = 0; i < n; ++i) u[i] = 1.0f + static_cast<float>((i * 2654435761u) % 1000003) / 1000003.0f;
  r.push_back({"uniform [1,2)", u});
  std::vector<float> z(n);
  for (size_t i = 0; i < n; ++i) z[i] = i % 7 == 0 ? 1e-40f * static_cast<float>(i % 5) : (i % 2 ? 0.0f : -0.0f);
  r.push_back({"zeros and denormals", z});
  std::vector<float> sparse(n, 0.0f);  // fewer non-zeros than k: the k-th largest is a zero
  for (size_t i = 0; i < n; i += 300) sparse[i] = g[i];
  r.push_back({"mostly zeros", sparse});
  return r;
}

}  // namespace

TEST(TopKSelect, MatchesSortReferenceOnManySizesAndInputs) {
  for (size_t n : {0, 1, 2, 3, 17, 1000, 2049, 4099, 100000, 300000, 1000000}) {
    for (const auto& [name, x] : adversarial(n)) {
      std::vector<size_t> ks = {0, 1, 2, n / 100, n / 10, n / 2, n > 0 ? n - 1 : 0, n, n + 5};
      if (n == 300000) ks = {1, n / 100, n / 2};
      if (n == 1000000) ks = {n / 100};
      for (size_t k : ks)
        ASSERT_EQ(topk(x, k), reference(x, k)) << name << " n=" << n << " k=" << k;
    }
  }
}

TEST(TopKSelect, NaNRanksAboveInfinityAndNegativesCountByMagnitude) {
  const std::vector<float> x = {1, kNaN, -kInf, 2, -3, -0.0f, 0.0f};
  EXPECT_EQ(topk(x, 1), (std::vector<uint32_t>{1}));
  EXPECT_EQ(topk(x, 2), (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(topk(x, 3), (std::vector<uint32_t>{1, 2, 4}));
  EXPECT_EQ(topk(x, 6), (std::vector<uint32_t>{0, 1, 2, 3, 4, 5}));  // -0 == +0: lower index wins
}

TEST(TopKSelect, SelectAtLeastCapsAndEmptyRange) {
  const std::vector<float> x = {0.5f, -2, 3, 0.1f, -4};
  std::vector<uint32_t> out(5);
  EXPECT_EQ(selectAtLeast(x.data(), 5, magnitudeKey(2), out.data(), 5), 3u);
  EXPECT_EQ(std::vector<uint32_t>(out.begin(), out.begin() + 3), (std::vector<uint32_t>{1, 2, 4}));
  EXPECT_EQ(selectAtLeast(x.data(), 5, magnitudeKey(2), out.data(), 2), 3u);  // cap + 1: overflow
  EXPECT_EQ(selectAtLeast(x.data(), 5, 0x80000000u, out.data(), 5), 0u);
}

TEST(TopKSelect, KeepCount) {
  EXPECT_EQ(keepCount(0.07, 100), 7u);  // 0.07 * 100 = 7.000000000000001 in double
  EXPECT_EQ(keepCount(0.01, 1), 1u);
  EXPECT_EQ(keepCount(0.01, 0), 0u);
  EXPECT_EQ(keepCount(0.015, 100), 2u);
  EXPECT_EQ(keepCount(1.0, 33), 33u);
  EXPECT_EQ(keepCount(1e-9, 10), 1u);
}

// Tolerance of the sampled variant (topk_select.h): exactly k, or ceil(k/2) .. k + floor(3k/10),
// and the kept set dominates the dropped set in magnitude.
void expectDgcContract(const std::vector<float>& x, size_t k, const std::vector<uint32_t>& kept, const char* name) {
  const size_t c = kept.size();
  EXPECT_TRUE(c == k || (c >= (k + 1) / 2 && c <= k + 3 * k / 10)) << name << " kept " << c << " for k=" << k;
  EXPECT_TRUE(std::is_sorted(kept.begin(), kept.end()) && std::adjacent_find(kept.begin(), kept.end()) == kept.end());
  std::vector<bool> in(x.size());
  float min_kept = kInf, max_dropped = 0;
  for (auto i : kept) in[i] = true, min_kept = std::min(min_kept, std::fabs(x[i]));
  for (size_t i = 0; i < x.size(); ++i)
    if (!in[i]) max_dropped = std::max(max_dropped, std::fabs(x[i]));
  EXPECT_GE(min_kept, max_dropped) << name;
}

TEST(TopKSelect, ApproximateKeepsRoughlyKAndDominates) {
  for (size_t n : {1, 10, 5000, 300000}) {
    for (const auto& [name, x] : adversarial(n)) {
      const size_t k = std::max<size_t>(1, n / 100);
      std::vector<uint32_t> out(approxTopKCapacity(n, k));
      out.resize(selectTopKApprox(x.data(), n, k, 0.01, 42, out.data()));
      expectDgcContract(x, k, out, name.c_str());
    }
  }
  // 1.6k equal maxima: the sample threshold keeps 1.6k, tightened to the exact top k.
  const size_t n = 300000, k = 3000;
  std::vector<float> x = gaussian(n, 5);
  for (auto& v : x) v *= 1e-3f;
  for (size_t i = 0; i < n; i += 62) x[i] = 1.0f;
  std::vector<uint32_t> out(approxTopKCapacity(n, k));
  out.resize(selectTopKApprox(x.data(), n, k, 0.01, 1, out.data()));
  EXPECT_EQ(out, reference(x, k));
}

namespace {

std::vector<uint8_t> encode(const Codec& c, const std::vector<float>& x, const EncodeCtx& ctx = {}) {
  std::vector<uint8_t> p(c.maxBytes(x.size()));
  p.resize(c.encode(x.data(), x.size(), p.data(), ctx));
  return p;
}

std::vector<float> decode(const Codec& c, const std::vector<uint8_t>& p, size_t n, const EncodeCtx& ctx = {}) {
  std::vector<float> out(n, 123.0f);
  c.decode(p.data(), p.size(), n, out.data(), 1.0f, false, ctx);
  return out;
}

std::vector<uint32_t> support(const std::vector<float>& v) {
  std::vector<uint32_t> s;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != 0) s.push_back(static_cast<uint32_t>(i));
  return s;
}

CodecParams ratio(double r) {
  CodecParams p;
  p.ratio = r;
  return p;
}

}  // namespace

TEST(SparseCodecs, RejectBadParameters) {
  for (double r : {0.0, -0.1, 1.5, std::nan("")}) {
    EXPECT_THROW(makeTopKCodec(ratio(r)), ConfigError);
    EXPECT_THROW(makeDgcTopKCodec(ratio(r)), ConfigError);
    EXPECT_THROW(makeRandomKCodec(ratio(r)), ConfigError);
  }
  CodecParams p;
  p.sample_ratio = 0;
  EXPECT_THROW(makeDgcTopKCodec(p), ConfigError);
  for (double t : {0.0, -1.0, 1e-50, 1e40, std::nan(""), HUGE_VAL}) {
    p.threshold = t;
    EXPECT_THROW(makeThresholdCodec(p), ConfigError) << t;
  }
}

TEST(SparseCodecs, TopKRoundTripScaleAndAccumulate) {
  auto c = makeTopKCodec(ratio(0.05));
  EXPECT_EQ(c->name(), "topk");
  EXPECT_EQ(c->combine(), Combine::allgather);
  for (size_t n : {0, 1, 7, 1000}) {
    const auto x = gaussian(n, 3);
    const auto p = encode(*c, x);
    const size_t k = keepCount(0.05, n);
    ASSERT_EQ(p.size(), 8 + 8 * k);
    ASSERT_LE(p.size(), c->maxBytes(n));
    const auto out = decode(*c, p, n);
    const auto want = reference(x, k);
    EXPECT_EQ(support(out), want);
    for (auto i : want) EXPECT_EQ(out[i], x[i]);
    std::vector<float> acc(n, 1.0f);
    c->decode(p.data(), p.size(), n, acc.data(), 0.5f, true, {});
    for (size_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(acc[i], 1.0f + 0.5f * out[i]);
  }
}

TEST(SparseCodecs, DgcTopKWithinToleranceAndBound) {
  CodecParams p = ratio(0.01);
  auto c = makeDgcTopKCodec(p);
  EXPECT_EQ(c->name(), "dgc_topk");
  const size_t n = 300000;
  const auto x = gaussian(n, 9);
  EncodeCtx ctx;
  ctx.step = 3;
  const auto pay = encode(*c, x, ctx);
  EXPECT_LE(pay.size(), c->maxBytes(n));
  EXPECT_EQ(pay, encode(*c, x, ctx));  // deterministic for equal (x, ctx)
  expectDgcContract(x, keepCount(0.01, n), support(decode(*c, pay, n)), "gaussian");
}

TEST(SparseCodecs, ThresholdKeepsExactlyAboveT) {
  CodecParams p;
  p.threshold = 0.5;
  auto c = makeThresholdCodec(p);
  const std::vector<float> x = {0.5f, -0.5f, 0.50001f, -0.7f, 0.1f, 0.0f, -0.0f, 3.0f};
  const auto out = decode(*c, encode(*c, x), x.size());
  EXPECT_EQ(support(out), (std::vector<uint32_t>{2, 3, 7}));
  EXPECT_EQ(out[3], -0.7f);
  auto big = gaussian(100000, 4);
  const auto pay = encode(*c, big);
  EXPECT_LE(pay.size(), c->maxBytes(big.size()));
  const auto s = support(decode(*c, pay, big.size()));
  std::vector<uint32_t> want;
  for (size_t i = 0; i < big.size(); ++i)
    if (std::fabs(big[i]) > 0.5f) want.push_back(static_cast<uint32_t>(i));
  EXPECT_EQ(s, want);
  const std::vector<float> all(50, 7.0f);
  EXPECT_EQ(encode(*c, all).size(), c->maxBytes(50));
}

TEST(SparseCodecs, NonFiniteValuesAreSentAndRejectedAtDecode) {
  std::vector<float> x = gaussian(100, 1);
  x[40] = kNaN;
  CodecParams p;
  p.threshold = 0.5;
  for (auto* make : {makeTopKCodec, makeDgcTopKCodec, makeThresholdCodec}) {
    auto c = make(p);
    EXPECT_THROW(decode(*c, encode(*c, x), x.size()), DataError) << c->name();
  }
  x[40] = -kInf;
  auto c = makeTopKCodec(p);
  EXPECT_THROW(decode(*c, encode(*c, x), x.size()), DataError);
}

TEST(SparseCodecs, MalformedPayloadsAreDataErrorsAndLeaveOutputUntouched) {
  auto c = makeTopKCodec(ratio(0.1));
  const size_t n = 50;
  const auto good = encode(*c, gaussian(n, 2));  // 5 entries
  auto expectBad = [&](std::vector<uint8_t> p, const char* what) {
    std::vector<float> out(n, 9.0f);
    EXPECT_THROW(c->decode(p.data(), p.size(), n, out.data(), 1.0f, false, {}), DataError) << what;
    EXPECT_EQ(out, std::vector<float>(n, 9.0f)) << what;
  };
  for (size_t len = 0; len < good.size(); ++len)
    expectBad(std::vector<uint8_t>(good.begin(), good.begin() + len), "truncated");
  auto p = good;
  p.push_back(0);
  expectBad(p, "trailing byte");
  p.resize(good.size() + 8);
  expectBad(p, "trailing entry");
  auto u32 = [](std::vector<uint8_t>& b, size_t off, uint32_t v) { std::memcpy(b.data() + off, &v, 4); };
  p = good;
  u32(p, 4, 6);
  expectBad(p, "count disagrees with size");
  std::vector<uint8_t> huge(8 + 8 * 51, 0);
  huge[0] = 'K';
  u32(huge, 4, 51);
  for (uint32_t j = 0; j < 51; ++j) u32(huge, 8 + 4 * j, j);
  expectBad(huge, "count > n");
  p = good;
  u32(p, 8 + 4 * 4, static_cast<uint32_t>(n));
  expectBad(p, "index out of range");
  p = good;
  std::memcpy(p.data() + 12, p.data() + 8, 4);
  expectBad(p, "duplicate index");
  p = good;
  std::memcpy(p.data() + 12, p.data() + 8, 4);
  u32(p, 8, 49);
  expectBad(p, "decreasing index");
  for (float bad : {kNaN, kInf, -kInf}) {
    p = good;
    std::memcpy(p.data() + 8 + 4 * 5 + 8, &bad, 4);
    expectBad(p, "non-finite value");
  }
  p = good;
  p[0] = 'T';
  expectBad(p, "other codec's tag");
  p = good;
  p[2] = 1;
  expectBad(p, "reserved byte");
  // Random corruptions decode or throw DataError, nothing else.
  std::mt19937 g(7);
  for (int t = 0; t < 2000; ++t) {
    p = good;
    p[g() % p.size()] ^= static_cast<uint8_t>(1u << (g() % 8));
    std::vector<float> out(n);
    try {
      c->decode(p.data(), p.size(), n, out.data(), 1.0f, false, {});
    } catch (const DataError&) {
    }
  }
}

TEST(RandomK, SharedIndicesAcrossRanksAndFreshPerStep) {
  CodecParams p = ratio(0.1);
  p.unbiased = false;
  auto c = makeRandomKCodec(p);
  EXPECT_EQ(c->combine(), Combine::allreduce);
  EXPECT_EQ(c->wireType(), comm::DType::f32);
  const size_t n = 1000, k = 100;
  std::vector<float> ones(n, 1.0f);
  EncodeCtx a, b;
  a.seed = b.seed = 11;
  a.rank = 0, b.rank = 3, b.world = a.world = 4;
  const auto pa = encode(*c, ones, a);
  ASSERT_EQ(pa.size(), 4 * k);
  EXPECT_EQ(support(decode(*c, pa, n, a)), support(decode(*c, encode(*c, ones, b), n, b)));
  EXPECT_EQ(support(decode(*c, pa, n, a)).size(), k);
  for (int change = 0; change < 4; ++change) {
    EncodeCtx d = a;
    if (change == 0) d.step += 1;
    if (change == 1) d.seed += 1;
    if (change == 2) d.bucket += 1;
    if (change == 3) d.chunk += 1;
    EXPECT_NE(support(decode(*c, encode(*c, ones, d), n, d)), support(decode(*c, pa, n, a))) << change;
  }
  // Payloads of two ranks summed elementwise decode to the sum of their kept values.
  const auto x0 = gaussian(n, 1), x1 = gaussian(n, 2);
  auto p0 = encode(*c, x0, a), p1 = encode(*c, x1, b);
  for (size_t j = 0; j < k; ++j) {
    float u, v;
    std::memcpy(&u, &p0[4 * j], 4);
    std::memcpy(&v, &p1[4 * j], 4);
    u += v;
    std::memcpy(&p0[4 * j], &u, 4);
  }
  const auto sum = decode(*c, p0, n, a);
  const auto kept = support(decode(*c, pa, n, a));
  for (auto i : kept) EXPECT_FLOAT_EQ(sum[i], x0[i] + x1[i]);
  EXPECT_EQ(support(sum), kept);
  std::vector<float> acc(n, 2.0f);
  c->decode(p0.data(), p0.size(), n, acc.data(), 0.5f, true, a);
  for (size_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(acc[i], 2.0f + 0.5f * sum[i]);
  EXPECT_THROW(decode(*c, std::vector<uint8_t>(4 * k + 4), n, a), DataError);
  EXPECT_THROW(decode(*c, std::vector<uint8_t>(4 * k - 4), n, a), DataError);
  EXPECT_EQ(encode(*c, {}, a).size(), 0u);
  EXPECT_EQ(support(decode(*makeRandomKCodec(ratio(1.0)), encode(*makeRandomKCodec(ratio(1.0)), ones), n)).size(), n);
}

TEST(RandomK, UnbiasedAndUniform) {
  auto c = makeRandomKCodec(ratio(0.1));  // unbiased: values scaled by n/k = 10
  const size_t n = 200, steps = 4000;
  const auto x = gaussian(n, 8);
  std::vector<double> mean(n, 0.0), hits(n, 0.0);
  EncodeCtx ctx;
  ctx.seed = 2024;
  std::vector<float> acc(n);
  for (size_t s = 0; s < steps; ++s) {
    ctx.step = static_cast<int64_t>(s);
    const auto out = decode(*c, encode(*c, x, ctx), n, ctx);
    for (size_t i = 0; i < n; ++i) mean[i] += out[i] / steps, hits[i] += out[i] != 0;
  }
  // Per step, decoded_i is 10·x_i with probability 1/10, else 0: variance 9·x_i², so the mean
  // over `steps` has standard deviation 3|x_i|/sqrt(steps); allow 5 of them.
  for (size_t i = 0; i < n; ++i)
    EXPECT_NEAR(mean[i], x[i], 5 * 3 * std::fabs(x[i]) / std::sqrt(double(steps)) + 1e-6) << i;
  // Every index is kept with probability k/n: chi-square over n cells, n-1 degrees of freedom.
  const double e = steps * 0.1;
  double chi2 = 0;
  for (double h : hits) chi2 += (h - e) * (h - e) / e;
  EXPECT_LT(chi2, (n - 1) + 6 * std::sqrt(2.0 * (n - 1)));
}
