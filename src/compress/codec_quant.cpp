// Stochastic quantisers, unbiased: E[decoded] = x, up to the 2^-16 resolution of the random
// numbers (a probability p is realised as round(p·2^16)/2^16: |bias| <= 2^-17 of a step).
//
// qsgd (Alistarh et al.), s = levels in 1..127:
//   f32 norm = ||x||_2, then per value the level l = floor(x/norm·s + u) in [-s, s], u uniform
//   in [0,1) (distributed as the paper's sign(x)·floor(|x|/norm·s + u)); decoded = norm·l/s.
//   Levels are two's complement: s <= 7 packs two per byte (value 2k in the low nibble of
//   byte k, 2k+1 in the high one; alignment 2), else one int8 per value (alignment 1).
//   Size 4 + ceil(n/2) or 4 + n.
// terngrad (Wen et al.):
//   f32 scale = max|x|, then two bit planes of ceil(n/8) bytes: nonzero (P = |x|/scale), and
//   negative (set only with nonzero). decoded = ±scale or 0. Size 4 + 2·ceil(n/8), alignment 8.
// u of value i comes from simd::randomBlock(i / 8, key(ctx)): deterministic given the EncodeCtx,
// independent across steps, buckets, chunks and ranks. Non-finite input is refused (DataError).
// A norm (scale) below ~2e-32, where s·2^16/norm (2^16/scale) overflows, is sent as 0.
// Padding bits are 0. Decode checks the header before writing; qsgd finds a level outside
// [-s, s] while decoding, so on that DataError out[] may be partly written (terngrad validates
// its planes first).
#include <cfloat>
#include <cmath>
#include <type_traits>

#include "codecs.h"
#include "payload.h"
#include "simd.h"

