// The qsgd and terngrad kernels (portable and AVX2) and their drivers: the arithmetic of the
// formats codec_quant.cpp describes.
#include "quant_kernels.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "simd.h"

namespace lowcomm::compress {
namespace {

using simd::RngKey;

constexpr uint64_t kQsgdSalt = 0x7173676400000001ull, kTernSalt = 0x7465726e00000002ull;

template <bool B>
using BoolC = std::integral_constant<bool, B>;

constexpr size_t roundUp8(size_t i) { return (i + 7) & ~size_t{7}; }

// Per RNG segment [g, g + m) and block j = [b0, b1) meeting it: f(j, b0, b1, g, e0, e1, key),
// [e0, e1) = the block's part in the segment, relative to g. A block straddling two segments
// (n > 2^32) gets its scale computed twice, equal.
template <typename F>
void forEachBlock(size_t n, size_t block, const EncodeCtx& ctx, uint64_t salt, F&& f) {
  simd::forEachRngSegment(n, ctx, salt, [&](size_t g, size_t m, const RngKey& k) {
    for (size_t j = g / block; j * block < g + m; ++j) {
      const size_t b0 = j * block, b1 = std::min(n, b0 + block);
      f(j, b0, b1, g, std::max(b0, g) - g, std::min(b1, g + m) - g, k);
    }
  });
}

// The uniforms of RNG block b (simd::randomBlock). The AVX2 kernels use AES-NI for their
// partial groups too: a block size that is no multiple of the vector width has some per block.
struct SoftRng {
  const RngKey& k;
  LC_INLINE void operator()(uint32_t b, uint16_t r[8]) const { simd::randomBlock(b, k, r); }
};

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

// ||x[0..m)||² of a block: simd::sumSquares for its multiple of 256 values, the rest (blocks of
// other sizes) here, in 16 double lanes by index mod 16 (sumSquares would add them one by one).
// Products are exact and the association fixed: the same bits in every build.
LC_INLINE double squaresRest(const float* x, size_t m) {
  double acc[16] = {}, sum = 0;
  size_t i = 0;
  for (; i + 16 <= m; i += 16) {
    simd::prefetchAhead(x + i);
    for (size_t j = 0; j < 16; ++j) acc[j] += static_cast<double>(x[i + j]) * x[i + j];
  }
  for (size_t j = 0; i + j < m; ++j) acc[j] += static_cast<double>(x[i + j]) * x[i + j];
  for (double a : acc) sum += a;
  return sum;
}

double squaresRestGeneric(const float* x, size_t m) { return squaresRest(x, m); }
#if LC_X86
LC_AVX2 double squaresRestAvx2(const float* x, size_t m) { return squaresRest(x, m); }
#endif

double sumSquaresBlock(const float* x, size_t m) {
  const size_t full = m / simd::kSquaresBlock * simd::kSquaresBlock;
  return simd::sumSquares(x, full) + (m > full ? LC_DISPATCH(squaresRest, x + full, m - full) : 0.0);
}

// Values [begin, end) of one RNG segment by RNG blocks; q gets one byte per value, or nibble
// pairs. A block ending inside a byte leaves its other nibble 0 (the padding nibble, or the next
// block's): a block starting at an odd value ors its first nibble in.
template <bool Nibble, typename Rng>
LC_INLINE void qsgdGroups(const float* x, size_t begin, size_t end, float f16, int32_t s, Rng rng, uint8_t* q) {
  for (size_t b = begin / 8; b * 8 < end; ++b) {
    uint16_t r[8];
    rng(static_cast<uint32_t>(b), r);
    const size_t e = b * 8, j0 = begin > e ? begin - e : 0, m = end - e < 8 ? end - e : 8;
    int32_t l[8] = {};
    for (size_t j = j0; j < m; ++j) l[j] = qsgdLevel(x[e + j], f16, s, r[j]);
    for (size_t j = Nibble ? j0 & 6 : j0; j < m; j += Nibble ? 2 : 1) {
      const auto v = static_cast<uint8_t>(Nibble ? (l[j] & 15) | (l[j + 1] & 15) << 4 : l[j]);
      const size_t at = Nibble ? (e + j) / 2 : e + j;
      q[at] = static_cast<uint8_t>(j < j0 ? q[at] | v : v);
    }
  }
}

template <bool Nibble>
void qsgdLevelsGeneric(BoolC<Nibble>, const float* x, size_t begin, size_t end, float f16, int32_t s,
                       const RngKey& k, uint8_t* q) {
  qsgdGroups<Nibble>(x, begin, end, f16, s, SoftRng{k}, q);
}

// Writes (Acc: adds) level·f for values [begin, end) of q; nonzero if a level is outside [-s, s].
template <bool Nibble, bool Acc>
LC_INLINE uint32_t qsgdDequantise(const uint8_t* q, size_t begin, size_t end, float f, int32_t s, float* out) {
  uint32_t bad = 0;
  for (size_t i = begin; i < end; ++i) {
    const int32_t l = Nibble ? static_cast<int8_t>(q[i / 2] << (i % 2 ? 0 : 4)) >> 4 : static_cast<int8_t>(q[i]);
    bad |= (l > s) | (l < -s);
    const float v = static_cast<float>(l) * f;
    out[i] = Acc ? out[i] + v : v;
  }
  return bad;
}

template <bool Nibble, bool Acc>
uint32_t qsgdDecodeGeneric(BoolC<Nibble>, BoolC<Acc>, const uint8_t* q, size_t begin, size_t end, float f, int32_t s,
                           float* out) {
  return qsgdDequantise<Nibble, Acc>(q, begin, end, f, s, out);
}

// ---- terngrad

// Nonzero with probability round(|x|·inv16)/2^16, inv16 = 2^16/scale.
LC_INLINE uint32_t ternKeep(float x, float inv16, uint32_t r) {
  return static_cast<int32_t>(r) < simd::roundSmall(std::fabs(x) * inv16);
}

// Both planes for values [begin, end) of one RNG segment (byte b: values 8b..8b+7, RNG block
// b). Bits past a block's end are left 0; a block starting inside a byte ors its bits in.
template <typename Rng>
LC_INLINE void ternGroups(const float* x, size_t begin, size_t end, float inv16, Rng rng, uint8_t* nz, uint8_t* neg) {
  for (size_t b = begin / 8; b * 8 < end; ++b) {
    uint16_t r[8];
    rng(static_cast<uint32_t>(b), r);
    const size_t j0 = begin > b * 8 ? begin - b * 8 : 0, m = end - b * 8 < 8 ? end - b * 8 : 8;
    uint32_t z = 0, g = 0;
    for (size_t j = j0; j < m; ++j) {
      const float v = x[b * 8 + j];
      const uint32_t keep = ternKeep(v, inv16, r[j]);
      z |= keep << j;
      g |= (keep & (v < 0)) << j;
    }
    nz[b] = static_cast<uint8_t>(j0 ? nz[b] | z : z);
    neg[b] = static_cast<uint8_t>(j0 ? neg[b] | g : g);
  }
}

void ternPlanesGeneric(const float* x, size_t begin, size_t end, float inv16, const RngKey& k, uint8_t* nz,
                       uint8_t* neg) {
  ternGroups(x, begin, end, inv16, SoftRng{k}, nz, neg);
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
void ternValuesGeneric(BoolC<Acc>, const uint8_t* nz, const uint8_t* neg, size_t begin, size_t end, float s,
                       float* out) {
  ternValues<Acc>(nz, neg, begin, end, s, out);
}

#if LC_X86
// Not always_inline: the portable group loops that call it are compiled without AVX2 (once
// inlined into an AVX2 kernel, the compiler may inline this too).
struct NiRng {
  const simd::RngNi& k;
  LC_AVX2 void operator()(uint32_t b, uint16_t r[8]) const {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(r), simd::randomBlockNi(b, k));
  }
};

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
LC_AVX2 void qsgdLevelsAvx2(BoolC<Nibble>, const float* x, size_t begin, size_t end, float f16, int32_t s,
                            const RngKey& k, uint8_t* q) {
  const __m256 vf = _mm256_set1_ps(f16);
  const __m256i vs = _mm256_set1_epi8(static_cast<char>(s));
  const simd::RngNi kn = simd::loadRng(k);
  size_t i = std::min(end, roundUp8(begin));
  qsgdGroups<Nibble>(x, begin, i, f16, s, NiRng{kn}, q);  // a block starting inside an RNG block
  if constexpr (Nibble) {
    const __m256i low = _mm256_set1_epi8(15), weights = _mm256_set1_epi16(0x1001);  // byte pairs (1, 16)
    for (; i + 64 <= end; i += 64) {
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
    for (; i + 32 <= end; i += 32) {
      simd::prefetchAhead(x + i);
      simd::prefetchAhead(x + i + 16);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), qsgdLevel32(x, i, vf, vs, kn));
    }
  }
  qsgdGroups<Nibble>(x, i, end, f16, s, NiRng{kn}, q);
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
LC_AVX2 uint32_t qsgdDecodeAvx2(BoolC<Nibble>, BoolC<Acc>, const uint8_t* q, size_t begin, size_t end, float f,
                                int32_t s, float* out) {
  const __m256 vf = _mm256_set1_ps(f);
  __m256i maxabs = _mm256_setzero_si256();  // unsigned max of |level|; |-128| reads as 128
  size_t i = Nibble ? std::min(end, begin + begin % 2) : begin;  // whole bytes of nibbles from here
  uint32_t bad = qsgdDequantise<Nibble, Acc>(q, begin, i, f, s, out);
  for (; i + 32 <= end; i += 32) {
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
  const __m256i vs = _mm256_set1_epi8(static_cast<char>(s));  // max(maxabs, s) == s: all within
  bad |= _mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_max_epu8(maxabs, vs), vs)) != -1;
  return bad | qsgdDequantise<Nibble, Acc>(q, i, end, f, s, out);
}

LC_AVX2 LC_INLINE int ternKeep8(__m256 v, __m256 inv16, __m256i r) {
  const __m256i a = _mm256_abs_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v, inv16)));  // = ternKeep's round
  return _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(a, r)));
}

