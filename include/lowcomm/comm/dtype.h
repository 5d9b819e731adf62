// Element types the collectives move, and the reductions they apply.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lowcomm::comm {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8 };
enum class ReduceOp : uint8_t { sum, avg, max, min };

size_t dtypeSize(DType t);
const char* dtypeName(DType t);
DType parseDType(const std::string& s);  // throws ConfigError naming the bad value
const char* reduceOpName(ReduceOp op);
ReduceOp parseReduceOp(const std::string& s);

// IEEE half and bfloat16 conversions (round to nearest even), used by the reduction kernels.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
inline float bf16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
uint16_t floatToBf16(float f);

// Element i of a typed buffer, converted from/to double (rounded as the dtype rounds).
void storeValue(DType t, void* base, size_t i, double v);
double loadValue(DType t, const void* base, size_t i);

}  // namespace lowcomm::comm
