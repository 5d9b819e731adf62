// QSGD and TernGrad (blockwise scales): unbiasedness and determinism, per-block variance against
// the papers' bounds, and the payload layouts (alignment, sizes) with parameter validation. The
// other elementwise codecs are in codec_elementwise_test.cpp (same executable).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "codec_test_util.h"
#include "compress/codecs.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/dtype.h"

using namespace lowcomm;
using namespace lowcomm::compress;
using namespace lowcomm::compress::codec_test;

namespace {

// ||x||², ||x||_1, max|x| and size of each block of `block` values.
struct BlockStats {
  double l2 = 0, l1 = 0, mx = 0, d = 0;
};
std::vector<BlockStats> blockStats(const std::vector<float>& x, size_t block) {
  std::vector<BlockStats> v((x.size() + block - 1) / block);
  for (size_t i = 0; i < x.size(); ++i) {
    auto& b = v[i / block];
    const double a = std::fabs(x[i]);
    b.l2 += a * a, b.l1 += a, b.mx = std::max(b.mx, a), b.d += 1;
  }
  return v;
}

// Per value, the variance of its decoded value with a scale per `block` values: a Bernoulli
// choice between neighbouring multiples of the step ||block||/s (qsgd), or of max|block|
// (terngrad, s = 0: variance max·|x| - x²).
std::vector<double> exactVariance(const std::vector<float>& x, size_t block, int64_t s) {
  const auto st = blockStats(x, block);
  std::vector<double> var;
  for (size_t i = 0; i < x.size(); ++i) {
    const double step = s ? std::sqrt(st[i / block].l2) / s : st[i / block].mx;
    const double a = step > 0 ? std::fabs(x[i]) / step : 0, f = a - std::floor(a);
    var.push_back(step * step * f * (1 - f));
  }
  return var;
}

// Mean of `steps` decodes of x (ctx.step = 0..steps-1) against x, with the per-value variance
// var(i): within 5 standard deviations of the sample mean (+ the 2^-16 rounding resolution).
void expectUnbiased(const Codec& c, const std::vector<float>& x, int steps, const std::vector<double>& var,
                    double resolution) {
  std::vector<double> sum(x.size(), 0.0);
  std::vector<float> out(x.size());
  EncodeCtx ctx;
  ctx.seed = 42;
  for (int s = 0; s < steps; ++s) {
    ctx.step = s;
    auto p = encode(c, x, ctx);
    c.decode(p.data(), p.size(), x.size(), out.data(), 1.f, false, ctx);
    for (size_t i = 0; i < x.size(); ++i) sum[i] += out[i];
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const double mean = sum[i] / steps, tol = 5 * std::sqrt(var[i] / steps) + resolution + 1e-6 * std::fabs(x[i]);
    EXPECT_NEAR(mean, x[i], tol) << c.name() << " value " << i;
  }
}

// Blocks of 16 with very different magnitudes; the last block holds one value.
std::vector<float> unbiasedInput() {
  std::vector<float> x = {0.f, 1e-6f, -3e-3f, 0.3f, -0.77f, 1.f, 2.5f, -4.f};
  auto r = randomValues(57, 11);
  x.insert(x.end(), r.begin(), r.end());
  for (size_t i = 16; i < 48; ++i) x[i] *= i < 32 ? 1e-3f : 50.f;
  return x;
}

TEST_P(BothPaths, QsgdAndTernGradAreUnbiasedAndDeterministic) {
  const auto x = unbiasedInput();
  CodecParams p;
  // (levels, block), levels 0: terngrad. Blocks of 9 and 12 end inside bytes of the packed
  // levels / bit planes.
  using Cases = std::vector<std::pair<int64_t, size_t>>;
  for (auto [s, B] : Cases{{0, 16}, {1, 16}, {4, 16}, {16, 16}, {0, 12}, {4, 9}, {16, 9}}) {
    p.levels = std::max<int64_t>(s, 1);
    p.block = static_cast<int64_t>(B);
    auto c = s ? makeQsgdCodec(p) : makeTernGradCodec(p);
    const auto st = blockStats(x, B);
    double step = 0;
    for (const auto& b : st) step = std::max(step, s ? std::sqrt(b.l2) / s : b.mx);
    expectUnbiased(*c, x, 2000, exactVariance(x, B, s), step * std::ldexp(1.0, -16));
    EncodeCtx a, b = a, r = a, k = a;
    b.step = 1, r.rank = 1, k.chunk = 3;
    const auto pa = encode(*c, x, a);
    EXPECT_EQ(pa, encode(*c, x, a));
    EXPECT_TRUE(pa != encode(*c, x, b) && pa != encode(*c, x, r) && pa != encode(*c, x, k));
    const auto y = decode(*c, pa, x.size());
    for (size_t i = 0; i < x.size() && s == 0; ++i)  // terngrad: 0 or ±max|block|
      EXPECT_TRUE(y[i] == 0 || std::fabs(y[i]) == static_cast<float>(st[i / B].mx)) << i;
  }
}

// Block i scaled by 10^(i%5): the mean squared error matches the per-block variance, is within
// the papers' bounds summed over blocks, and far below what one scale for all values gives.
TEST_P(BothPaths, BlockwiseVarianceWithinBounds) {
  const size_t B = 256, n = 400 * B + 100, steps = 40;
  auto x = randomValues(n, 21);
  for (size_t i = 0; i < n; ++i) x[i] *= static_cast<float>(std::pow(10.0, i / B % 5));
  CodecParams p;
  p.block = static_cast<int64_t>(B);
  for (int64_t s : {0, 1, 4, 16}) {  // 0: terngrad
    p.levels = std::max<int64_t>(s, 1);
    auto c = s ? makeQsgdCodec(p) : makeTernGradCodec(p);
    double bound = 0;  // QSGD's min(d/s², √d/s)·||x||² (Lemma 3.1); TernGrad's exact variance
    for (const auto& b : blockStats(x, B))
      bound += s ? std::min(b.d / static_cast<double>(s * s), std::sqrt(b.d) / s) * b.l2 : b.mx * b.l1 - b.l2;
    const auto vb = exactVariance(x, B, s), vg = exactVariance(x, n, s);  // vg: one scale for all
    double mse[2] = {}, exact[2] = {}, global[2] = {};  // all values; the blocks of magnitude 1
    std::vector<float> out(n);
    for (size_t step = 0; step < steps; ++step) {
      EncodeCtx ctx;
      ctx.step = static_cast<int64_t>(step);
      const auto payload = encode(*c, x, ctx);
      c->decode(payload.data(), payload.size(), n, out.data(), 1.f, false, ctx);
      for (size_t i = 0; i < n; ++i) {
        const double e = (static_cast<double>(out[i]) - x[i]) * (static_cast<double>(out[i]) - x[i]) / steps;
        mse[0] += e;
        mse[1] += i / B % 5 ? 0 : e;
      }
    }
    for (size_t i = 0; i < n; ++i)
      for (int k = 0; k < (i / B % 5 ? 1 : 2); ++k) exact[k] += vb[i], global[k] += vg[i];
    const std::string what = c->name() + " s=" + std::to_string(s);
    for (int k : {0, 1}) EXPECT_NEAR(mse[k], exact[k], 0.05 * exact[k]) << what;
    EXPECT_LE(exact[0], bound * (1 + 1e-9)) << what;  // equal for terngrad
    EXPECT_LE(mse[0], bound * 1.05) << what;
    EXPECT_LT(mse[0], global[0] / (s ? 8 : 1.5)) << what;
    EXPECT_LT(mse[1], global[1] / 1000) << what;
  }
}

TEST(ElementwiseCodecs, ParametersAreValidated) {
  CodecParams p;
  for (int64_t b : {-1, 0, 7, (1 << 20) + 1}) {
    p.block = b;
    EXPECT_THROW(makeInt8Codec(p), ConfigError) << b;
    EXPECT_THROW(makeQsgdCodec(p), ConfigError) << b;
    EXPECT_THROW(makeTernGradCodec(p), ConfigError) << b;
  }
  for (int64_t b : {8, 9, 1 << 20}) {
    p.block = b;
    EXPECT_NO_THROW(makeInt8Codec(p));
    EXPECT_NO_THROW(makeQsgdCodec(p));
    EXPECT_NO_THROW(makeTernGradCodec(p));
  }
  p.block = 256;
  for (int64_t s : {0, 128, -3}) {
    p.levels = s;
    EXPECT_THROW(makeQsgdCodec(p), ConfigError) << s;
  }
  // (levels: 0 terngrad, block, alignment, sizes for n = 0 1 9 16 40): one f32 scale per block
  // first; alignment a multiple of the block, of 2 with nibbles, of 8 with bit planes.
  using Sizes = std::vector<size_t>;
  for (const auto& [s, b, align, sizes] : std::vector<std::tuple<int64_t, int64_t, size_t, Sizes>>{
           {7, 16, 16, {0, 4 + 1, 4 + 5, 4 + 8, 12 + 20}},
           {8, 16, 16, {0, 4 + 1, 4 + 9, 4 + 16, 12 + 40}},
           {0, 16, 16, {0, 4 + 2, 4 + 4, 4 + 4, 12 + 10}},
           {7, 9, 18, {0, 4 + 1, 4 + 5, 8 + 8, 20 + 20}},
           {8, 9, 9, {0, 4 + 1, 4 + 9, 8 + 16, 20 + 40}},
           {0, 9, 72, {0, 4 + 2, 4 + 4, 8 + 4, 20 + 10}},
           {0, 12, 24, {0, 4 + 2, 4 + 4, 8 + 4, 16 + 10}}}) {
    p.levels = std::max<int64_t>(s, 1), p.block = b;
    const auto c = s ? makeQsgdCodec(p) : makeTernGradCodec(p);
    EXPECT_EQ(c->alignment(), align) << s << " " << b;
    const Sizes ns = {0, 1, 9, 16, 40};
    for (size_t k = 0; k < ns.size(); ++k) EXPECT_EQ(c->maxBytes(ns[k]), sizes[k]) << s << " " << b << " n=" << ns[k];
  }
  EXPECT_EQ(makeSignCodec()->maxBytes(9), 2u);
  EXPECT_EQ(makeScaledSignCodec()->maxBytes(9), 6u);
  EXPECT_EQ(makeOneBitCodec()->maxBytes(9), 10u);
  EXPECT_EQ(makeFp16Codec()->combine(), Combine::allreduce);
  EXPECT_EQ(makeBf16Codec()->wireType(), comm::DType::bf16);
  EXPECT_EQ(makeOneBitCodec()->alignment(), 8u);
}

}  // namespace
