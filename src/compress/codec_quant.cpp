// Stochastic quantisers, unbiased: E[decoded] = x.
//
// qsgd (Alistarh et al.), s = levels in 1..127:
//   f32 norm = ||x||_2, then per value the signed level sign(x)·l, l = floor(|x|/norm·s + u),
//   u uniform in [0,1); decoded = norm·sign·l/s. Levels are two's complement: s <= 7 packs two
//   per byte (value 2k in the low nibble of byte k, 2k+1 in the high one; alignment 2),
//   else one int8 per value (alignment 1). Size 4 + ceil(n/2) or 4 + n.
// terngrad (Wen et al.):
//   f32 scale = max|x|, then two bit planes of ceil(n/8) bytes: nonzero (P = |x|/scale), and
//   negative (set only with nonzero). decoded = ±scale or 0. Size 4 + 2·ceil(n/8), alignment 8.
// u comes from simd::hash32(index; key(ctx)): deterministic given the EncodeCtx, independent
// across steps, chunks and ranks. Non-finite input is refused (DataError). Padding bits are 0.
// Decode checks the header before writing; qsgd finds a level out of [-s, s] while decoding,
// so on that DataError out[] may be partly written (terngrad validates its planes first).
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

// sign(x)·l with l = floor(a) + (u < frac(a)), a = |x|·f, capped at s (float rounding of a).
LC_INLINE int32_t qsgdLevel(float x, float f, int32_t s, uint32_t h) {
  const float a = std::fabs(x) * f;
  const int32_t lo = static_cast<int32_t>(a);
  const float frac = a - static_cast<float>(lo);  // exact
  int32_t l = lo + (simd::uniform24(h) < frac ? 1 : 0);
  l = l > s ? s : l;
  return x < 0 ? -l : l;
}

// One RNG segment: x[0..n), counters 0..n-1; q gets n bytes or ceil(n/2) nibble pairs.
template <bool Nibble>
LC_INLINE void qsgdLevels(const float* x, size_t n, float f, int32_t s, RngKey k, uint8_t* q, size_t begin) {
  if constexpr (Nibble) {
    for (size_t j = begin / 2; j < n / 2; ++j) {
      const uint32_t i = static_cast<uint32_t>(2 * j);
      const int32_t lo = qsgdLevel(x[i], f, s, simd::hash32(i, k));
      const int32_t hi = qsgdLevel(x[i + 1], f, s, simd::hash32(i + 1, k));
      q[j] = static_cast<uint8_t>((lo & 15) | (hi & 15) << 4);
    }
    if (n % 2) q[n / 2] = static_cast<uint8_t>(qsgdLevel(x[n - 1], f, s, simd::hash32(static_cast<uint32_t>(n - 1), k)) & 15);
  } else {
    for (size_t i = begin; i < n; ++i)
      q[i] = static_cast<uint8_t>(qsgdLevel(x[i], f, s, simd::hash32(static_cast<uint32_t>(i), k)));
  }
}

template <bool Nibble>
void qsgdLevelsGeneric(BoolC<Nibble>, const float* x, size_t n, float f, int32_t s, RngKey k, uint8_t* q) {
  qsgdLevels<Nibble>(x, n, f, s, k, q, 0);
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

// Bytes [b0, b1) of both planes for counters 8·b0.. of one RNG segment.
LC_INLINE void ternPlanes(const float* x, size_t n, float scale, RngKey k, uint8_t* nz, uint8_t* neg, size_t b0) {
  for (size_t b = b0; b * 8 < n; ++b) {
    const size_t m = n - b * 8 < 8 ? n - b * 8 : 8;
    uint32_t z = 0, g = 0;
    for (size_t j = 0; j < m; ++j) {
      const size_t i = b * 8 + j;
      const uint32_t keep = simd::uniform24(simd::hash32(static_cast<uint32_t>(i), k)) * scale < std::fabs(x[i]);
      z |= keep << j;
      g |= (keep & (x[i] < 0)) << j;
    }
    nz[b] = static_cast<uint8_t>(z);
    neg[b] = static_cast<uint8_t>(g);
  }
}

void ternPlanesGeneric(const float* x, size_t n, float scale, RngKey k, uint8_t* nz, uint8_t* neg) {
  ternPlanes(x, n, scale, k, nz, neg, 0);
}

template <bool Acc>
LC_INLINE void ternValues(const uint8_t* nz, const uint8_t* neg, size_t begin, size_t n, float s, float* out) {
  for (size_t i = begin; i < n; ++i) {
    const uint32_t z = (nz[i >> 3] >> (i & 7)) & 1, g = (neg[i >> 3] >> (i & 7)) & 1;
    const float v = z ? (g ? -s : s) : 0.0f;
    out[i] = Acc ? out[i] + v : v;
  }
}

template <bool Acc>
void ternValuesGeneric(BoolC<Acc>, const uint8_t* nz, const uint8_t* neg, size_t n, float s, float* out) {
  ternValues<Acc>(nz, neg, 0, n, s, out);
}

#if LC_X86
// qsgdLevel of x[i..i+8) (same arithmetic, so the same levels).
LC_AVX2 LC_INLINE __m256i qsgdLevel8(const float* x, size_t i, __m256 f, __m256i s, RngKey k) {
  const __m256 v = _mm256_loadu_ps(x + i);
  const __m256 a = _mm256_mul_ps(_mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))), f);
  const __m256i lo = _mm256_cvttps_epi32(a);
  const __m256 frac = _mm256_sub_ps(a, _mm256_cvtepi32_ps(lo));
  const __m256 u = simd::uniform24x8(simd::hash32x8(static_cast<uint32_t>(i), k));
  const __m256i l = _mm256_min_epi32(_mm256_sub_epi32(lo, _mm256_castps_si256(_mm256_cmp_ps(u, frac, _CMP_LT_OQ))), s);
  return _mm256_sign_epi32(l, _mm256_castps_si256(v));  // x = -0 or +0 has l = 0
}

