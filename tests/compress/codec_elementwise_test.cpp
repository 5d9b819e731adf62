// Elementwise codecs (fp16 bf16 int8 qsgd terngrad sign scaled_sign onebit): exactness, error
// bounds, unbiasedness and blockwise variance, sizes, accumulate/scale, malformed payloads, and
// the portable kernels agreeing bit for bit with the AVX2 ones.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "compress/codecs.h"
#include "compress/simd.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/dtype.h"

using namespace lowcomm;
using namespace lowcomm::compress;

namespace {

struct Named {
  std::string label;
  std::unique_ptr<Codec> codec;
};

std::vector<Named> allCodecs() {
  std::vector<Named> v;
  CodecParams p;
  v.push_back({"fp16", makeFp16Codec()});
  v.push_back({"bf16", makeBf16Codec()});
  for (int64_t b : {8, 256}) {
    p.block = b;
    v.push_back({"int8/" + std::to_string(b), makeInt8Codec(p)});
  }
  // (levels, block), levels 0: terngrad. Blocks of 9, 12, 24, 100 start inside an RNG block,
  // a nibble byte or a plane byte.
  for (auto [s, b] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 256}, {4, 256}, {7, 256}, {8, 256}, {127, 256}, {4, 9}, {7, 100}, {16, 24}, {0, 8}, {0, 12}, {0, 256}}) {
    p.levels = std::max<int64_t>(s, 1), p.block = b;
    const std::string l = (s ? "qsgd/" + std::to_string(s) : "terngrad") + "/b" + std::to_string(b);
    v.push_back({l, s ? makeQsgdCodec(p) : makeTernGradCodec(p)});
  }
  v.push_back({"sign", makeSignCodec()});
  v.push_back({"scaled_sign", makeScaledSignCodec()});
  v.push_back({"onebit", makeOneBitCodec()});
  return v;
}

std::vector<float> randomValues(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(n);
  for (auto& v : x) v = d(g);
  if (n > 3) x[n / 3] = 0.f;
  return x;
}

std::vector<uint8_t> encode(const Codec& c, const std::vector<float>& x, const EncodeCtx& ctx = {}) {
  std::vector<uint8_t> p(c.maxBytes(x.size()));
  const size_t bytes = c.encode(x.data(), x.size(), p.data(), ctx);
  EXPECT_EQ(bytes, p.size()) << c.name();
  return p;
}

std::vector<float> decode(const Codec& c, const std::vector<uint8_t>& p, size_t n, float scale = 1.f) {
  std::vector<float> out(n, 12345.f);
  c.decode(p.data(), p.size(), n, out.data(), scale, false, {});
  return out;
}

float f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Runs the body once with the AVX2 kernels (where the CPU has them) and once portable.
class BothPaths : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { simd::setSimdEnabled(GetParam()); }
  void TearDown() override { simd::setSimdEnabled(true); }
};
INSTANTIATE_TEST_SUITE_P(Simd, BothPaths, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "avx2" : "portable"; });

TEST_P(BothPaths, HalfAndBf16MatchCommConversions) {
  auto fp16 = makeFp16Codec(), bf16 = makeBf16Codec();
  std::vector<float> x = {
      0.f,          -0.f,         1.f,          -2.f,       65504.f, 65519.f,         65520.f,         1e6f,   -1e-8f,
      5.960464e-8f, 2.980232e-8f, 2.980233e-8f, 6.1035e-5f, 6.1e-5f, f32(0x00000001), f32(0x807fffff), 3.4e38f};
  std::mt19937 g(7);
  while (x.size() < 20000) {
    const float v = f32(static_cast<uint32_t>(g()));
    if (std::isfinite(v)) x.push_back(v);
    x.push_back(std::ldexp(static_cast<float>(g() % 4096) - 2048.f, static_cast<int>(g() % 60) - 40));
  }
  const auto h = encode(*fp16, x), b = encode(*bf16, x);
  for (size_t i = 0; i < x.size(); ++i) {
    uint16_t hv, bv;
    std::memcpy(&hv, &h[2 * i], 2);
    std::memcpy(&bv, &b[2 * i], 2);
    ASSERT_EQ(hv, comm::floatToHalf(x[i])) << x[i];
    ASSERT_EQ(bv, comm::floatToBf16(x[i])) << x[i];
  }
  // Every 16-bit pattern decodes as comm does (nan to some nan); finite ones round-trip.
  std::vector<uint8_t> all(2 * 65536);
  for (uint32_t v = 0; v < 65536; ++v) std::memcpy(&all[2 * v], &v, 2);
  const auto hd = decode(*fp16, all, 65536), bd = decode(*bf16, all, 65536);
  for (uint32_t v = 0; v < 65536; ++v) {
    const float hr = comm::halfToFloat(static_cast<uint16_t>(v)), br = comm::bf16ToFloat(static_cast<uint16_t>(v));
    if (std::isnan(hr)) {
      ASSERT_TRUE(std::isnan(hd[v]));
    } else {
      ASSERT_EQ(bits(hd[v]), bits(hr)) << std::hex << v;
      ASSERT_EQ(encode(*fp16, {hr}), std::vector<uint8_t>(&all[2 * v], &all[2 * v] + 2));
    }
    if (std::isnan(br)) {
      ASSERT_TRUE(std::isnan(bd[v]));
    } else {
      ASSERT_EQ(bits(bd[v]), bits(br)) << std::hex << v;
      ASSERT_EQ(encode(*bf16, {br}), std::vector<uint8_t>(&all[2 * v], &all[2 * v] + 2));
    }
  }
  const auto special = decode(*fp16, encode(*fp16, {NAN, INFINITY, -INFINITY}), 3);
  EXPECT_TRUE(std::isnan(special[0]));
  EXPECT_EQ(special[1], INFINITY);
  EXPECT_EQ(special[2], -INFINITY);
  EXPECT_TRUE(std::isnan(decode(*bf16, encode(*bf16, {NAN}), 1)[0]));
}

