// fp16 and bf16: each value rounded to 16 bits (nearest even). Payloads are summable: the
// communicator adds them in f32 arithmetic, and the reducer pre-divides by the world size
// before encoding so partial sums stay in range.
//
// Results equal comm::floatToHalf / floatToBf16 / halfToFloat / bf16ToFloat for every finite
// value (subnormals included; overflow gives ±inf). Inf stays inf, nan stays nan (quiet; the
// F16C path may keep a few payload bits the portable path drops).
#include <type_traits>

#include "codecs.h"
#include "payload.h"
#include "simd.h"

namespace lowcomm::compress {
namespace {

using simd::bitsToFloat;
using simd::floatBits;

// Branch-free forms of the comm conversions, so that loops over them vectorise.
LC_INLINE uint16_t toHalf(float f) {
  const uint32_t u = floatBits(f);
  const uint32_t a = u & 0x7fffffffu;
  // Normal range: rebias the exponent, round to nearest even on the 13 dropped bits.
  const uint32_t normal = (a + 0xc8000fffu + ((a >> 13) & 1)) >> 13;
  // Below the smallest normal half: adding 0.5 aligns the result to units of 2^-24 and the
  // float adder rounds to nearest even.
  const uint32_t sub = floatBits(bitsToFloat(a) + 0.5f) - 0x3f000000u;
  uint32_t r = a < 0x38800000u ? sub : normal;
  r = a >= 0x477ff000u ? 0x7c00u : r;  // rounds to >= 65520: inf (inf itself included)
  r = a > 0x7f800000u ? 0x7e00u : r;   // nan: quiet nan
  return static_cast<uint16_t>(((u >> 16) & 0x8000u) | r);
}

LC_INLINE float fromHalf(uint16_t h) {
  const uint32_t o = static_cast<uint32_t>(h & 0x7fff) << 13;
  const uint32_t exp = o & 0x0f800000u;
  const uint32_t normal = o + 0x38000000u;                                  // rebias by 112
  const uint32_t infnan = o + 0x70000000u;                                  // exponent 255
  const uint32_t sub = floatBits(bitsToFloat(o + 0x38800000u) - 0x1p-14f);  // m·2^-24, exact
  uint32_t r = exp == 0x0f800000u ? infnan : exp == 0 ? sub : normal;
  return bitsToFloat(r | static_cast<uint32_t>(h & 0x8000) << 16);
}

LC_INLINE uint16_t toBf16(float f) {
  const uint32_t u = floatBits(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1)) >> 16;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40 : rounded);
}

LC_INLINE float fromBf16(uint16_t b) { return bitsToFloat(static_cast<uint32_t>(b) << 16); }

template <bool Half>
using HalfC = std::integral_constant<bool, Half>;
template <bool B>
using BoolC = std::integral_constant<bool, B>;

// Payload access through memcpy: the payload may sit at any address.
template <bool Half>
LC_INLINE void encodeLoop(const float* x, size_t begin, size_t n, uint8_t* h) {
  for (size_t i = begin; i < n; ++i) {
    const uint16_t v = Half ? toHalf(x[i]) : toBf16(x[i]);
    std::memcpy(h + 2 * i, &v, 2);
  }
}

template <bool Half, bool Acc>
LC_INLINE void decodeLoop(const uint8_t* h, size_t begin, size_t n, float scale, float* out) {
  for (size_t i = begin; i < n; ++i) {
    uint16_t b;
    std::memcpy(&b, h + 2 * i, 2);
    const float v = scale * (Half ? fromHalf(b) : fromBf16(b));
    out[i] = Acc ? out[i] + v : v;
  }
}

template <bool Half>
void encodeGeneric(HalfC<Half>, const float* x, size_t n, uint8_t* h) {
  encodeLoop<Half>(x, 0, n, h);
}

template <bool Half, bool Acc>
void decodeGeneric(HalfC<Half>, BoolC<Acc>, const uint8_t* h, size_t n, float scale, float* out) {
  decodeLoop<Half, Acc>(h, 0, n, scale, out);
}

#if LC_X86
// toBf16 of 8 values, as 8 int32 lanes.
LC_AVX2 LC_INLINE __m256i toBf16x8(const float* x) {
  const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

template <bool Half>
LC_AVX2 void encodeAvx2(HalfC<Half>, const float* x, size_t n, uint8_t* h) {
  size_t i = 0;
  if constexpr (Half) {
    for (; i + 16 <= n; i += 16) {
      simd::prefetchAhead(x + i);
      for (size_t k = i; k < i + 16; k += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(h + 2 * k),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + k), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
  } else {
    for (; i + 16 <= n; i += 16) {
      simd::prefetchAhead(x + i);
      const __m256i packed = _mm256_packus_epi32(toBf16x8(x + i), toBf16x8(x + i + 8));  // lanes interleaved
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(h + 2 * i), _mm256_permute4x64_epi64(packed, 0xd8));
    }
  }
  encodeLoop<Half>(x, i, n, h);
}

template <bool Half, bool Acc>
LC_AVX2 void decodeAvx2(HalfC<Half>, BoolC<Acc>, const uint8_t* h, size_t n, float scale, float* out) {
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    simd::prefetchAhead(out + i);
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 2 * i));
    const __m256 f = Half ? _mm256_cvtph_ps(b) : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
    __m256 v = _mm256_mul_ps(s, f);
    if (Acc) v = _mm256_add_ps(_mm256_loadu_ps(out + i), v);
    _mm256_storeu_ps(out + i, v);
  }
  decodeLoop<Half, Acc>(h, i, n, scale, out);
}
#endif

template <comm::DType T>
class Float16Codec : public Codec {
  static constexpr bool kHalf = T == comm::DType::f16;
  static constexpr const char* kName = kHalf ? "fp16" : "bf16";

 public:
  std::string name() const override { return kName; }
  Combine combine() const override { return Combine::allreduce; }
  comm::DType wireType() const override { return T; }
  size_t maxBytes(size_t n) const override { return 2 * n; }

  size_t encode(const float* x, size_t n, uint8_t* out, const EncodeCtx&) const override {
    LC_DISPATCH(encode, HalfC<kHalf>{}, x, n, out);
    return 2 * n;
  }

  void decode(const uint8_t* p, size_t bytes, size_t n, float* out, float scale, bool accumulate,
              const EncodeCtx&) const override {
    expectSize(kName, bytes, 2 * n);
    if (accumulate)
      LC_DISPATCH(decode, HalfC<kHalf>{}, BoolC<true>{}, p, n, scale, out);
    else
      LC_DISPATCH(decode, HalfC<kHalf>{}, BoolC<false>{}, p, n, scale, out);
  }
};

}  // namespace

std::unique_ptr<Codec> makeFp16Codec() { return std::make_unique<Float16Codec<comm::DType::f16>>(); }
std::unique_ptr<Codec> makeBf16Codec() { return std::make_unique<Float16Codec<comm::DType::bf16>>(); }

}  // namespace lowcomm::compress