// Levels of x[i..i+32) as 32 int8 in order.
LC_AVX2 LC_INLINE __m256i qsgdLevel32(const float* x, size_t i, __m256 f, __m256i s, RngKey k) {
  const __m256i p01 = _mm256_packs_epi32(qsgdLevel8(x, i, f, s, k), qsgdLevel8(x, i + 8, f, s, k));
  const __m256i p23 = _mm256_packs_epi32(qsgdLevel8(x, i + 16, f, s, k), qsgdLevel8(x, i + 24, f, s, k));
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

template <bool Nibble>
LC_AVX2 void qsgdLevelsAvx2(BoolC<Nibble>, const float* x, size_t n, float f, int32_t s, RngKey k, uint8_t* q) {
  const __m256 vf = _mm256_set1_ps(f);
  const __m256i vs = _mm256_set1_epi32(s);
  size_t i = 0;
  if constexpr (Nibble) {
    const __m256i low = _mm256_set1_epi8(15), weights = _mm256_set1_epi16(0x1001);  // byte pairs (1, 16)
    for (; i + 64 <= n; i += 64) {
      const __m256i a = _mm256_maddubs_epi16(_mm256_and_si256(qsgdLevel32(x, i, vf, vs, k), low), weights);
      const __m256i b = _mm256_maddubs_epi16(_mm256_and_si256(qsgdLevel32(x, i + 32, vf, vs, k), low), weights);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i / 2),
                          _mm256_permute4x64_epi64(_mm256_packus_epi16(a, b), 0xd8));
    }
  } else {
    for (; i + 32 <= n; i += 32)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), qsgdLevel32(x, i, vf, vs, k));
  }
  qsgdLevels<Nibble>(x, n, f, s, k, q, i);
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
LC_AVX2 uint32_t qsgdDecodeAvx2(BoolC<Nibble>, BoolC<Acc>, const uint8_t* q, size_t n, float f, int32_t s,
                                float* out) {
  const __m256 vf = _mm256_set1_ps(f);
  __m256i maxabs = _mm256_setzero_si256();  // unsigned max of |level|; |-128| reads as 128
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
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

LC_AVX2 void ternPlanesAvx2(const float* x, size_t n, float scale, RngKey k, uint8_t* nz, uint8_t* neg) {
  const __m256 vs = _mm256_set1_ps(scale), absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 t = _mm256_mul_ps(simd::uniform24x8(simd::hash32x8(static_cast<uint32_t>(i), k)), vs);
    const int z = _mm256_movemask_ps(_mm256_cmp_ps(t, _mm256_and_ps(v, absmask), _CMP_LT_OQ));
    nz[i / 8] = static_cast<uint8_t>(z);
    neg[i / 8] = static_cast<uint8_t>(z & _mm256_movemask_ps(v));
  }
  ternPlanes(x, n, scale, k, nz, neg, i / 8);
}

template <bool Acc>
LC_AVX2 void ternValuesAvx2(BoolC<Acc>, const uint8_t* nz, const uint8_t* neg, size_t n, float s, float* out) {
  const __m256 pos = _mm256_set1_ps(s), negv = _mm256_set1_ps(-s), zero = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
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
    float f = norm > 0 ? static_cast<float>(s_) / norm : 0.0f;
    if (!(f <= FLT_MAX)) norm = f = 0.0f;  // norm < s/FLT_MAX (~4e-37): sent as zero
    std::memcpy(out, &norm, 4);
    uint8_t* q = out + 4;
    simd::forEachRngSegment(n, ctx, kQsgdSalt, [&](size_t b, size_t m, RngKey k) {
      uint8_t* qb = q + (nibble() ? b / 2 : b);
      if (nibble())
        LC_DISPATCH(qsgdLevels, BoolC<true>{}, x + b, m, f, s_, k, qb);
      else
        LC_DISPATCH(qsgdLevels, BoolC<false>{}, x + b, m, f, s_, k, qb);
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
    const float scale = simd::bitsToFloat(mbits);
    std::memcpy(out, &scale, 4);
    const size_t planeBytes = (n + 7) / 8;
    simd::forEachRngSegment(n, ctx, kTernSalt, [&](size_t b, size_t m, RngKey k) {
      LC_DISPATCH(ternPlanes, x + b, m, scale, k, out + 4 + b / 8, out + 4 + planeBytes + b / 8);
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
