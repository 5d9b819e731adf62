// Typed test data: small integers, exact in every dtype (|sum| <= 16 for up to 8 ranks), so a
// reference computed in double is exact and the comparison can demand equality.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "lowcomm/comm/dtype.h"

namespace lowcomm::test {

inline double valueOf(int rank, size_t i, comm::DType dt) {
  if (dt == comm::DType::u8) return static_cast<double>((i * 7 + rank * 3) % 3);
  return static_cast<double>(static_cast<int>((i * 7 + rank * 3) % 5) - 2);
}

inline void store(comm::DType dt, void* base, size_t i, double v) { comm::storeValue(dt, base, i, v); }
inline double load(comm::DType dt, const void* base, size_t i) { return comm::loadValue(dt, base, i); }

// What the dtype holds after dividing an exact sum by n (the same rounding the library does).
inline double averaged(comm::DType dt, double sum, int n) {
  using comm::DType;
  switch (dt) {
    case DType::f32: return static_cast<float>(sum) / static_cast<float>(n);
    case DType::f64: return sum / n;
    case DType::f16: return comm::halfToFloat(comm::floatToHalf(static_cast<float>(sum) / static_cast<float>(n)));
    case DType::bf16: return comm::bf16ToFloat(comm::floatToBf16(static_cast<float>(sum) / static_cast<float>(n)));
    case DType::i32: case DType::i64: return static_cast<double>(static_cast<int64_t>(sum) / n);
    case DType::u8: return static_cast<double>(static_cast<uint8_t>(static_cast<int>(sum) / n));
  }
  return 0;
}

inline std::vector<char> filled(int rank, size_t count, comm::DType dt) {
  std::vector<char> b(count * comm::dtypeSize(dt) + 1);
  for (size_t i = 0; i < count; ++i) store(dt, b.data(), i, valueOf(rank, i, dt));
  return b;
}

inline const comm::DType kAllTypes[] = {comm::DType::f32, comm::DType::f64, comm::DType::f16, comm::DType::bf16,
                                        comm::DType::i32, comm::DType::i64, comm::DType::u8};

// What an allreduce of valueOf(r, i, dt) over ranks 0..n-1 gives at element i.
inline double expectedReduce(int n, size_t i, comm::DType dt, comm::ReduceOp op) {
  double sum = 0, mx = -1e300, mn = 1e300;
  for (int r = 0; r < n; ++r) {
    const double v = valueOf(r, i, dt);
    sum += v;
    mx = v > mx ? v : mx;
    mn = v < mn ? v : mn;
  }
  switch (op) {
    case comm::ReduceOp::sum: return sum;
    case comm::ReduceOp::avg: return averaged(dt, sum, n);
    case comm::ReduceOp::max: return mx;
    case comm::ReduceOp::min: return mn;
  }
  return 0;
}

}  // namespace lowcomm::test