TEST_P(BothPaths, Int8ErrorWithinHalfAScalePerBlock) {
  for (int64_t block : {8, 100, 256}) {
    CodecParams p;
    p.block = block;
    auto c = makeInt8Codec(p);
    EXPECT_EQ(c->alignment(), static_cast<size_t>(block));
    auto x = randomValues(5003, 3);
    for (size_t i = 0; i < 40; ++i) x[i] *= 1e-38f;  // tiny blocks: 127/max overflows
    const auto payload = encode(*c, x);
    const auto y = decode(*c, payload, x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const size_t b = i / block;
      float mx = 0;
      for (size_t j = b * block; j < std::min(x.size(), (b + 1) * block); ++j) mx = std::max(mx, std::fabs(x[j]));
      float scale;
      std::memcpy(&scale, &payload[4 * b], 4);
      ASSERT_EQ(scale, mx / 127.f);
      // scale/2, up to float rounding (the encoder multiplies by 127/max rather than divide)
      ASSERT_LE(std::fabs(y[i] - x[i]), scale * (0.5f + 1e-4f) + 1e-45f) << i;
    }
  }
}

TEST_P(BothPaths, Int8ExactOnTheGrid) {
  CodecParams p;
  p.block = 16;
  auto c = makeInt8Codec(p);
  std::vector<float> x;
  for (int k = -127; k <= 127; ++k) x.push_back(std::ldexp(static_cast<float>(k), -10 + (k + 127) / 16 % 5));
  for (size_t b = 0; b < x.size(); b += 16) x[b] = std::ldexp(127.f, -10 + static_cast<int>(b / 16) % 5);
  EXPECT_EQ(decode(*c, encode(*c, x), x.size()), x);
}

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

TEST_P(BothPaths, SignCodecsDecodeExactly) {
  const std::vector<float> x = {1.5f, -2.f, 0.f, -0.f, f32(1), -1e30f, 3.f, -0.25f, 7.f};
  auto sign = makeSignCodec(), scaled = makeScaledSignCodec(), onebit = makeOneBitCodec();
  EXPECT_EQ(decode(*sign, encode(*sign, x), x.size()), (std::vector<float>{1, -1, 1, 1, 1, -1, 1, -1, 1}));
  double abs = 0, pos = 0, neg = 0;
  int np = 0, nn = 0;
  for (float v : x) {
    abs += std::fabs(v);
    (v >= 0 ? pos : neg) += v;
    (v >= 0 ? np : nn) += 1;
  }
  const float m = static_cast<float>(abs / x.size()), mp = static_cast<float>(pos / np),
              mn = static_cast<float>(neg / nn);
  EXPECT_EQ(decode(*scaled, encode(*scaled, x), x.size()), (std::vector<float>{m, -m, m, m, m, -m, m, -m, m}));
  EXPECT_EQ(decode(*onebit, encode(*onebit, x), x.size()), (std::vector<float>{mp, mn, mp, mp, mp, mn, mp, mn, mp}));
  // All one side: the other mean is 0. NaN is negative for sign, refused by the scaled codecs.
  EXPECT_EQ(decode(*onebit, encode(*onebit, {-1.f, -3.f}), 2), (std::vector<float>{-2.f, -2.f}));
  EXPECT_EQ(decode(*sign, encode(*sign, {NAN}), 1)[0], -1.f);
}

