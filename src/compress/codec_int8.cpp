// int8: blockwise absmax quantisation. Per block of `block` values one f32 scale
// s = max|x| / 127 and each value rounded to the nearest multiple of s (ties to even; computed
// as x·(127/max)), so the error per value is at most s/2 up to float rounding, and values on
// the grid k·s come back exactly.
//
// Payload (two_phase, exact size 4·ceil(n/block) + n, alignment = block):
//   f32 scale[ceil(n/block)] (unaligned, little-endian), int8 q[n] in [-127, 127].
// decoded value i = q[i] · scale[i / block]. Non-finite input is refused (DataError).
// Decode checks every scale before writing; q = -128 is found while decoding, so on that
// DataError out[] may be partly written.
#include <cfloat>
#include <cmath>
#include <type_traits>

#include "codecs.h"
#include "payload.h"
#include "simd.h"

namespace lowcomm::compress {
namespace {

constexpr const char* kName = "int8";

// q[i] = round(x[i] · inv) clamped to ±127: adding 1.5·2^23 makes the float adder round to an
// integer (nearest even), which then sits in the low mantissa bits.
LC_INLINE void quantise(const float* x, size_t m, float inv, int8_t* q) {
  for (size_t i = 0; i < m; ++i) {
    const float t = x[i] * inv + 12582912.0f;
    uint32_t u;
    std::memcpy(&u, &t, 4);
    int32_t v = static_cast<int32_t>(u) - 0x4b400000;
    v = v < -127 ? -127 : v;
    v = v > 127 ? 127 : v;
    q[i] = static_cast<int8_t>(v);
  }
}

// max|x| below 127/FLT_MAX (~4e-37): 127/max overflows, so divide in double instead (rare).
void quantiseTiny(const float* x, size_t m, float scale, int8_t* q) {
  for (size_t i = 0; i < m; ++i) {
    const double v = scale > 0 ? std::nearbyint(static_cast<double>(x[i]) / scale) : 0.0;
    q[i] = static_cast<int8_t>(v < -127 ? -127 : v > 127 ? 127 : v);
  }
}

LC_INLINE void encodeBlocks(const float* x, size_t n, size_t block, uint8_t* out) {
  const size_t blocks = (n + block - 1) / block;
  auto* q = reinterpret_cast<int8_t*>(out + 4 * blocks);
  for (size_t b = 0; b < blocks; ++b) {
    const size_t begin = b * block, m = n - begin < block ? n - begin : block;
    const uint32_t mbits = simd::maxAbsBitsLoop(x + begin, m);
    if (mbits >= 0x7f800000u) simd::throwNonFinite(kName);
    const float mx = simd::bitsToFloat(mbits);
    const float scale = mx / 127.0f;
    std::memcpy(out + 4 * b, &scale, 4);
    const float inv = mbits ? 127.0f / mx : 0.0f;
    if (inv <= FLT_MAX)
      quantise(x + begin, m, inv, q + begin);
    else
      quantiseTiny(x + begin, m, scale, q + begin);
  }
}

// Writes (Acc: adds) q·f; returns nonzero if some q is -128.
template <bool Acc>
LC_INLINE uint32_t dequantise(const int8_t* q, size_t m, float f, float* out) {
  uint32_t bad = 0;
  for (size_t i = 0; i < m; ++i) {
    bad |= q[i] == -128;
    const float v = static_cast<float>(q[i]) * f;
    out[i] = Acc ? out[i] + v : v;
  }
  return bad;
}

template <bool Acc>
LC_INLINE uint32_t decodeBlocks(const uint8_t* p, size_t n, size_t block, float scale, float* out) {
  const size_t blocks = (n + block - 1) / block;
  const auto* q = reinterpret_cast<const int8_t*>(p + 4 * blocks);
  uint32_t bad = 0;
  for (size_t b = 0; b < blocks; ++b) {
    const size_t begin = b * block, m = n - begin < block ? n - begin : block;
    float s;
    std::memcpy(&s, p + 4 * b, 4);
    bad |= dequantise<Acc>(q + begin, m, s * scale, out + begin);
  }
  return bad;
}

void encodeGeneric(const float* x, size_t n, size_t block, uint8_t* out) { encodeBlocks(x, n, block, out); }

template <bool Acc>
uint32_t decodeGeneric(std::integral_constant<bool, Acc>, const uint8_t* p, size_t n, size_t block, float scale,
                       float* out) {
  return decodeBlocks<Acc>(p, n, block, scale, out);
}

#if LC_X86
LC_AVX2 void encodeAvx2(const float* x, size_t n, size_t block, uint8_t* out) { encodeBlocks(x, n, block, out); }

// dequantise, 32 values per step.
template <bool Acc>
LC_AVX2 LC_INLINE uint32_t dequantiseAvx2(const int8_t* q, size_t m, float f, float* out) {
  const __m256 vf = _mm256_set1_ps(f);
  __m256i bad = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 32 <= m; i += 32) {
    simd::prefetchAhead(out + i);
    simd::prefetchAhead(out + i + 16);
    const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + i));
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi8(l, _mm256_set1_epi8(-128)));
    for (int h = 0; h < 4; ++h) {
      const __m128i part = h < 2 ? _mm256_castsi256_si128(l) : _mm256_extracti128_si256(l, 1);
      const __m256i w = _mm256_cvtepi8_epi32(h % 2 ? _mm_srli_si128(part, 8) : part);
      __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(w), vf);
      if (Acc) v = _mm256_add_ps(_mm256_loadu_ps(out + i + 8 * h), v);
      _mm256_storeu_ps(out + i + 8 * h, v);
    }
  }
  return static_cast<uint32_t>(!_mm256_testz_si256(bad, bad)) | dequantise<Acc>(q + i, m - i, f, out + i);
}