namespace lowcomm::compress {
namespace {

using simd::RngKey;

constexpr uint64_t kQsgdSalt = 0x7173676400000001ull, kTernSalt = 0x7465726e00000002ull;

template <bool B>
using BoolC = std::integral_constant<bool, B>;

// ---- qsgd

// l = floor((a + r) / 2^16) in [-s, s], a = round(x·f16) (f16 = s·2^16/norm, nearest even, so
// round(-v) = -round(v)): the carry out of the low 16 bits happens with probability exactly
// (a mod 2^16)/2^16. Signed rounding has the distribution of sign(x)·floor(|x|/norm·s + u).
LC_INLINE int32_t qsgdLevel(float x, float f16, int32_t s, uint32_t r) {
  const int32_t m = simd::roundSmall(std::fabs(x) * f16);
  int32_t l = ((x < 0 ? -m : m) + static_cast<int32_t>(r)) >> 16;  // arithmetic shift: floor
  l = l > s ? s : l;
  return l < -s ? -s : l;
}

// One RNG segment x[0..n), from element `begin` (a multiple of 8) on; q gets one byte per
// value, or nibble pairs.
template <bool Nibble>
LC_INLINE void qsgdLevels(const float* x, size_t n, float f16, int32_t s, const RngKey& k, uint8_t* q, size_t begin) {
  for (size_t b = begin / 8; b * 8 < n; ++b) {
    uint16_t r[8];
    simd::randomBlock(static_cast<uint32_t>(b), k, r);
    const size_t e = b * 8, m = n - e < 8 ? n - e : 8;
    int32_t l[8] = {};
    for (size_t j = 0; j < m; ++j) l[j] = qsgdLevel(x[e + j], f16, s, r[j]);
    if constexpr (Nibble)  // an odd m leaves l[m] = 0: the padding nibble
      for (size_t j = 0; j < m; j += 2) q[(e + j) / 2] = static_cast<uint8_t>((l[j] & 15) | (l[j + 1] & 15) << 4);
    else
      for (size_t j = 0; j < m; ++j) q[e + j] = static_cast<uint8_t>(l[j]);
  }
}

template <bool Nibble>
void qsgdLevelsGeneric(BoolC<Nibble>, const float* x, size_t n, float f16, int32_t s, const RngKey& k, uint8_t* q) {
  qsgdLevels<Nibble>(x, n, f16, s, k, q, 0);
}

// Writes (Acc: adds) level·f; returns nonzero if a level is outside [-s, s].
template <bool Nibble, bool Acc>
LC_INLINE uint32_t qsgdDequantise(const uint8_t* q, size_t n, float f, int32_t s, float* out) {
  uint32_t bad = 0;
  if constexpr (Nibble) {
    for (size_t j = 0; j < n / 2; ++j) {
      const int32_t lo = static_cast<int8_t>(q[j] << 4) >> 4, hi = static_cast<int8_t>(q[j]) >> 4;
      bad |= (lo > s) | (lo < -s) | (hi > s) | (hi < -s);
      const float a = static_cast<float>(lo) * f, b = static_cast<float>(hi) * f;
      out[2 * j] = Acc ? out[2 * j] + a : a;
      out[2 * j + 1] = Acc ? out[2 * j + 1] + b : b;
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const int32_t l = static_cast<int8_t>(q[i]);
      bad |= (l > s) | (l < -s);
      const float v = static_cast<float>(l) * f;
      out[i] = Acc ? out[i] + v : v;
    }
  }
  return bad;
}

template <bool Nibble, bool Acc>
uint32_t qsgdDecodeGeneric(BoolC<Nibble>, BoolC<Acc>, const uint8_t* q, size_t n, float f, int32_t s, float* out) {
  return qsgdDequantise<Nibble, Acc>(q, n, f, s, out);
}

// ---- terngrad

// Nonzero with probability round(|x|·inv16)/2^16, inv16 = 2^16/scale.
LC_INLINE uint32_t ternKeep(float x, float inv16, uint32_t r) {
  return static_cast<int32_t>(r) < simd::roundSmall(std::fabs(x) * inv16);
}

// Bytes b0.. of both planes (byte b: elements 8b..8b+7, RNG block b), one RNG segment x[0..n).
LC_INLINE void ternPlanes(const float* x, size_t n, float inv16, const RngKey& k, uint8_t* nz, uint8_t* neg,
                          size_t b0) {
  for (size_t b = b0; b * 8 < n; ++b) {
    uint16_t r[8];
    simd::randomBlock(static_cast<uint32_t>(b), k, r);
    const size_t m = n - b * 8 < 8 ? n - b * 8 : 8;
    uint32_t z = 0, g = 0;
    for (size_t j = 0; j < m; ++j) {
      const float v = x[b * 8 + j];
      const uint32_t keep = ternKeep(v, inv16, r[j]);
      z |= keep << j;
      g |= (keep & (v < 0)) << j;
    }
    nz[b] = static_cast<uint8_t>(z);
    neg[b] = static_cast<uint8_t>(g);
  }
}

void ternPlanesGeneric(const float* x, size_t n, float inv16, const RngKey& k, uint8_t* nz, uint8_t* neg) {
  ternPlanes(x, n, inv16, k, nz, neg, 0);
}

// out[i] = (nz ? s : 0) with neg's sign bit (Acc: +=), branch-free.
template <bool Acc>
LC_INLINE void ternValues(const uint8_t* nz, const uint8_t* neg, size_t begin, size_t n, float s, float* out) {
  const uint32_t sb = simd::floatBits(s);
  for (size_t i = begin; i < n; ++i) {
    const uint32_t z = (nz[i >> 3] >> (i & 7)) & 1, g = (neg[i >> 3] >> (i & 7)) & 1;
    const float v = simd::bitsToFloat((sb & (0u - z)) ^ g << 31);
    out[i] = Acc ? out[i] + v : v;
  }
}

template <bool Acc>
void ternValuesGeneric(BoolC<Acc>, const uint8_t* nz, const uint8_t* neg, size_t n, float s, float* out) {
  ternValues<Acc>(nz, neg, 0, n, s, out);
}

#if LC_X86
// floor((round(x·f16) + r) / 2^16) of x[i..i+8), not yet clamped: in [-s-1, s+1].
LC_AVX2 LC_INLINE __m256i qsgdFloor8(const float* x, size_t i, __m256 f16, __m256i r) {
  const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), f16));  // nearest even
  return _mm256_srai_epi32(_mm256_add_epi32(a, r), 16);
}

