// Private to the elementwise codecs: CPU dispatch, the counter-based RNG and helpers shared by
// several codecs. Not part of the public API.
//
// Dispatch: a hot kernel exists as fooGeneric (portable C++) and, on x86, fooAvx2 (LC_AVX2:
// avx2, f16c, bmi2, popcnt, aes); LC_DISPATCH picks one per call, never per element. Helpers
// marked LC_INLINE are always inlined, so in an LC_AVX2 caller they are compiled (and
// auto-vectorised) for AVX2. FMA is deliberately not enabled: without contraction both versions
// round identically, so a payload never depends on which kind of CPU encoded it (the tests
// compare the two bit for bit).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "lowcomm/base/error.h"
#include "lowcomm/compress/codec.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define LC_X86 1
#define LC_DISPATCH(fn, ...) (::lowcomm::compress::simd::avx2() ? fn##Avx2(__VA_ARGS__) : fn##Generic(__VA_ARGS__))
#else
#define LC_X86 0
#define LC_DISPATCH(fn, ...) fn##Generic(__VA_ARGS__)
#endif

#define LC_AVX2 __attribute__((target("avx2,f16c,bmi2,popcnt,aes")))
#define LC_INLINE inline __attribute__((always_inline))

namespace lowcomm::compress::simd {

namespace detail {
#if LC_X86
// __builtin_cpu_supports("avx2") includes the OS saving the YMM state; the other features come
// from cpuid (clang's builtin knows no "f16c").
inline bool cpuHasAvx2() {
  __builtin_cpu_init();
  unsigned a, b, c, d;
  if (!__builtin_cpu_supports("avx2") || !__get_cpuid(1, &a, &b, &c, &d)) return false;
  if (!(c & bit_F16C) || !(c & bit_AES) || !(c & bit_POPCNT)) return false;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_BMI2);
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

LC_INLINE uint32_t absBits(float v) { return floatBits(v) & 0x7fffffffu; }

// Nearest integer (ties to even) of 0 <= v < 2^23: the float adder rounds v + 2^23.
LC_INLINE int32_t roundSmall(float v) { return static_cast<int32_t>(floatBits(v + 8388608.0f)) - 0x4b000000; }

// Non-finite input (a nan/inf gradient) cannot be encoded by a scaled codec.
[[noreturn]] inline void throwNonFinite(const char* codec) {
  throw DataError(std::string("codec ") + codec + ": cannot encode a non-finite value (nan or inf in the input)");
}

// ---- Counter-based RNG: three AES rounds over the block counter, keyed by the EncodeCtx (AES-NI
// on the AVX2 path, the same rounds in software otherwise: identical bits). Block b gives the
// 16-bit uniforms of elements 8b..8b+7 (its uint16 lanes in order). Stateless: any order, any
// range. Three rounds diffuse every counter bit into every output bit; this drives stochastic
// rounding, not cryptography.

inline uint64_t fmix64(uint64_t x) {  // splitmix64 finaliser (a bijection)
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct RngKey {
  alignas(16) uint8_t round[4][16];  // whitening key, then one key per round
};

// Stream of one encode call: every ctx field (stochastic rounding differs per rank too), a
// per-codec salt, and the 2^32-element segment the block counter runs in.
inline RngKey rngKey(const EncodeCtx& ctx, uint64_t salt, uint64_t segment) {
  uint64_t h = fmix64(salt + 0x9e3779b97f4a7c15ull);
  for (uint64_t v : {ctx.seed, static_cast<uint64_t>(ctx.step), static_cast<uint64_t>(ctx.bucket),
                     static_cast<uint64_t>(ctx.chunk), static_cast<uint64_t>(ctx.rank), segment})
    h = fmix64(h ^ fmix64(v + 0x9e3779b97f4a7c15ull));
  RngKey k;
  for (int w = 0; w < 8; ++w) {
    const uint64_t word = fmix64(h + static_cast<uint64_t>(w + 1) * 0x9e3779b97f4a7c15ull);
    std::memcpy(&k.round[0][0] + 8 * w, &word, 8);
  }
  return k;
}

namespace detail {
constexpr uint8_t rotl8(uint8_t x, int r) { return static_cast<uint8_t>(x << r | x >> (8 - r)); }
struct Sbox {
  uint8_t v[256];
};
// The AES S-box: multiplicative inverse in GF(2^8) (walking powers of 3 and of its inverse),
// then the affine map.
constexpr Sbox makeSbox() {
  Sbox s{};
  uint8_t p = 1, q = 1;
  do {
    p = static_cast<uint8_t>(p ^ (p << 1) ^ (p & 0x80 ? 0x1b : 0));
    q = static_cast<uint8_t>(q ^ (q << 1));
    q = static_cast<uint8_t>(q ^ (q << 2));
    q = static_cast<uint8_t>(q ^ (q << 4));
    if (q & 0x80) q ^= 0x09;
    s.v[p] = static_cast<uint8_t>(q ^ rotl8(q, 1) ^ rotl8(q, 2) ^ rotl8(q, 3) ^ rotl8(q, 4) ^ 0x63);
  } while (p != 1);
  s.v[0] = 0x63;
  return s;
}
inline constexpr Sbox kSbox = makeSbox();
static_assert(kSbox.v[0x01] == 0x7c && kSbox.v[0x53] == 0xed && kSbox.v[0xff] == 0x16, "AES S-box");

constexpr uint8_t xtime(uint8_t a) { return static_cast<uint8_t>(a << 1 ^ (a & 0x80 ? 0x1b : 0)); }

// SubBytes and MixColumns of one byte as a column contribution (rows 0..3 = bytes 0..3 of a
// little-endian word): {2, 1, 1, 3}·S[v]. Row r's table is this word rotated by 8r bits.
struct Te {
  uint32_t t[256];
};
constexpr Te makeTe() {
  Te e{};
  for (int v = 0; v < 256; ++v) {
    const uint32_t sv = kSbox.v[v], s2 = xtime(kSbox.v[v]);
    e.t[v] = s2 | sv << 8 | sv << 16 | (s2 ^ sv) << 24;
  }
  return e;
}
inline constexpr Te kTe = makeTe();

constexpr uint32_t rotl32(uint32_t x, int r) { return x << r | x >> (32 - r); }

// _mm_aesenc_si128 on 4 little-endian column words: ShiftRows (row r of column c comes from
// column c + r), SubBytes, MixColumns, then xor the round key.
inline void aesRound(uint32_t s[4], const uint32_t k[4]) {
  uint32_t o[4];
  for (int c = 0; c < 4; ++c)
    o[c] = kTe.t[s[c] & 0xff] ^ rotl32(kTe.t[(s[(c + 1) & 3] >> 8) & 0xff], 8) ^
           rotl32(kTe.t[(s[(c + 2) & 3] >> 16) & 0xff], 16) ^ rotl32(kTe.t[s[(c + 3) & 3] >> 24], 24) ^ k[c];
  for (int c = 0; c < 4; ++c) s[c] = o[c];
}
}  // namespace detail

// The 8 uniforms in [0, 2^16) of block b (the same bits as AES-NI on a little-endian machine).
inline void randomBlock(uint32_t b, const RngKey& key, uint16_t r[8]) {
  uint32_t s[4], k[4];
  std::memcpy(s, key.round[0], 16);
  s[0] ^= b;
  for (int round = 1; round < 4; ++round) {
    std::memcpy(k, key.round[round], 16);
    detail::aesRound(s, k);
  }
  std::memcpy(r, s, 16);
}

// Calls f(begin, count, key) for each segment of at most 2^32 elements (f(0, 0, key) if n = 0).
template <typename F>
inline void forEachRngSegment(size_t n, const EncodeCtx& ctx, uint64_t salt, F&& f) {
  constexpr size_t kSeg = size_t{1} << 32;
  for (size_t b = 0, s = 0;; b += kSeg, ++s) {
    f(b, n - b < kSeg ? n - b : kSeg, rngKey(ctx, salt, s));
    if (n - b <= kSeg) break;
  }
}

// ---- Reductions with a fixed association (lanes by index mod 16, then the lanes in order):
// the same result in the portable and the AVX2 build.

// Streaming passes over x prefetch this far ahead: the hardware prefetcher alone leaves a
// compute-heavy loop waiting on memory (measured: QSGD's level pass a third faster at 25M values).
constexpr uintptr_t kPrefetchBytes = 4096;
// A hint only: integer arithmetic, so an address past the end is harmless.
LC_INLINE void prefetchAhead(const void* p) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) + kPrefetchBytes));
}

