// Private to the elementwise codecs: CPU dispatch, the counter-based RNG and helpers shared by
// several codecs. Not part of the public API.
//
// Dispatch: a hot kernel exists as fooGeneric (portable C++) and, on x86, fooAvx2 (LC_AVX2:
// avx2+f16c+bmi2+popcnt); LC_DISPATCH picks one per call, never per element. Helpers marked LC_INLINE
// are always inlined, so in an LC_AVX2 caller they are compiled (and auto-vectorised) for AVX2.
// FMA is deliberately not enabled: without contraction both versions round identically, so a
// payload never depends on which kind of CPU encoded it (tests compare the two bit for bit).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "lowcomm/base/error.h"
#include "lowcomm/compress/codec.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LC_X86 1
#define LC_DISPATCH(fn, ...) \
  (::lowcomm::compress::simd::avx2() ? fn##Avx2(__VA_ARGS__) : fn##Generic(__VA_ARGS__))
#else
#define LC_X86 0
#define LC_DISPATCH(fn, ...) fn##Generic(__VA_ARGS__)
#endif

#define LC_AVX2 __attribute__((target("avx2,f16c,bmi2,popcnt")))
#define LC_INLINE inline __attribute__((always_inline))

namespace lowcomm::compress::simd {

namespace detail {
#if LC_X86
inline bool cpuHasAvx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2") &&
         __builtin_cpu_supports("popcnt");
}
#else
inline bool cpuHasAvx2() { return false; }
#endif
inline std::atomic<bool>& avx2Flag() {
  static std::atomic<bool> flag{cpuHasAvx2()};
  return flag;
}
}  // namespace detail

// True when the AVX2 kernels run (CPU support, not disabled).
inline bool avx2() { return detail::avx2Flag().load(std::memory_order_relaxed); }
// Tests: false forces the portable kernels; true restores AVX2 where the CPU has it.
inline void setSimdEnabled(bool on) {
  static const bool capable = detail::cpuHasAvx2();
  detail::avx2Flag().store(on && capable);
}

// ---- Counter-based RNG: u(i) = hash(i; key), key from the EncodeCtx. No state, any order.

inline uint64_t fmix64(uint64_t x) {  // splitmix64 finaliser (a bijection)
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct RngKey {
  uint32_t k1, k2;
};

// Stream for one encode call: every ctx field (stochastic rounding differs per rank too), a
// per-codec salt, and the 2^32-element segment the 32-bit counter runs in.
inline RngKey rngKey(const EncodeCtx& ctx, uint64_t salt, uint64_t segment) {
  uint64_t h = fmix64(salt + 0x9e3779b97f4a7c15ull);
  for (uint64_t v : {ctx.seed, static_cast<uint64_t>(ctx.step), static_cast<uint64_t>(ctx.bucket),
                     static_cast<uint64_t>(ctx.chunk), static_cast<uint64_t>(ctx.rank), segment})
    h = fmix64(h ^ fmix64(v + 0x9e3779b97f4a7c15ull));
  return {static_cast<uint32_t>(h), static_cast<uint32_t>(h >> 32)};
}

// lowbias32 (Wellons) with the second key mixed in between its rounds: full avalanche on
// consecutive counters; 32-bit multiplies only, so it vectorises (vpmulld).
LC_INLINE uint32_t hash32(uint32_t i, RngKey k) {
  uint32_t x = i ^ k.k1;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= k.k2;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  return x ^ (x >> 16);
}

// Uniform in [0, 1) with 24 bits: exactly representable, so comparisons against it are exact.
LC_INLINE float uniform24(uint32_t h) { return static_cast<float>(static_cast<int32_t>(h >> 8)) * 0x1p-24f; }

// Calls f(begin, count, key) for each segment of at most 2^32 elements (f(0, 0, key) if n = 0).
template <typename F>
void forEachRngSegment(size_t n, const EncodeCtx& ctx, uint64_t salt, F&& f) {
  constexpr size_t kSeg = size_t{1} << 32;
  for (size_t b = 0, s = 0;; b += kSeg, ++s) {
    f(b, n - b < kSeg ? n - b : kSeg, rngKey(ctx, salt, s));
    if (n - b <= kSeg) break;
  }
}

// ---- Reductions with a fixed association (lane = index mod 16, then lanes in order): the
// same result in the portable and the AVX2 build.

LC_INLINE uint32_t absBits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u & 0x7fffffffu;
}

// max |x| as bits: order-preserving for non-negative floats; >= 0x7f800000 means inf or nan.
LC_INLINE uint32_t maxAbsBitsLoop(const float* x, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t a = absBits(x[i]);
    m = a > m ? a : m;
  }
  return m;
}

LC_INLINE uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

LC_INLINE float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Sum of x² in double (no overflow for finite floats; nan/inf propagate).
LC_INLINE double sumSquaresTail(const double* acc, const float* x, size_t n) {
  double tail = 0;
  for (size_t i = 0; i < n; ++i) tail += static_cast<double>(x[i]) * x[i];
  double s = 0;
  for (int j = 0; j < 16; ++j) s += acc[j];
  return s + tail;
}

inline double sumSquaresGeneric(const float* x, size_t n) {
  double acc[16] = {};
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) {
      const double v = x[i + j];
      acc[j] += v * v;
    }
  return sumSquaresTail(acc, x + i, n - i);
}

inline uint32_t maxAbsBitsGeneric(const float* x, size_t n) { return maxAbsBitsLoop(x, n); }

#if LC_X86
LC_AVX2 inline uint32_t maxAbsBitsAvx2(const float* x, size_t n) { return maxAbsBitsLoop(x, n); }

LC_AVX2 inline double sumSquaresAvx2(const float* x, size_t n) {
  __m256d a[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int h = 0; h < 4; ++h) {
      const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * h));
      a[h] = _mm256_add_pd(a[h], _mm256_mul_pd(v, v));
    }
  double acc[16];
  for (int h = 0; h < 4; ++h) _mm256_storeu_pd(acc + 4 * h, a[h]);
  return sumSquaresTail(acc, x + i, n - i);
}

// Lane j: bit 31 = bit j of b (a blendv mask).
LC_AVX2 LC_INLINE __m256i laneBits(uint32_t b) {
  return _mm256_sllv_epi32(_mm256_set1_epi32(static_cast<int>(b)), _mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24));
}

// hash32 of the 8 counters i0..i0+7.
LC_AVX2 LC_INLINE __m256i hash32x8(uint32_t i0, RngKey k) {
  __m256i x = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(i0)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  x = _mm256_xor_si256(x, _mm256_set1_epi32(static_cast<int>(k.k1)));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
  x = _mm256_xor_si256(x, _mm256_set1_epi32(static_cast<int>(k.k2)));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int>(0x846ca68bu)));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

// uniform24 of 8 hashes.
LC_AVX2 LC_INLINE __m256 uniform24x8(__m256i h) {
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(h, 8)), _mm256_set1_ps(0x1p-24f));
}
#endif

inline uint32_t maxAbsBits(const float* x, size_t n) { return LC_DISPATCH(maxAbsBits, x, n); }
inline double sumSquares(const float* x, size_t n) { return LC_DISPATCH(sumSquares, x, n); }

// Non-finite input (a nan/inf gradient) cannot be encoded by a scaled codec.
[[noreturn]] inline void throwNonFinite(const char* codec) {
  throw DataError(std::string("codec ") + codec + ": cannot encode a non-finite value (nan or inf in the input)");
}

}  // namespace lowcomm::compress::simd