LC_AVX2 void ternPlanesAvx2(const float* x, size_t begin, size_t end, float inv16, const RngKey& k, uint8_t* nz,
                            uint8_t* neg) {
  const __m256 vi = _mm256_set1_ps(inv16);
  const simd::RngNi kn = simd::loadRng(k);
  size_t i = std::min(end, roundUp8(begin));
  ternGroups(x, begin, i, inv16, NiRng{kn}, nz, neg);  // a block starting inside a byte
  for (; i + 16 <= end; i += 16) {
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
  ternGroups(x, i, end, inv16, NiRng{kn}, nz, neg);
}

template <bool Acc>
LC_AVX2 void ternValuesAvx2(BoolC<Acc>, const uint8_t* nz, const uint8_t* neg, size_t begin, size_t end, float s,
                            float* out) {
  const __m256 pos = _mm256_set1_ps(s), negv = _mm256_set1_ps(-s), zero = _mm256_setzero_ps();
  size_t i = std::min(end, roundUp8(begin));
  ternValues<Acc>(nz, neg, begin, i, s, out);
  for (; i + 8 <= end; i += 8) {
    simd::prefetchAhead(out + i);
    const __m256 mz = _mm256_castsi256_ps(simd::laneBits(nz[i / 8]));
    const __m256 mg = _mm256_castsi256_ps(simd::laneBits(neg[i / 8]));
    const __m256 v = _mm256_blendv_ps(_mm256_blendv_ps(zero, pos, mz), negv, mg);
    _mm256_storeu_ps(out + i, Acc ? _mm256_add_ps(_mm256_loadu_ps(out + i), v) : v);
  }
  ternValues<Acc>(nz, neg, i, end, s, out);
}
#endif

}  // namespace