TEST_P(BothPaths, SignMajorityVote) {
  // 5 ranks vote on 11 values; the owner sums decoded ±1/world and re-encodes the sum.
  const int world = 5;
  const size_t n = 11;
  auto sign = makeSignCodec();
  std::mt19937 g(5);
  std::vector<std::vector<float>> votes(world, std::vector<float>(n));
  for (auto& v : votes)
    for (auto& e : v) e = g() % 2 ? 1.f : -1.f;
  std::vector<float> sum(n, 0.f);
  for (const auto& v : votes) {
    const auto p = encode(*sign, v);
    sign->decode(p.data(), p.size(), n, sum.data(), 1.f / world, true, {});
  }
  const auto result = decode(*sign, encode(*sign, sum), n);
  for (size_t i = 0; i < n; ++i) {
    int pos = 0;
    for (const auto& v : votes) pos += v[i] > 0;
    EXPECT_EQ(result[i], pos * 2 > world ? 1.f : -1.f) << i;
  }
  EXPECT_EQ(decode(*sign, encode(*sign, {0.f}), 1)[0], 1.f);  // a tie (even world) gives +1
}

TEST_P(BothPaths, EverySizeAccumulateAndScale) {
  const auto codecs = allCodecs();
  for (size_t n : {0, 1, 7, 8, 9, 100, 1000003}) {
    const auto x = randomValues(n, static_cast<uint32_t>(n));
    std::vector<float> plain(n + 4), acc(n + 4);
    for (const auto& [label, c] : codecs) {
      std::vector<uint8_t> p(c->maxBytes(n) + 16, 0xcd);  // canary after the payload
      const size_t bytes = c->encode(x.data(), n, p.data(), {});
      ASSERT_EQ(bytes, c->maxBytes(n)) << label << " n=" << n;
      for (size_t i = bytes; i < p.size(); ++i) ASSERT_EQ(p[i], 0xcd) << label << " wrote past the payload";
      std::fill(plain.begin(), plain.end(), -7.f);
      std::fill(acc.begin(), acc.end(), 1.f);
      c->decode(p.data(), bytes, n, plain.data(), 1.f, false, {});
      c->decode(p.data(), bytes, n, acc.data(), 2.f, true, {});
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], 1.f + 2.f * plain[i]) << label << " n=" << n << " i=" << i;
      for (size_t i = n; i < n + 4; ++i) ASSERT_TRUE(plain[i] == -7.f && acc[i] == 1.f) << label << " out of bounds";
    }
  }
}

TEST(ElementwiseCodecs, PortableAndAvx2KernelsAgree) {
  for (const auto& [label, c] : allCodecs()) {
    for (size_t n : {1, 15, 16, 33, 64, 1000, 4099, 70001}) {
      auto x = randomValues(n, 9);
      EncodeCtx ctx;
      ctx.seed = 3;
      ctx.step = static_cast<int64_t>(n);
      simd::setSimdEnabled(true);
      const auto pa = encode(*c, x, ctx);
      std::vector<float> da(n, 1.f), db(n, 1.f);
      c->decode(pa.data(), pa.size(), n, da.data(), 0.75f, true, ctx);
      simd::setSimdEnabled(false);
      const auto pb = encode(*c, x, ctx);
      c->decode(pb.data(), pb.size(), n, db.data(), 0.75f, true, ctx);
      ASSERT_EQ(pa, pb) << label << " n=" << n;
      ASSERT_EQ(0, std::memcmp(da.data(), db.data(), 4 * n)) << label << " n=" << n;
    }
  }
  simd::setSimdEnabled(true);
}

// untouched: the decoder must refuse before writing anything.
void expectDataError(const Codec& c, const std::vector<uint8_t>& p, size_t n, const std::string& what,
                     bool untouched = false) {
  std::vector<float> out(n + 1, 0.f);
  EXPECT_THROW(c.decode(p.data(), p.size(), n, out.data(), 1.f, false, {}), DataError) << c.name() << ": " << what;
  EXPECT_EQ(out[n], 0.f) << c.name() << ": wrote out of bounds";
  if (untouched) {
    EXPECT_EQ(out, std::vector<float>(n + 1, 0.f)) << c.name() << ": wrote before refusing " << what;
  }
}