// max |x| as bits: order-preserving for non-negative floats; >= 0x7f800000 means inf or nan.
LC_INLINE uint32_t maxAbsBitsLoop(const float* x, size_t n) {
  uint32_t m[16] = {};
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetchAhead(x + i);
    for (int j = 0; j < 16; ++j) {
      const uint32_t a = absBits(x[i + j]);
      m[j] = a > m[j] ? a : m[j];
    }
  }
  uint32_t r = 0;
  for (; i < n; ++i) r = absBits(x[i]) > r ? absBits(x[i]) : r;
  for (int j = 0; j < 16; ++j) r = m[j] > r ? m[j] : r;
  return r;
}

// Sum of x²: blocks of 256 values summed in float (lane = index mod 16, 16 terms per lane),
// each lane then added to a double accumulator; the last n % 256 values and any block whose
// float sums overflow (|x| > ~1e18) are summed in double. Relative error <= ~2^-20; nan and
// inf propagate.
constexpr size_t kSquaresBlock = 256;

LC_INLINE void squaresBlockDouble(const float* x, double* acc) {
  for (size_t i = 0; i < kSquaresBlock; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += static_cast<double>(x[i + j]) * x[i + j];
}

LC_INLINE double sumSquaresFinish(const double* acc, const float* x, size_t n) {
  double tail = 0;
  for (size_t i = 0; i < n; ++i) tail += static_cast<double>(x[i]) * x[i];
  double s = 0;
  for (int j = 0; j < 16; ++j) s += acc[j];
  return s + tail;
}

inline double sumSquaresGeneric(const float* x, size_t n) {
  double acc[16] = {};
  size_t b = 0;
  for (; b + kSquaresBlock <= n; b += kSquaresBlock) {
    float f[16] = {};
    for (size_t i = b; i < b + kSquaresBlock; i += 16) {
      prefetchAhead(x + i);
      for (int j = 0; j < 16; ++j) f[j] += x[i + j] * x[i + j];
    }
    uint32_t big = 0;
    for (int j = 0; j < 16; ++j) big |= absBits(f[j]) >= 0x7f800000u;
    if (big)
      squaresBlockDouble(x + b, acc);
    else
      for (int j = 0; j < 16; ++j) acc[j] += f[j];
  }
  return sumSquaresFinish(acc, x + b, n - b);
}

inline uint32_t maxAbsBitsGeneric(const float* x, size_t n) { return maxAbsBitsLoop(x, n); }

#if LC_X86
LC_AVX2 inline uint32_t maxAbsBitsAvx2(const float* x, size_t n) { return maxAbsBitsLoop(x, n); }

LC_AVX2 inline double sumSquaresAvx2(const float* x, size_t n) {
  alignas(32) double acc[16] = {};
  __m256d a[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  const __m256i flt_max = _mm256_set1_epi32(0x7f7fffff);
  size_t b = 0;
  for (; b + kSquaresBlock <= n; b += kSquaresBlock) {
    __m256 f0 = _mm256_setzero_ps(), f1 = _mm256_setzero_ps();
    for (size_t i = b; i < b + kSquaresBlock; i += 16) {
      prefetchAhead(x + i);
      const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
      f0 = _mm256_add_ps(f0, _mm256_mul_ps(v0, v0));
      f1 = _mm256_add_ps(f1, _mm256_mul_ps(v1, v1));
    }
    // A sum of squares is >= 0: as int32 it exceeds FLT_MAX's bits when inf (nan propagates).
    const __m256i big = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_castps_si256(f0), flt_max),
                                        _mm256_cmpgt_epi32(_mm256_castps_si256(f1), flt_max));
    if (!_mm256_testz_si256(big, big)) {
      for (int h = 0; h < 4; ++h) _mm256_store_pd(acc + 4 * h, a[h]);
      squaresBlockDouble(x + b, acc);
      for (int h = 0; h < 4; ++h) a[h] = _mm256_load_pd(acc + 4 * h);
      continue;
    }
    a[0] = _mm256_add_pd(a[0], _mm256_cvtps_pd(_mm256_castps256_ps128(f0)));
    a[1] = _mm256_add_pd(a[1], _mm256_cvtps_pd(_mm256_extractf128_ps(f0, 1)));
    a[2] = _mm256_add_pd(a[2], _mm256_cvtps_pd(_mm256_castps256_ps128(f1)));
    a[3] = _mm256_add_pd(a[3], _mm256_cvtps_pd(_mm256_extractf128_ps(f1, 1)));
  }
  for (int h = 0; h < 4; ++h) _mm256_store_pd(acc + 4 * h, a[h]);
  return sumSquaresFinish(acc, x + b, n - b);
}

