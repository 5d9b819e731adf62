// One bit per value: sign (signSGD), scaled_sign (EF-signSGD) and onebit (1-bit SGD).
//
// Payloads (two_phase, exact size, alignment 8; f32 little-endian, unaligned):
//   sign         bits[ceil(n/8)]                       decoded ±1
//   scaled_sign  f32 mean|x|, bits[ceil(n/8)]          decoded ±mean|x|
//   onebit       f32 mean of x >= 0, f32 mean of x < 0, bits[ceil(n/8)]
//                                                      decoded: the mean of the value's side
// Bit j of byte k is 1 when value 8k+j is negative, i.e. !(x >= 0): -0 counts as positive, nan
// as negative (sign only; the scaled codecs refuse non-finite input). Padding bits are 0.
// Majority vote (signSGD): the chunk owner sums the ±1/world decoded values and re-encodes the
// sum, whose sign is the majority (a tie gives +1).
#include <cmath>
#include <type_traits>

#include "codecs.h"
#include "payload.h"
#include "simd.h"

namespace lowcomm::compress {
namespace {

enum class Kind { sign, scaled, onebit };

const char* kindName(Kind k) { return k == Kind::sign ? "sign" : k == Kind::scaled ? "scaled_sign" : "onebit"; }
size_t headerBytes(Kind k) { return k == Kind::sign ? 0 : k == Kind::scaled ? 4 : 8; }

// Statistics in double, 16 lanes by index mod 16, then the lanes in order and the tail (the
// last n % 16 values) last: the same bits on every path.
struct Stats {
  double abs[16] = {}, pos[16] = {}, neg[16] = {};
  double abs_tail = 0, pos_tail = 0, neg_tail = 0;
  uint64_t negatives = 0;
  static double total(const double* a, double tail) {
    double s = 0;
    for (int j = 0; j < 16; ++j) s += a[j];
    return s + tail;
  }
};

// All ones when x is negative in the codec's sense (!(x >= 0)), else 0.
LC_INLINE uint32_t negMask(float x) { return 0u - static_cast<uint32_t>(!(x >= 0.f)); }

// onebit's sides: x & ~mask (x or +0) and x & mask.
LC_INLINE double positivePart(float x) { return simd::bitsToFloat(simd::floatBits(x) & ~negMask(x)); }
LC_INLINE double negativePart(float x) { return simd::bitsToFloat(simd::floatBits(x) & negMask(x)); }

// Adds x[0..n) to the statistics K needs; lane j gets elements i ≡ j (mod 16), the last n % 16
// go to the tail (only the final block of an encode has one).
template <Kind K>
LC_INLINE void accumulate(const float* x, size_t n, Stats& st) {
  const size_t n16 = n & ~size_t{15};
  if constexpr (K == Kind::scaled) {
    for (size_t i = 0; i < n16; i += 16)
      for (int j = 0; j < 16; ++j) st.abs[j] += std::fabs(static_cast<double>(x[i + j]));
    for (size_t i = n16; i < n; ++i) st.abs_tail += std::fabs(static_cast<double>(x[i]));
  } else if constexpr (K == Kind::onebit) {
    uint64_t negatives = 0;
    for (size_t i = 0; i < n; ++i) negatives += negMask(x[i]) & 1;
    st.negatives += negatives;
    for (size_t i = 0; i < n16; i += 16)
      for (int j = 0; j < 16; ++j) {
        st.pos[j] += positivePart(x[i + j]);
        st.neg[j] += negativePart(x[i + j]);
      }
    for (size_t i = n16; i < n; ++i) {
      st.pos_tail += positivePart(x[i]);
      st.neg_tail += negativePart(x[i]);
    }
  }
}

// Bits of x[0..n) from byte 0 (n any size; the last byte's padding is 0).
LC_INLINE void packBits(const float* x, size_t n, uint8_t* bits) {
  for (size_t k = 0; k * 8 < n; ++k) {
    const size_t m = n - k * 8 < 8 ? n - k * 8 : 8;
    uint32_t b = 0;
    for (size_t j = 0; j < m; ++j) b |= (negMask(x[k * 8 + j]) & 1) << j;
    bits[k] = static_cast<uint8_t>(b);
  }
}

template <Kind K>
using KindC = std::integral_constant<Kind, K>;
template <bool B>
using BoolC = std::integral_constant<bool, B>;

// Blocks of 2048 values: statistics then bits, while the block is in L1.
template <Kind K>
void encodeGeneric(KindC<K>, const float* x, size_t n, uint8_t* bits, Stats& st) {
  constexpr size_t kBlock = 2048;
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t m = n - b < kBlock ? n - b : kBlock;
    accumulate<K>(x + b, m, st);
    packBits(x + b, m, bits + b / 8);
  }
}

// out[i] = bit i ? neg : pos (Acc: +=), selected with integer masks (no branch per value).
template <bool Acc>
LC_INLINE void selectBits(const uint8_t* bits, size_t begin, size_t n, float pos, float neg, float* out) {
  uint32_t pb, nb;
  std::memcpy(&pb, &pos, 4);
  std::memcpy(&nb, &neg, 4);
  for (size_t i = begin; i < n; ++i) {
    const uint32_t m = 0u - ((bits[i >> 3] >> (i & 7)) & 1u);
    const float v = simd::bitsToFloat((pb & ~m) | (nb & m));
    out[i] = Acc ? out[i] + v : v;
  }
}

template <bool Acc>
void decodeGeneric(BoolC<Acc>, const uint8_t* bits, size_t n, float pos, float neg, float* out) {
  selectBits<Acc>(bits, 0, n, pos, neg, out);
}

#if LC_X86
// Lanes 4h..4h+3 of x as doubles.
LC_AVX2 LC_INLINE __m256d lowPd(__m256 v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
LC_AVX2 LC_INLINE __m256d highPd(__m256 v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }

// 16 values per step: both negative masks give two bytes of bits and feed the statistics, with
// the lane order of accumulate(); the last n % 16 values go through the portable code.
template <Kind K>
LC_AVX2 void encodeAvx2(KindC<K>, const float* x, size_t n, uint8_t* bits, Stats& st) {
  __m256d a[4], p[4], g[4];
  for (int h = 0; h < 4; ++h) {
    a[h] = _mm256_loadu_pd(st.abs + 4 * h);
    p[h] = _mm256_loadu_pd(st.pos + 4 * h);
    g[h] = _mm256_loadu_pd(st.neg + 4 * h);
  }
  const __m256 zero = _mm256_setzero_ps(), absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  uint64_t negatives = 0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    simd::prefetchAhead(x + i);
    const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    const __m256 m0 = _mm256_cmp_ps(v0, zero, _CMP_NGE_UQ), m1 = _mm256_cmp_ps(v1, zero, _CMP_NGE_UQ);
    const uint32_t w = static_cast<uint32_t>(_mm256_movemask_ps(m0) | _mm256_movemask_ps(m1) << 8);
    const uint16_t w16 = static_cast<uint16_t>(w);
    std::memcpy(bits + i / 8, &w16, 2);
    if constexpr (K == Kind::scaled) {
      const __m256 b0 = _mm256_and_ps(v0, absmask), b1 = _mm256_and_ps(v1, absmask);
      a[0] = _mm256_add_pd(a[0], lowPd(b0));
      a[1] = _mm256_add_pd(a[1], highPd(b0));
      a[2] = _mm256_add_pd(a[2], lowPd(b1));
      a[3] = _mm256_add_pd(a[3], highPd(b1));
    } else if constexpr (K == Kind::onebit) {
      negatives += static_cast<uint64_t>(_mm_popcnt_u32(w));
      const __m256 p0 = _mm256_andnot_ps(m0, v0), p1 = _mm256_andnot_ps(m1, v1);
      const __m256 g0 = _mm256_and_ps(m0, v0), g1 = _mm256_and_ps(m1, v1);
      p[0] = _mm256_add_pd(p[0], lowPd(p0));
      p[1] = _mm256_add_pd(p[1], highPd(p0));
      p[2] = _mm256_add_pd(p[2], lowPd(p1));
      p[3] = _mm256_add_pd(p[3], highPd(p1));
      g[0] = _mm256_add_pd(g[0], lowPd(g0));
      g[1] = _mm256_add_pd(g[1], highPd(g0));
      g[2] = _mm256_add_pd(g[2], lowPd(g1));
      g[3] = _mm256_add_pd(g[3], highPd(g1));
    }
  }
  for (int h = 0; h < 4; ++h) {
    _mm256_storeu_pd(st.abs + 4 * h, a[h]);
    _mm256_storeu_pd(st.pos + 4 * h, p[h]);
    _mm256_storeu_pd(st.neg + 4 * h, g[h]);
  }
  st.negatives += negatives;
  accumulate<K>(x + i, n - i, st);
  packBits(x + i, n - i, bits + i / 8);
}

template <bool Acc>
LC_AVX2 void decodeAvx2(BoolC<Acc>, const uint8_t* bits, size_t n, float pos, float neg, float* out) {
  const __m256 vp = _mm256_set1_ps(pos), vn = _mm256_set1_ps(neg);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    simd::prefetchAhead(out + i);
    simd::prefetchAhead(out + i + 16);
    uint32_t w;
    std::memcpy(&w, bits + i / 8, 4);
    for (int q = 0; q < 4; ++q) {
      const __m256 v = _mm256_blendv_ps(vp, vn, _mm256_castsi256_ps(simd::laneBits(w >> (8 * q))));
      float* o = out + i + 8 * q;
      _mm256_storeu_ps(o, Acc ? _mm256_add_ps(_mm256_loadu_ps(o), v) : v);
    }
  }
  selectBits<Acc>(bits, i, n, pos, neg, out);
}
#endif

