// Helpers shared by the elementwise codec tests (codec_elementwise_test.cpp, codec_quant_test.cpp,
// one executable): random inputs, encode/decode round trips, and the BothPaths fixture.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "compress/codecs.h"
#include "compress/simd.h"

namespace lowcomm::compress::codec_test {

// n normal values; the one at n/3 is zero (for n > 3).
inline std::vector<float> randomValues(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(n);
  for (auto& v : x) v = d(g);
  if (n > 3) x[n / 3] = 0.f;
  return x;
}

inline std::vector<uint8_t> encode(const Codec& c, const std::vector<float>& x, const EncodeCtx& ctx = {}) {
  std::vector<uint8_t> p(c.maxBytes(x.size()));
  const size_t bytes = c.encode(x.data(), x.size(), p.data(), ctx);
  EXPECT_EQ(bytes, p.size()) << c.name();
  return p;
}

inline std::vector<float> decode(const Codec& c, const std::vector<uint8_t>& p, size_t n, float scale = 1.f) {
  std::vector<float> out(n, 12345.f);
  c.decode(p.data(), p.size(), n, out.data(), scale, false, {});
  return out;
}

// Runs the body once with the AVX2 kernels (where the CPU has them) and once portable. One
// fixture class for both files (a named namespace, so the same type in each); it is instantiated
// once, in codec_elementwise_test.cpp, which covers the TEST_Ps of both files.
class BothPaths : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { simd::setSimdEnabled(GetParam()); }
  void TearDown() override { simd::setSimdEnabled(true); }
};

}  // namespace lowcomm::compress::codec_test