// Lane j: bit 31 = bit j of b (a blendv mask).
LC_AVX2 LC_INLINE __m256i laneBits(uint32_t b) {
  const __m256i shifts = _mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24);
  return _mm256_sllv_epi32(_mm256_set1_epi32(static_cast<int>(b)), shifts);
}

// The round keys in registers: load once per kernel (stores through uint8_t* payload pointers
// would otherwise force reloads).
struct RngNi {
  __m128i k[4];
};
LC_AVX2 LC_INLINE RngNi loadRng(const RngKey& key) {
  RngNi r;
  for (int i = 0; i < 4; ++i) r.k[i] = _mm_load_si128(reinterpret_cast<const __m128i*>(key.round[i]));
  return r;
}

// randomBlock(b) as 8 uint16 lanes (the counter in the low 4 bytes, little-endian as there).
LC_AVX2 LC_INLINE __m128i randomBlockNi(uint32_t b, const RngNi& k) {
  __m128i s = _mm_xor_si128(_mm_cvtsi32_si128(static_cast<int>(b)), k.k[0]);
  s = _mm_aesenc_si128(s, k.k[1]);
  s = _mm_aesenc_si128(s, k.k[2]);
  return _mm_aesenc_si128(s, k.k[3]);
}

// Uniforms of elements 8b..8b+7 as 8 int32 lanes.
LC_AVX2 LC_INLINE __m256i random8(uint32_t b, const RngNi& k) { return _mm256_cvtepu16_epi32(randomBlockNi(b, k)); }
#endif

inline uint32_t maxAbsBits(const float* x, size_t n) { return LC_DISPATCH(maxAbsBits, x, n); }
inline double sumSquares(const float* x, size_t n) { return LC_DISPATCH(sumSquares, x, n); }

}  // namespace lowcomm::compress::simd
