#include "lowcomm/comm/dtype.h"

#include <cstring>

#include "lowcomm/base/error.h"

namespace lowcomm::comm {

size_t dtypeSize(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::f64: case DType::i64: return 8;
    case DType::f16: case DType::bf16: return 2;
    case DType::u8: return 1;
  }
  return 0;
}

const char* dtypeName(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "?";
}

DType parseDType(const std::string& s) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8})
    if (s == dtypeName(t)) return t;
  if (s == "float" || s == "float32") return DType::f32;
  if (s == "double" || s == "float64") return DType::f64;
  if (s == "half" || s == "float16") return DType::f16;
  if (s == "bfloat16") return DType::bf16;
  throw ConfigError("unknown dtype '" + s + "' (expected f32, f64, f16, bf16, i32, i64 or u8)");
}

const char* reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

ReduceOp parseReduceOp(const std::string& s) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min})
    if (s == reduceOpName(op)) return op;
  throw ConfigError("unknown reduce op '" + s + "' (expected sum, avg, max or min)");
}

float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ff;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else {  // subnormal half: normalise
    float f = static_cast<float>(man) * (1.0f / 16777216.0f);  // man * 2^-24
    std::memcpy(&u, &f, 4);
    u |= sign;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t floatToHalf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  u &= 0x7fffffffu;
  if (u >= 0x7f800000u)  // inf or nan
    return sign | 0x7c00 | (u > 0x7f800000u ? 0x200 : 0);
  if (u >= 0x477ff000u) return sign | 0x7c00;  // rounds to >= 65520: overflow to inf
  if (u < 0x38800000u) {                         // below the smallest normal half
    float a;
    std::memcpy(&a, &u, 4);
    // Scale so the subnormal half mantissa is the integer part; nearbyint rounds to even.
    return sign | static_cast<uint16_t>(__builtin_nearbyintf(a * 16777216.0f));
  }
  const uint32_t mant_odd = (u >> 13) & 1;
  u += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return sign | static_cast<uint16_t>(u >> 13);
}

uint16_t floatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet nan
  u += 0x7fffu + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

void storeValue(DType t, void* base, size_t i, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DType::f64: static_cast<double*>(base)[i] = v; break;
    case DType::f16: static_cast<uint16_t*>(base)[i] = floatToHalf(static_cast<float>(v)); break;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = floatToBf16(static_cast<float>(v)); break;
    case DType::i32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case DType::i64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
    case DType::u8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); break;
  }
}

double loadValue(DType t, const void* base, size_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f64: return static_cast<const double*>(base)[i];
    case DType::f16: return halfToFloat(static_cast<const uint16_t*>(base)[i]);
    case DType::bf16: return bf16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case DType::i32: return static_cast<const int32_t*>(base)[i];
    case DType::i64: return static_cast<const int64_t*>(base)[i];
    case DType::u8: return static_cast<const uint8_t*>(base)[i];
  }
  return 0;
}

}  // namespace lowcomm::comm