template <bool Nibble>
void qsgdEncode(const float* x, size_t n, size_t block, int32_t s, const EncodeCtx& ctx, uint8_t* out) {
  uint8_t* q = out + 4 * blockCount(n, block);
  forEachBlock(n, block, ctx, kQsgdSalt, [&](size_t j, size_t b0, size_t b1, size_t g, size_t e0, size_t e1,
                                             const RngKey& k) {
    float norm = static_cast<float>(std::sqrt(sumSquaresBlock(x + b0, b1 - b0)));
    if (!std::isfinite(norm)) simd::throwNonFinite("qsgd");  // or the norm exceeds FLT_MAX
    float f16 = norm > 0 ? static_cast<float>(s) * 65536.0f / norm : 0.0f;
    if (!(f16 <= FLT_MAX)) norm = f16 = 0.0f;
    std::memcpy(out + 4 * j, &norm, 4);
    LC_DISPATCH(qsgdLevels, BoolC<Nibble>{}, x + g, e0, e1, f16, s, k, q + (Nibble ? g / 2 : g));
  });
}

// Returns nonzero if a level is outside [-s, s].
template <bool Nibble, bool Acc>
uint32_t qsgdDecodeBlocks(const uint8_t* p, size_t n, size_t block, int32_t s, float scale, float* out) {
  const size_t nb = blockCount(n, block);
  const uint8_t* q = p + 4 * nb;
  uint32_t bad = 0;
  for (size_t j = 0; j < nb; ++j) {
    float norm;
    std::memcpy(&norm, p + 4 * j, 4);
    const float f = norm / static_cast<float>(s) * scale;
    bad |= LC_DISPATCH(qsgdDecode, BoolC<Nibble>{}, BoolC<Acc>{}, q, j * block, std::min(n, (j + 1) * block), f, s,
                       out);
  }
  return bad;
}

