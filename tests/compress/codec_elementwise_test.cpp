// Elementwise codecs (fp16 bf16 int8 sign scaled_sign onebit, and qsgd/terngrad where every codec
// is covered): exactness, error bounds, sizes, accumulate/scale, malformed payloads, and the
// portable kernels agreeing bit for bit with the AVX2 ones. QSGD/TernGrad unbiasedness, variance
// and layouts are in codec_quant_test.cpp (same executable).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "codec_test_util.h"
#include "compress/codecs.h"
#include "compress/simd.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/dtype.h"

using namespace lowcomm;
using namespace lowcomm::compress;
using namespace lowcomm::compress::codec_test;

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

// The one instantiation of BothPaths (codec_test_util.h): also runs the TEST_Ps of
// codec_quant_test.cpp.
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

}  // namespace