template <Kind K>
class SignCodec : public Codec {
 public:
  std::string name() const override { return kindName(K); }
  Combine combine() const override { return Combine::two_phase; }
  size_t maxBytes(size_t n) const override { return headerBytes(K) + (n + 7) / 8; }
  size_t alignment() const override { return 8; }

  size_t encode(const float* x, size_t n, uint8_t* out, const EncodeCtx&) const override {
    Stats st;
    uint8_t* bits = out + headerBytes(K);
    LC_DISPATCH(encode, KindC<K>{}, x, n, bits, st);
    PayloadWriter w(out);
    if constexpr (K == Kind::scaled) {
      const double mean = n ? Stats::total(st.abs, st.abs_tail) / static_cast<double>(n) : 0.0;
      if (!std::isfinite(mean)) simd::throwNonFinite(kindName(K));
      w.put(static_cast<float>(mean));
    } else if constexpr (K == Kind::onebit) {
      const uint64_t negatives = st.negatives;
      const uint64_t positives = n - negatives;
      const double mp = positives ? Stats::total(st.pos, st.pos_tail) / static_cast<double>(positives) : 0.0;
      const double mn = negatives ? Stats::total(st.neg, st.neg_tail) / static_cast<double>(negatives) : 0.0;
      if (!std::isfinite(mp) || !std::isfinite(mn)) simd::throwNonFinite(kindName(K));
      w.put(static_cast<float>(mp));
      w.put(static_cast<float>(mn));
    }
    return maxBytes(n);
  }