TEST_P(BothPaths, MalformedPayloadsAreDataErrors) {
  for (const auto& [label, c] : allCodecs()) {
    for (size_t n : {0, 9, 64}) {
      auto p = encode(*c, randomValues(n, 1));
      auto longer = p, shorter = p;
      longer.push_back(0);
      expectDataError(*c, longer, n, "too long");
      if (!shorter.empty()) {
        shorter.pop_back();
        expectDataError(*c, shorter, n, "too short");
      }
      const bool header = label != "sign" && c->combine() == Combine::two_phase && p.size() >= 4;
      if (header && n > 0) {
        for (float bad : {NAN, INFINITY, -1.f}) {
          auto q = p;
          std::memcpy(q.data(), &bad, 4);
          expectDataError(*c, q, n, "bad scale");
        }
      }
    }
  }
  CodecParams p;
  p.block = 16;
  for (int64_t s : {4, 16, 0}) {  // 0: terngrad. Every block's scale is checked before decoding.
    p.levels = std::max<int64_t>(s, 1);
    const auto c = s ? makeQsgdCodec(p) : makeTernGradCodec(p);
    const auto q = encode(*c, randomValues(50, 4));
    for (size_t j = 0; j < 4; ++j)
      for (float bad : {NAN, INFINITY, -INFINITY, -1.f, -0x1p-149f}) {
        auto b = q;
        std::memcpy(&b[4 * j], &bad, 4);
        expectDataError(*c, b, 50, "bad scale of block " + std::to_string(j), true);
      }
  }
  p = CodecParams{};
  auto int8 = makeInt8Codec(p);
  for (size_t n : {10, 100}) {  // the portable tail, and the AVX2 loop
    auto q = encode(*int8, randomValues(n, 2));
    q[4 + n / 3] = 0x80;  // -128
    expectDataError(*int8, q, n, "int8 -128");
  }
  for (int64_t s : {4, 7, 16}) {
    p.levels = s;
    auto qsgd = makeQsgdCodec(p);
    for (size_t n : {9, 101}) {
      const size_t at = 4 + (s <= 7 ? n / 5 : n / 3);  // a payload byte of the portable tail / AVX2 loop
      const auto q = encode(*qsgd, randomValues(n, 2));
      auto bad = q;
      bad[at] = 0x80;  // high nibble -8, or byte -128
      expectDataError(*qsgd, bad, n, "qsgd level -8/-128");
      bad = q;
      bad[at] = static_cast<uint8_t>(s + 1);  // low nibble or byte s+1 (for s = 7: the nibble -8)
      expectDataError(*qsgd, bad, n, "qsgd level s+1");
      if (s <= 7) {
        bad = q;
        bad.back() |= 0x10;  // the padding nibble after the last value
        expectDataError(*qsgd, bad, n, "qsgd padding");
      }
    }
  }
  std::vector<uint8_t> q;
  auto tern = makeTernGradCodec(CodecParams{});
  q = encode(*tern, std::vector<float>(9, 0.f));
  q[4 + 2] = 1;  // negative plane bit 0 without the nonzero bit
  expectDataError(*tern, q, 9, "terngrad negative without nonzero");
  q = encode(*tern, std::vector<float>(9, 0.f));
  q[4 + 1] = 0x02;  // nonzero bit of value 9 (padding)
  expectDataError(*tern, q, 9, "terngrad padding");
  auto sign = makeSignCodec();
  expectDataError(*sign, {0x00, 0x02}, 9, "sign padding");
}

TEST_P(BothPaths, RandomPayloadsNeverCrash) {
  std::mt19937 g(17);
  for (const auto& [label, c] : allCodecs())
    for (int trial = 0; trial < 200; ++trial) {
      const size_t n = g() % 70;
      std::vector<uint8_t> p(c->maxBytes(n));
      for (auto& b : p) b = static_cast<uint8_t>(g() % 4 ? g() % 16 : g());
      std::vector<float> out(n + 1, 0.f);
      try {
        c->decode(p.data(), p.size(), n, out.data(), 1.f, true, {});
      } catch (const DataError&) {
      }
      ASSERT_EQ(out[n], 0.f) << label;
    }
}

TEST(ElementwiseCodecs, NonFiniteInputIsRefusedByScaledCodecs) {
  CodecParams p;
  std::vector<std::unique_ptr<Codec>> codecs;
  codecs.push_back(makeInt8Codec(p));
  codecs.push_back(makeQsgdCodec(p));
  codecs.push_back(makeTernGradCodec(p));
  p.block = 16;  // the bad value in a later block
  codecs.push_back(makeQsgdCodec(p));
  codecs.push_back(makeTernGradCodec(p));
  codecs.push_back(makeScaledSignCodec());
  codecs.push_back(makeOneBitCodec());
  for (const auto& c : codecs)
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      std::vector<float> x(300, 1.f);
      x[200] = bad;
      std::vector<uint8_t> out(c->maxBytes(x.size()));
      EXPECT_THROW(c->encode(x.data(), x.size(), out.data(), {}), DataError) << c->name();
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
