// Algorithms private to the comm layer; the Exchange-based ones are public
// (lowcomm/comm/algorithms.h).
#pragma once

#include <chrono>
#include <string>

#include "lowcomm/comm/algorithms.h"
#include "lowcomm/comm/traffic.h"

namespace lowcomm::comm {

class ShmDomain;
// The sum of every rank's `buf` through the segment, piece by piece, in rank order; copied back
// into every rank's buf (`all_out`) or into rank 0's only (traffic: nodeReduceBytes).
// allreduce_shm.cpp.
void shmReduce(ShmDomain& d, char* buf, size_t count, DType dt, ReduceOp op, bool all_out,
               std::chrono::steady_clock::time_point deadline);
// Shared-memory allreduce (all ranks on one host) of o.buf; rank-ordered sums. Reads o's buffer
// fields only.
void allreduceShm(ShmDomain& d, const AllreduceOptions& o, TrafficMeter& meter, const std::string& phase,
                  std::chrono::steady_clock::time_point deadline);

}  // namespace lowcomm::comm