// qsgdLevel of x[i..i+32) (i a multiple of 8) as 32 int8 in order: packed with saturation
// (s+1 <= 128 becomes at most 127), then clamped to [-s, s] as bytes.
LC_AVX2 LC_INLINE __m256i qsgdLevel32(const float* x, size_t i, __m256 f16, __m256i s8, const simd::RngNi& k) {
  const uint32_t b = static_cast<uint32_t>(i / 8);
  const __m256i r0 = simd::random8(b, k), r1 = simd::random8(b + 1, k);
  const __m256i r2 = simd::random8(b + 2, k), r3 = simd::random8(b + 3, k);
  const __m256i p01 = _mm256_packs_epi32(qsgdFloor8(x, i, f16, r0), qsgdFloor8(x, i + 8, f16, r1));
  const __m256i p23 = _mm256_packs_epi32(qsgdFloor8(x, i + 16, f16, r2), qsgdFloor8(x, i + 24, f16, r3));
  const __m256i l =
      _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  return _mm256_max_epi8(_mm256_min_epi8(l, s8), _mm256_sub_epi8(_mm256_setzero_si256(), s8));
}

template <bool Nibble>
LC_AVX2 void qsgdLevelsAvx2(BoolC<Nibble>, const float* x, size_t n, float f16, int32_t s, const RngKey& k,
                            uint8_t* q) {
  const __m256 vf = _mm256_set1_ps(f16);
  const __m256i vs = _mm256_set1_epi8(static_cast<char>(s));
  const simd::RngNi kn = simd::loadRng(k);
  size_t i = 0;
  if constexpr (Nibble) {
    const __m256i low = _mm256_set1_epi8(15), weights = _mm256_set1_epi16(0x1001);  // byte pairs (1, 16)
    for (; i + 64 <= n; i += 64) {
      simd::prefetchAhead(x + i);
      simd::prefetchAhead(x + i + 16);
      simd::prefetchAhead(x + i + 32);
      simd::prefetchAhead(x + i + 48);
      const __m256i a = _mm256_maddubs_epi16(_mm256_and_si256(qsgdLevel32(x, i, vf, vs, kn), low), weights);
      const __m256i b = _mm256_maddubs_epi16(_mm256_and_si256(qsgdLevel32(x, i + 32, vf, vs, kn), low), weights);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i / 2),
                          _mm256_permute4x64_epi64(_mm256_packus_epi16(a, b), 0xd8));
    }
  } else {
    for (; i + 32 <= n; i += 32) {
      simd::prefetchAhead(x + i);
      simd::prefetchAhead(x + i + 16);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), qsgdLevel32(x, i, vf, vs, kn));
    }
  }
  qsgdLevels<Nibble>(x, n, f16, s, k, q, i);
}

// 32 nibble levels of q[0..16) as int8 in order.
LC_AVX2 LC_INLINE __m256i nibbles32(const uint8_t* q) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)), low = _mm_set1_epi8(15);
  const __m128i lo = _mm_and_si128(b, low), hi = _mm_and_si128(_mm_srli_epi16(b, 4), low);
  const __m256i v = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
  const __m256i eight = _mm256_set1_epi8(8);
  return _mm256_sub_epi8(_mm256_xor_si256(v, eight), eight);  // sign-extend 4 bits
}

template <bool Nibble, bool Acc>
LC_AVX2 uint32_t qsgdDecodeAvx2(BoolC<Nibble>, BoolC<Acc>, const uint8_t* q, size_t n, float f, int32_t s, float* out) {
  const __m256 vf = _mm256_set1_ps(f);
  __m256i maxabs = _mm256_setzero_si256();  // unsigned max of |level|; |-128| reads as 128
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    simd::prefetchAhead(out + i);
    simd::prefetchAhead(out + i + 16);
    const __m256i l = Nibble ? nibbles32(q + i / 2) : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + i));
    maxabs = _mm256_max_epu8(maxabs, _mm256_abs_epi8(l));
    for (int h = 0; h < 4; ++h) {
      const __m128i part = h < 2 ? _mm256_castsi256_si128(l) : _mm256_extracti128_si256(l, 1);
      const __m256i w = _mm256_cvtepi8_epi32(h % 2 ? _mm_srli_si128(part, 8) : part);
      __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(w), vf);
      if (Acc) v = _mm256_add_ps(_mm256_loadu_ps(out + i + 8 * h), v);
      _mm256_storeu_ps(out + i + 8 * h, v);
    }
  }
  alignas(32) uint8_t m[32];
  _mm256_store_si256(reinterpret_cast<__m256i*>(m), maxabs);
  uint32_t bad = 0;
  for (int j = 0; j < 32; ++j) bad |= m[j] > s;
  const size_t done = Nibble ? i / 2 : i;  // payload bytes consumed
  return bad | qsgdDequantise<Nibble, Acc>(q + done, n - i, f, s, out + i);
}

