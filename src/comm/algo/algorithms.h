// Algorithms private to the comm layer; the Exchange-based ones are public
// (lowcomm/comm/algorithms.h).
#pragma once

#include <chrono>
#include <string>

#include "lowcomm/comm/algorithms.h"
#include "lowcomm/comm/traffic.h"

namespace lowcomm::comm {

class ShmDomain;
struct ShmBytes {
  uint64_t sent = 0, got = 0;  // what other ranks read of this rank's memory, what it read of theirs
};
// The sum of every rank's `buf` through the segment, piece by piece, in rank order; copied back
// into every rank's buf (`all_out`) or into rank 0's only. allreduce_shm.cpp.
ShmBytes shmReduce(ShmDomain& d, char* buf, size_t count, DType dt, ReduceOp op, bool all_out,
                   std::chrono::steady_clock::time_point deadline);
// Shared-memory allreduce (all ranks on one host); rank-ordered sums.
void allreduceShm(ShmDomain& d, char* buf, size_t count, DType dt, ReduceOp op, TrafficMeter& meter,
                  const std::string& phase, std::chrono::steady_clock::time_point deadline);
// Two-level allreduce whose node part runs in `node` (the shared memory of this rank's group of
// `group_size` contiguous ranks, group rank = local rank): only group leaders use `ex`, for a
// ring over the leaders (subs 2..3). allreduce_hierarchical_shm.cpp.
void allreduceHierarchicalShm(Exchange& ex, const Group& g, int group_size, ShmDomain& node, char* buf,
                              size_t count, DType dt, ReduceOp op, size_t seg_bytes, Scratch& scratch,
                              TrafficMeter& meter, const std::string& phase,
                              std::chrono::steady_clock::time_point deadline);

}  // namespace lowcomm::comm