  void decode(const uint8_t* p, size_t bytes, size_t n, float* out, float scale, bool accumulate,
              const EncodeCtx&) const override {
    const char* nm = kindName(K);
    expectSize(nm, bytes, maxBytes(n));
    PayloadReader r(p, bytes, nm);
    float pos = 1.f, neg = -1.f;
    if constexpr (K == Kind::scaled) {
      pos = r.getFinite("scale");
      neg = -pos;
      if (pos < 0) r.fail("negative scale");
    } else if constexpr (K == Kind::onebit) {
      pos = r.getFinite("positive mean");
      neg = r.getFinite("negative mean");
      if (pos < 0 || neg > 0) r.fail("mean on the wrong side of zero");
    }
    const uint8_t* bits = r.take((n + 7) / 8);
    if (n % 8 && bits[n / 8] >> (n % 8)) r.fail("non-zero padding bits");
    pos *= scale;
    neg *= scale;
    if (accumulate)
      LC_DISPATCH(decode, BoolC<true>{}, bits, n, pos, neg, out);
    else
      LC_DISPATCH(decode, BoolC<false>{}, bits, n, pos, neg, out);
  }
};

}  // namespace

std::unique_ptr<Codec> makeSignCodec() { return std::make_unique<SignCodec<Kind::sign>>(); }
std::unique_ptr<Codec> makeScaledSignCodec() { return std::make_unique<SignCodec<Kind::scaled>>(); }
std::unique_ptr<Codec> makeOneBitCodec() { return std::make_unique<SignCodec<Kind::onebit>>(); }

}  // namespace lowcomm::compress