LC_AVX2 LC_INLINE int ternKeep8(__m256 v, __m256 inv16, __m256i r) {
  const __m256i a = _mm256_abs_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v, inv16)));  // = ternKeep's round
  return _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(a, r)));
}

LC_AVX2 void ternPlanesAvx2(const float* x, size_t n, float inv16, const RngKey& k, uint8_t* nz, uint8_t* neg) {
  const __m256 vi = _mm256_set1_ps(inv16);
  const simd::RngNi kn = simd::loadRng(k);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    simd::prefetchAhead(x + i);
    const __m256i r0 = simd::random8(static_cast<uint32_t>(i / 8), kn);
    const __m256i r1 = simd::random8(static_cast<uint32_t>(i / 8 + 1), kn);
    const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    const int z = ternKeep8(v0, vi, r0) | ternKeep8(v1, vi, r1) << 8;
    const int g = z & (_mm256_movemask_ps(v0) | _mm256_movemask_ps(v1) << 8);  // sign bit: -0 is never kept
    const uint16_t z16 = static_cast<uint16_t>(z), g16 = static_cast<uint16_t>(g);
    std::memcpy(nz + i / 8, &z16, 2);
    std::memcpy(neg + i / 8, &g16, 2);
  }
  ternPlanes(x, n, inv16, k, nz, neg, i / 8);
}

template <bool Acc>
LC_AVX2 void ternValuesAvx2(BoolC<Acc>, const uint8_t* nz, const uint8_t* neg, size_t n, float s, float* out) {
  const __m256 pos = _mm256_set1_ps(s), negv = _mm256_set1_ps(-s), zero = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    simd::prefetchAhead(out + i);
    const __m256 mz = _mm256_castsi256_ps(simd::laneBits(nz[i / 8]));
    const __m256 mg = _mm256_castsi256_ps(simd::laneBits(neg[i / 8]));
    const __m256 v = _mm256_blendv_ps(_mm256_blendv_ps(zero, pos, mz), negv, mg);
    _mm256_storeu_ps(out + i, Acc ? _mm256_add_ps(_mm256_loadu_ps(out + i), v) : v);
  }
  ternValues<Acc>(nz, neg, i, n, s, out);
}
#endif

class QsgdCodec : public Codec {
 public:
  explicit QsgdCodec(int32_t s) : s_(s) {}
  std::string name() const override { return "qsgd"; }
  Combine combine() const override { return Combine::two_phase; }
  size_t maxBytes(size_t n) const override { return 4 + (nibble() ? (n + 1) / 2 : n); }
  size_t alignment() const override { return nibble() ? 2 : 1; }

  size_t encode(const float* x, size_t n, uint8_t* out, const EncodeCtx& ctx) const override {
    const double norm2 = simd::sumSquares(x, n);
    float norm = static_cast<float>(std::sqrt(norm2));
    if (!std::isfinite(norm)) simd::throwNonFinite("qsgd");  // or the norm exceeds FLT_MAX
    float f16 = norm > 0 ? static_cast<float>(s_) * 65536.0f / norm : 0.0f;
    if (!(f16 <= FLT_MAX)) norm = f16 = 0.0f;
    std::memcpy(out, &norm, 4);
    uint8_t* q = out + 4;
    simd::forEachRngSegment(n, ctx, kQsgdSalt, [&](size_t b, size_t m, const RngKey& k) {
      uint8_t* qb = q + (nibble() ? b / 2 : b);
      if (nibble())
        LC_DISPATCH(qsgdLevels, BoolC<true>{}, x + b, m, f16, s_, k, qb);
      else
        LC_DISPATCH(qsgdLevels, BoolC<false>{}, x + b, m, f16, s_, k, qb);
    });
    return maxBytes(n);
  }

