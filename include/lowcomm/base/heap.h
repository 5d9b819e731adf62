// The process heap's in-use bytes, for activation-memory measurements.
//
// Contract: glibc's mallinfo2 in-use arena bytes plus mmap'd blocks (large tensors are mmap'd), for
// the whole process. A measurement is the growth between two calls on one thread while nothing else
// allocates much (LibTorch's intra-op threads allocate from the same heap and are counted).
#pragma once

#include <cstdint>

namespace lowcomm {

int64_t heapInUseBytes();

}  // namespace lowcomm
