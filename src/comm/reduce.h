// Reduction kernels over plain buffers (private to the comm layer).
#pragma once

#include <cstddef>

#include "lowcomm/comm/dtype.h"

namespace lowcomm::comm {

// dst[i] = dst[i] (op) src[i]; avg reduces as sum (the caller divides once at the end).
// f16/bf16 are converted to f32, combined, and rounded back.
void reduceInto(void* dst, const void* src, size_t count, DType dt, ReduceOp op);

// buf[i] /= n (integer division for integer types).
void divideBy(void* buf, size_t count, DType dt, int n);

}  // namespace lowcomm::comm