  void decode(const uint8_t* p, size_t bytes, size_t n, float* out, float scale, bool accumulate,
              const EncodeCtx&) const override {
    expectSize("qsgd", bytes, maxBytes(n));
    PayloadReader r(p, bytes, "qsgd");
    const float norm = r.getFinite("norm");
    if (norm < 0) r.fail("negative norm");
    const uint8_t* q = r.take(bytes - 4);
    if (nibble() && n % 2 && q[n / 2] >> 4) r.fail("non-zero padding nibble");
    const float f = norm / static_cast<float>(s_) * scale;
    uint32_t bad;
    if (nibble())
      bad = accumulate ? LC_DISPATCH(qsgdDecode, BoolC<true>{}, BoolC<true>{}, q, n, f, s_, out)
                       : LC_DISPATCH(qsgdDecode, BoolC<true>{}, BoolC<false>{}, q, n, f, s_, out);
    else
      bad = accumulate ? LC_DISPATCH(qsgdDecode, BoolC<false>{}, BoolC<true>{}, q, n, f, s_, out)
                       : LC_DISPATCH(qsgdDecode, BoolC<false>{}, BoolC<false>{}, q, n, f, s_, out);
    if (nibble() && n % 2) {  // the odd last value, past the pairs
      const int32_t l = static_cast<int8_t>(q[n / 2] << 4) >> 4;
      bad |= (l > s_) | (l < -s_);
      const float v = static_cast<float>(l) * f;
      out[n - 1] = accumulate ? out[n - 1] + v : v;
    }
    if (bad) r.fail("level outside [-" + std::to_string(s_) + ", " + std::to_string(s_) + "]");
  }

 private:
  bool nibble() const { return s_ <= 7; }
  int32_t s_;
};

class TernGradCodec : public Codec {
 public:
  std::string name() const override { return "terngrad"; }
  Combine combine() const override { return Combine::two_phase; }
  size_t maxBytes(size_t n) const override { return 4 + 2 * ((n + 7) / 8); }
  size_t alignment() const override { return 8; }

  size_t encode(const float* x, size_t n, uint8_t* out, const EncodeCtx& ctx) const override {
    const uint32_t mbits = simd::maxAbsBits(x, n);
    if (mbits >= 0x7f800000u) simd::throwNonFinite("terngrad");
    float scale = simd::bitsToFloat(mbits);
    float inv16 = scale > 0 ? 65536.0f / scale : 0.0f;
    if (!(inv16 <= FLT_MAX)) scale = inv16 = 0.0f;
    std::memcpy(out, &scale, 4);
    const size_t planeBytes = (n + 7) / 8;
    simd::forEachRngSegment(n, ctx, kTernSalt, [&](size_t b, size_t m, const RngKey& k) {
      LC_DISPATCH(ternPlanes, x + b, m, inv16, k, out + 4 + b / 8, out + 4 + planeBytes + b / 8);
    });
    return maxBytes(n);
  }

  void decode(const uint8_t* p, size_t bytes, size_t n, float* out, float scale, bool accumulate,
              const EncodeCtx&) const override {
    expectSize("terngrad", bytes, maxBytes(n));
    PayloadReader r(p, bytes, "terngrad");
    const float s = r.getFinite("scale");
    if (s < 0) r.fail("negative scale");
    const size_t planeBytes = (n + 7) / 8;
    const uint8_t* nz = r.take(planeBytes);
    const uint8_t* neg = r.take(planeBytes);
    uint32_t bad = 0;
    for (size_t b = 0; b < planeBytes; ++b) bad |= neg[b] & ~nz[b];
    if (bad) r.fail("negative bit without nonzero bit");
    if (n % 8 && nz[n / 8] >> (n % 8)) r.fail("non-zero padding bits");
    if (accumulate)
      LC_DISPATCH(ternValues, BoolC<true>{}, nz, neg, n, s * scale, out);
    else
      LC_DISPATCH(ternValues, BoolC<false>{}, nz, neg, n, s * scale, out);
  }
};

}  // namespace

std::unique_ptr<Codec> makeQsgdCodec(const CodecParams& p) {
  if (p.levels < 1 || p.levels > 127)
    throw ConfigError("codec qsgd: levels = " + std::to_string(p.levels) + " out of range [1, 127]");
  return std::make_unique<QsgdCodec>(static_cast<int32_t>(p.levels));
}

std::unique_ptr<Codec> makeTernGradCodec() { return std::make_unique<TernGradCodec>(); }

}  // namespace lowcomm::compress
