#include "reduce.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace lowcomm::comm {

namespace {

template <typename T>
void combine(T* __restrict d, const T* __restrict s, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      if constexpr (std::is_integral_v<T>) {
        // Integers wrap around on overflow (two's complement), without signed-overflow UB.
        using U = std::make_unsigned_t<T>;
        for (size_t i = 0; i < n; ++i) d[i] = static_cast<T>(static_cast<U>(d[i]) + static_cast<U>(s[i]));
      } else {
        for (size_t i = 0; i < n; ++i) d[i] = d[i] + s[i];
      }
      break;
    case ReduceOp::max:
      for (size_t i = 0; i < n; ++i) d[i] = std::max(d[i], s[i]);
      break;
    case ReduceOp::min:
      for (size_t i = 0; i < n; ++i) d[i] = std::min(d[i], s[i]);
      break;
  }
}

// 16-bit floats: widen a block to f32, combine, narrow. Blocks keep the temporaries in L1.
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void combine16(uint16_t* __restrict d, const uint16_t* __restrict s, size_t n, ReduceOp op) {
  constexpr size_t kBlock = 512;
  float a[kBlock], b[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t m = std::min(kBlock, n - base);
    for (size_t i = 0; i < m; ++i) a[i] = Widen(d[base + i]);
    for (size_t i = 0; i < m; ++i) b[i] = Widen(s[base + i]);
    combine<float>(a, b, m, op);
    for (size_t i = 0; i < m; ++i) d[base + i] = Narrow(a[i]);
  }
}

template <typename T>
void divide(T* d, size_t n, int k) {
  if constexpr (std::is_floating_point_v<T>) {
    // Division, not multiplication by 1/k: that can differ in the last bit.
    for (size_t i = 0; i < n; ++i) d[i] = d[i] / T(k);
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = static_cast<T>(d[i] / k);
  }
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void divide16(uint16_t* d, size_t n, int k) {
  for (size_t i = 0; i < n; ++i) d[i] = Narrow(Widen(d[i]) / static_cast<float>(k));
}

}  // namespace

void reduceInto(void* dst, const void* src, size_t count, DType dt, ReduceOp op) {
  switch (dt) {
    case DType::f32: return combine(static_cast<float*>(dst), static_cast<const float*>(src), count, op);
    case DType::f64: return combine(static_cast<double*>(dst), static_cast<const double*>(src), count, op);
    case DType::i32: return combine(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), count, op);
    case DType::i64: return combine(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), count, op);
    case DType::u8: return combine(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), count, op);
    case DType::f16:
      return combine16<halfToFloat, floatToHalf>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src),
                                                 count, op);
    case DType::bf16:
      return combine16<bf16ToFloat, floatToBf16>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src),
                                                 count, op);
  }
}

void divideBy(void* buf, size_t count, DType dt, int n) {
  switch (dt) {
    case DType::f32: return divide(static_cast<float*>(buf), count, n);
    case DType::f64: return divide(static_cast<double*>(buf), count, n);
    case DType::i32: return divide(static_cast<int32_t*>(buf), count, n);
    case DType::i64: return divide(static_cast<int64_t*>(buf), count, n);
    case DType::u8: return divide(static_cast<uint8_t*>(buf), count, n);
    case DType::f16: return divide16<halfToFloat, floatToHalf>(static_cast<uint16_t*>(buf), count, n);
    case DType::bf16: return divide16<bf16ToFloat, floatToBf16>(static_cast<uint16_t*>(buf), count, n);
  }
}

}  // namespace lowcomm::comm