void ternEncode(const float* x, size_t n, size_t block, const EncodeCtx& ctx, uint8_t* out) {
  uint8_t* nz = out + 4 * blockCount(n, block);
  uint8_t* neg = nz + (n + 7) / 8;
  forEachBlock(n, block, ctx, kTernSalt, [&](size_t j, size_t b0, size_t b1, size_t g, size_t e0, size_t e1,
                                             const RngKey& k) {
    const uint32_t mbits = simd::maxAbsBits(x + b0, b1 - b0);
    if (mbits >= 0x7f800000u) simd::throwNonFinite("terngrad");
    float scale = simd::bitsToFloat(mbits);
    float inv16 = scale > 0 ? 65536.0f / scale : 0.0f;
    if (!(inv16 <= FLT_MAX)) scale = inv16 = 0.0f;
    std::memcpy(out + 4 * j, &scale, 4);
    LC_DISPATCH(ternPlanes, x + g, e0, e1, inv16, k, nz + g / 8, neg + g / 8);
  });
}

template <bool Acc>
void ternDecodeBlocks(const uint8_t* p, size_t n, size_t block, float scale, float* out) {
  const size_t nb = blockCount(n, block);
  const uint8_t* nz = p + 4 * nb;
  const uint8_t* neg = nz + (n + 7) / 8;
  for (size_t j = 0; j < nb; ++j) {
    float s;
    std::memcpy(&s, p + 4 * j, 4);
    LC_DISPATCH(ternValues, BoolC<Acc>{}, nz, neg, j * block, std::min(n, (j + 1) * block), s * scale, out);
  }
}

template void qsgdEncode<true>(const float*, size_t, size_t, int32_t, const EncodeCtx&, uint8_t*);
template void qsgdEncode<false>(const float*, size_t, size_t, int32_t, const EncodeCtx&, uint8_t*);
template uint32_t qsgdDecodeBlocks<true, true>(const uint8_t*, size_t, size_t, int32_t, float, float*);
template uint32_t qsgdDecodeBlocks<true, false>(const uint8_t*, size_t, size_t, int32_t, float, float*);
template uint32_t qsgdDecodeBlocks<false, true>(const uint8_t*, size_t, size_t, int32_t, float, float*);
template uint32_t qsgdDecodeBlocks<false, false>(const uint8_t*, size_t, size_t, int32_t, float, float*);
template void ternDecodeBlocks<true>(const uint8_t*, size_t, size_t, float, float*);
template void ternDecodeBlocks<false>(const uint8_t*, size_t, size_t, float, float*);

}  // namespace lowcomm::compress
