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
  const uint32_t normal = o + 0x38000000u;                                       // rebias by 112
  const uint32_t infnan = o + 0x70000000u;                                       // exponent 255
  const uint32_t sub = floatBits(bitsToFloat(o + 0x38800000u) - 0x1p-14f);       // m · 2^-24, exact
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

template <bool Half>
LC_INLINE void encodeLoop(const float* x, size_t begin, size_t n, uint16_t* h) {
  for (size_t i = begin; i < n; ++i) h[i] = Half ? toHalf(x[i]) : toBf16(x[i]);
}

template <bool Half, bool Acc>
LC_INLINE void decodeLoop(const uint16_t* h, size_t begin, size_t n, float scale, float* out) {
  for (size_t i = begin; i < n; ++i) {
    const float v = scale * (Half ? fromHalf(h[i]) : fromBf16(h[i]));
    out[i] = Acc ? out[i] + v : v;
  }
}

template <bool Half>
void encodeGeneric(HalfC<Half>, const float* x, size_t n, uint16_t* h) {
  encodeLoop<Half>(x, 0, n, h);
}

template <bool Half, bool Acc>
void decodeGeneric(HalfC<Half>, std::integral_constant<bool, Acc>, const uint16_t* h, size_t n, float scale,
                   float* out) {
  decodeLoop<Half, Acc>(h, 0, n, scale, out);
}

#if LC_X86
template <bool Half>
LC_AVX2 void encodeAvx2(HalfC<Half>, const float* x, size_t n, uint16_t* h) {
  size_t i = 0;
  if constexpr (Half)
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  encodeLoop<Half>(x, i, n, h);
}

template <bool Half, bool Acc>
LC_AVX2 void decodeAvx2(HalfC<Half>, std::integral_constant<bool, Acc>, const uint16_t* h, size_t n, float scale,
                        float* out) {
  size_t i = 0;
  if constexpr (Half) {
    const __m256 s = _mm256_set1_ps(scale);
    for (; i + 8 <= n; i += 8) {
      __m256 v = _mm256_mul_ps(s, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
      if (Acc) v = _mm256_add_ps(_mm256_loadu_ps(out + i), v);
      _mm256_storeu_ps(out + i, v);
    }
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
    // Payloads of allreduce codecs are f16/bf16-typed buffers: 2-byte aligned.
    LC_DISPATCH(encode, HalfC<kHalf>{}, x, n, reinterpret_cast<uint16_t*>(out));
    return 2 * n;
  }

  void decode(const uint8_t* p, size_t bytes, size_t n, float* out, float scale, bool accumulate,
              const EncodeCtx&) const override {
    expectSize(kName, bytes, 2 * n);
    const auto* h = reinterpret_cast<const uint16_t*>(p);
    if (accumulate)
      LC_DISPATCH(decode, HalfC<kHalf>{}, std::true_type{}, h, n, scale, out);
    else
      LC_DISPATCH(decode, HalfC<kHalf>{}, std::false_type{}, h, n, scale, out);
  }
};

}  // namespace

std::unique_ptr<Codec> makeFp16Codec() { return std::make_unique<Float16Codec<comm::DType::f16>>(); }
std::unique_ptr<Codec> makeBf16Codec() { return std::make_unique<Float16Codec<comm::DType::bf16>>(); }

}  // namespace lowcomm::compress
