// sparseloco: top-k inside every chunk, 2-bit values from a 4-entry table of bin means, an exact
// payload size, and a decoder that rejects every malformed payload without writing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <set>

#include "codec_test_util.h"
#include "lowcomm/base/error.h"

using namespace lowcomm;
using namespace lowcomm::compress;
using codec_test::decode;
using codec_test::encode;
using codec_test::randomValues;

namespace {

std::unique_ptr<Codec> sparseloco(double ratio, int64_t chunk) {
  CodecParams p;
  p.ratio = ratio;
  p.chunk = chunk;
  return makeCodec("sparseloco", p);
}

// Indices of the k largest |x| of each chunk (ties by lower index), by sorting.
std::set<size_t> chunkTopK(const std::vector<float>& x, size_t chunk, size_t k) {
  std::set<size_t> keep;
  for (size_t c0 = 0; c0 < x.size(); c0 += chunk) {
    std::vector<size_t> i(std::min(chunk, x.size() - c0));
    std::iota(i.begin(), i.end(), c0);
    std::stable_sort(i.begin(), i.end(), [&](size_t a, size_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
    for (size_t j = 0; j < std::min(k, i.size()); ++j) keep.insert(i[j]);
  }
  return keep;
}

}  // namespace

TEST(SparseLoCoCodec, KeepsTheTopKOfEveryChunkWithFourValues) {
  const size_t chunk = 64, k = 2, n = 64 * 10 + 37;  // a short last chunk
  auto c = sparseloco(2.0 / 64, chunk);
  auto x = randomValues(n, 3);
  for (size_t i = 128; i < 192; ++i) x[i] *= 100;  // a loud chunk cannot take the others' share
  const auto p = encode(*c, x);
  EXPECT_EQ(p.size(), c->maxBytes(n));
  // 12-byte header, 4 floats, 11 chunks of 2 values at 6 + 2 bits: one byte each.
  EXPECT_EQ(p.size(), 12u + 16u + 22u);
  const auto out = decode(*c, p, n);
  const auto want = chunkTopK(x, chunk, k);
  std::set<float> values;
  for (size_t i = 0; i < n; ++i) {
    if (want.count(i)) {
      EXPECT_NE(out[i], 0.0f) << i;
      values.insert(out[i]);
    } else {
      EXPECT_EQ(out[i], 0.0f) << i;
    }
  }
  EXPECT_LE(values.size(), 4u);
  // Each value is its bin's mean: within one bin width (1.5 sd of the kept values) unless clamped.
  std::vector<double> kept;
  for (size_t i : want) kept.push_back(x[i]);
  const double m = std::accumulate(kept.begin(), kept.end(), 0.0) / kept.size();
  double sq = 0;
  for (double v : kept) sq += (v - m) * (v - m);
  const double sd = std::sqrt(sq / kept.size());
  for (size_t i : want)
    if (std::fabs(x[i] - m) < 3 * sd) {
      EXPECT_LE(std::fabs(out[i] - x[i]), 1.5 * sd + 1e-4) << i;
    }
}

TEST(SparseLoCoCodec, SignsSurviveAndTheMeanOfEachBinIsPreserved) {
  auto c = sparseloco(0.03125, 4096);  // SparseLoCo's 128 of 4096
  const auto x = randomValues(3 * 4096, 9);
  const auto out = decode(*c, encode(*c, x), x.size());
  double sent = 0, kept = 0;
  size_t nonzero = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (out[i] != 0) {
      ++nonzero;
      EXPECT_EQ(std::signbit(out[i]), std::signbit(x[i])) << i;
      sent += out[i];
      kept += x[i];
    }
  EXPECT_EQ(nonzero, 3u * 128u);
  EXPECT_NEAR(sent, kept, 1e-2);  // bin means: the sum of what is kept is preserved
  // Index bits: 12 per value + 2 for its code: 14 bits against 32 bits of float.
  EXPECT_EQ(c->maxBytes(x.size()), 28u + 3u * 128u * 14u / 8u);
}

TEST(SparseLoCoCodec, ScaleAccumulateAndTinyInputs) {
  auto c = sparseloco(0.5, 4);
  const std::vector<float> x = {4.0f, -1.0f, 0.5f, -8.0f, 2.0f};
  const auto p = encode(*c, x);
  std::vector<float> acc(5, 1.0f);
  c->decode(p.data(), p.size(), 5, acc.data(), 0.5f, true, {});
  const auto once = decode(*c, p, 5);
  for (size_t i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(acc[i], 1.0f + 0.5f * once[i]);
  EXPECT_EQ(once[1], 0.0f);  // chunk 0 keeps 4 and -8; chunk 1 (one value) keeps 2
  EXPECT_EQ(once[2], 0.0f);
  EXPECT_GT(once[4], 0.0f);
  const auto empty = encode(*c, {});
  EXPECT_EQ(decode(*c, empty, 0).size(), 0u);
  // All equal: a zero deviation puts every value in one bin, sent exactly.
  const std::vector<float> same(8, -1.5f);
  const auto d = decode(*c, encode(*c, same), 8);
  EXPECT_EQ(std::count(d.begin(), d.end(), -1.5f), 4);
}

TEST(SparseLoCoCodec, BadParametersAndNonFiniteValues) {
  EXPECT_THROW(sparseloco(0.0, 64), ConfigError);
  EXPECT_THROW(sparseloco(0.1, 1), ConfigError);
  auto c = sparseloco(0.1, 64);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    auto x = randomValues(200, 4);
    x[70] = bad;
    EXPECT_THROW(decode(*c, encode(*c, x), x.size()), DataError);
  }
}

TEST(SparseLoCoCodec, MalformedPayloadsAreDataErrorsAndLeaveOutputUntouched) {
  auto c = sparseloco(3.0 / 64, 64);
  const size_t n = 150;
  const auto good = encode(*c, randomValues(n, 5));
  auto expectBad = [&](std::vector<uint8_t> p, const std::string& what) {
    std::vector<float> out(n, 9.0f);
    EXPECT_THROW(c->decode(p.data(), p.size(), n, out.data(), 1.0f, false, {}), DataError) << what;
    EXPECT_EQ(out, std::vector<float>(n, 9.0f)) << what;
  };
  for (size_t len = 0; len < good.size(); ++len)
    expectBad(std::vector<uint8_t>(good.begin(), good.begin() + len), "truncated to " + std::to_string(len));
  auto p = good;
  p.push_back(0);
  expectBad(p, "trailing byte");
  auto u32 = [](std::vector<uint8_t>& b, size_t off, uint32_t v) { std::memcpy(b.data() + off, &v, 4); };
  p = good;
  u32(p, 4, 128);
  expectBad(p, "another chunk size");
  p = good;
  u32(p, 8, 4);
  expectBad(p, "another k");
  p = good;
  p[0] = 'K';
  expectBad(p, "another codec's tag");
  p = good;
  p[1] = 1;
  expectBad(p, "reserved byte");
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    p = good;
    std::memcpy(p.data() + 12 + 4, &bad, 4);
    expectBad(p, "non-finite table entry");
  }
  // First entry of chunk 0: 6 index bits at bit 0 of the stream. 63 is inside the chunk; the
  // second entry's index must then exceed it.
  p = good;
  p[28] = static_cast<uint8_t>((p[28] & 0xC0) | 63);
  expectBad(p, "indices not increasing inside a chunk");
  // The last chunk holds 150 - 128 = 22 values: an index of 22..63 there is outside it. Its
  // first entry starts at bit 6 * 8 (two full chunks of 3 entries of 8 bits).
  p = good;
  p[28 + 6] = static_cast<uint8_t>((p[28 + 6] & 0xC0) | 40);
  expectBad(p, "index outside the last chunk");
  std::mt19937 g(11);
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

TEST(SparseLoCoCodec, NonZeroPaddingIsRejected) {
  auto c7 = sparseloco(0.5, 7);  // 4 entries of 3 + 2 bits: 20 bits, the top 4 of 3 bytes are padding
  const auto x = randomValues(7, 6);
  auto p = encode(*c7, x);
  ASSERT_EQ(p.size(), 28u + 3u);
  ASSERT_EQ(p.back() & 0x80, 0);
  p.back() |= 0x80;
  std::vector<float> out(7, 9.0f);
  EXPECT_THROW(c7->decode(p.data(), p.size(), 7, out.data(), 1.0f, false, {}), DataError);
  EXPECT_EQ(out, std::vector<float>(7, 9.0f));
}