template <bool Acc>
LC_AVX2 uint32_t decodeAvx2(std::integral_constant<bool, Acc>, const uint8_t* p, size_t n, size_t block, float scale,
                            float* out) {
  const size_t blocks = (n + block - 1) / block;
  const auto* q = reinterpret_cast<const int8_t*>(p + 4 * blocks);
  uint32_t bad = 0;
  for (size_t b = 0; b < blocks; ++b) {
    const size_t begin = b * block, m = n - begin < block ? n - begin : block;
    float s;
    std::memcpy(&s, p + 4 * b, 4);
    bad |= dequantiseAvx2<Acc>(q + begin, m, s * scale, out + begin);
  }
  return bad;
}
#endif

class Int8Codec : public Codec {
 public:
  explicit Int8Codec(size_t block) : block_(block) {}
  std::string name() const override { return kName; }
  Combine combine() const override { return Combine::two_phase; }
  size_t maxBytes(size_t n) const override { return 4 * ((n + block_ - 1) / block_) + n; }
  size_t alignment() const override { return block_; }

  size_t encode(const float* x, size_t n, uint8_t* out, const EncodeCtx&) const override {
    LC_DISPATCH(encode, x, n, block_, out);
    return maxBytes(n);
  }

  void decode(const uint8_t* p, size_t bytes, size_t n, float* out, float scale, bool accumulate,
              const EncodeCtx&) const override {
    expectSize(kName, bytes, maxBytes(n));
    PayloadReader r(p, bytes, kName);
    const size_t blocks = (n + block_ - 1) / block_;
    for (size_t b = 0; b < blocks; ++b)
      if (r.getFinite("block scale") < 0) r.fail("negative block scale");
    const uint32_t bad = accumulate ? LC_DISPATCH(decode, std::true_type{}, p, n, block_, scale, out)
                                    : LC_DISPATCH(decode, std::false_type{}, p, n, block_, scale, out);
    if (bad) r.fail("value -128 outside [-127, 127]");
  }

 private:
  size_t block_;
};

}  // namespace

std::unique_ptr<Codec> makeInt8Codec(const CodecParams& p) {
  if (p.block < 8 || p.block > (int64_t{1} << 20))
    throw ConfigError("codec int8: block = " + std::to_string(p.block) + " out of range [8, 1048576]");
  return std::make_unique<Int8Codec>(static_cast<size_t>(p.block));
}

}  // namespace lowcomm::compress
