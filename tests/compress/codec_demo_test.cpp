// demo: DeMo's chunked DCT top-k. Kept coefficients are the largest of the orthonormal DCT-II of
// each chunk, a chunk that is one cosine comes back exactly (up to bf16), the payload size is
// exact, and the decoder rejects every malformed payload without writing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "codec_test_util.h"
#include "lowcomm/base/error.h"

using namespace lowcomm;
using namespace lowcomm::compress;
using codec_test::decode;
using codec_test::encode;
using codec_test::randomValues;

namespace {

std::unique_ptr<Codec> demo(double ratio, int64_t chunk) {
  CodecParams p;
  p.ratio = ratio;
  p.chunk = chunk;
  return makeCodec("demo", p);
}

// The orthonormal DCT-II of x, in double: the reference the codec's float transform must match.
std::vector<double> dct(const std::vector<float>& x) {
  const size_t L = x.size();
  std::vector<double> X(L);
  for (size_t k = 0; k < L; ++k) {
    double s = 0;
    for (size_t i = 0; i < L; ++i) s += x[i] * std::cos(M_PI * (i + 0.5) * k / L);
    X[k] = s * std::sqrt((k == 0 ? 1.0 : 2.0) / L);
  }
  return X;
}

}  // namespace

TEST(DemoCodec, AChunkThatIsOneCosineComesBackAndOthersKeepTheirLargestCoefficients) {
  const size_t L = 64, n = 3 * L + 20;  // three full chunks and a short one
  auto c = demo(2.0 / 64, L);
  std::vector<float> x = randomValues(n, 7);
  for (size_t i = 0; i < L; ++i) x[L + i] = 0.5f * static_cast<float>(std::cos(M_PI * (i + 0.5) * 5 / L));
  const auto p = encode(*c, x);
  EXPECT_EQ(p.size(), c->maxBytes(n));
  // 12-byte header, 4 chunks × 2 coefficients: 8 bf16 values and 8 indices of 6 bits.
  EXPECT_EQ(p.size(), 12u + 16u + 6u);
  const auto out = decode(*c, p, n);
  for (size_t i = 0; i < L; ++i) EXPECT_NEAR(out[L + i], x[L + i], 4e-3) << i;  // bf16: 8 bits of mantissa
  for (size_t c0 : {size_t{0}, 2 * L, 3 * L}) {
    const size_t len = std::min(L, n - c0);
    const std::vector<float> part(x.begin() + c0, x.begin() + c0 + len);
    const std::vector<float> back(out.begin() + c0, out.begin() + c0 + len);
    const auto X = dct(part), Y = dct(back);
    std::vector<size_t> order(len);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return std::fabs(X[a]) > std::fabs(X[b]); });
    for (size_t j = 0; j < len; ++j) {
      const double want = j < 2 ? X[order[j]] : 0.0;  // the two largest, rounded to bf16
      EXPECT_NEAR(Y[order[j]], want, 1e-2 * std::fabs(X[order[0]]) + 1e-5) << "chunk " << c0 << " rank " << j;
    }
  }
}

TEST(DemoCodec, RatioOneIsLosslessUpToBf16AndAccumulateScales) {
  auto c = demo(1.0, 16);
  const auto x = randomValues(40, 3);
  const auto p = encode(*c, x);
  const auto out = decode(*c, p, x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(out[i], x[i], 2e-2 * (std::fabs(x[i]) + 1)) << i;
  std::vector<float> acc(x.size(), 1.0f);
  c->decode(p.data(), p.size(), x.size(), acc.data(), 0.5f, true, {});
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(acc[i], 1.0f + 0.5f * out[i], 1e-6) << i;
  EXPECT_EQ(decode(*c, encode(*c, {}), 0).size(), 0u);
}

TEST(DemoCodec, DefaultChunkBadParametersAndNonFiniteValues) {
  EXPECT_EQ(demo(1.0 / 64, 0)->maxBytes(64), 12u + 2u + 1u);  // chunk 0 = 64: one 6-bit index
  EXPECT_THROW(demo(0.0, 64), ConfigError);
  EXPECT_THROW(demo(0.1, 1), ConfigError);
  EXPECT_THROW(demo(0.1, 2048), ConfigError);  // the transform costs `chunk` per value, its basis chunk²
  auto c = demo(0.1, 32);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    auto x = randomValues(100, 4);
    x[40] = bad;
    EXPECT_THROW(decode(*c, encode(*c, x), x.size()), DataError);
  }
}

TEST(DemoCodec, MalformedPayloadsAreDataErrorsAndLeaveOutputUntouched) {
  auto c = demo(3.0 / 32, 32);
  const size_t n = 75;
  const auto good = encode(*c, randomValues(n, 5));
  // `why`: a piece of the message, so that each case is refused by the check it targets.
  auto expectBad = [&](std::vector<uint8_t> p, const std::string& what, const std::string& why = "") {
    std::vector<float> out(n, 9.0f);
    try {
      c->decode(p.data(), p.size(), n, out.data(), 1.0f, false, {});
      ADD_FAILURE() << what << ": accepted";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << what << ": " << e.what();
    }
    EXPECT_EQ(out, std::vector<float>(n, 9.0f)) << what;
  };
  for (size_t len = 0; len < good.size(); ++len)
    expectBad(std::vector<uint8_t>(good.begin(), good.begin() + len), "truncated to " + std::to_string(len));
  auto p = good;
  p.push_back(0);
  expectBad(p, "trailing byte");
  auto u32 = [](std::vector<uint8_t>& b, size_t off, uint32_t v) { std::memcpy(b.data() + off, &v, 4); };
  p = good;
  u32(p, 4, 64);
  expectBad(p, "another chunk size", "differ");
  p = good;
  u32(p, 8, 2);
  expectBad(p, "another k", "differ");
  p = good;
  p[0] = 'L';
  expectBad(p, "another codec's tag", "tag");
  p = good;
  p[1] = 1;
  expectBad(p, "reserved byte");
  p = good;
  const uint16_t inf = 0x7f80;  // bf16 +inf as the first coefficient
  std::memcpy(p.data() + 12, &inf, 2);
  expectBad(p, "infinite coefficient", "not finite");
  // 3 chunks (32, 32, 11) × 3 coefficients: 9 values (18 bytes), then 9 indices of 5 bits.
  ASSERT_EQ(good.size(), 12u + 18u + 6u);
  const size_t bits = 12 + 18;
  p = good;
  {
    // first index (bits 0..4) = 31, second (bits 5..9) = 0: not increasing
    uint16_t w;
    std::memcpy(&w, p.data() + bits, 2);
    w = static_cast<uint16_t>((w & ~0x3ffu) | 31u);
    std::memcpy(p.data() + bits, &w, 2);
  }
  expectBad(p, "indices not increasing", "not increasing");
  p = good;
  {
    // the third chunk has 11 values: its first index (bits 30..34) = 20 is outside it
    uint64_t w = 0;
    std::memcpy(&w, p.data() + bits, 5);
    w = (w & ~(uint64_t{0x1f} << 30)) | (uint64_t{20} << 30);
    std::memcpy(p.data() + bits, &w, 5);
  }
  expectBad(p, "index outside the short chunk", "outside its chunk of 11");
  p = good;
  p.back() |= 0x80;  // 45 bits of indices: the last 3 bits are padding
  expectBad(p, "padding", "padding");
}
