// Algorithms private to the comm layer; the Exchange-based ones are public
// (lowcomm/comm/algorithms.h).
#pragma once

#include <chrono>
#include <string>

#include "lowcomm/comm/algorithms.h"
#include "lowcomm/comm/traffic.h"

namespace lowcomm::comm {

class ShmDomain;
// Shared-memory allreduce (all ranks on one host); rank-ordered sums.
void allreduceShm(ShmDomain& d, char* buf, size_t count, DType dt, ReduceOp op, TrafficMeter& meter,
                  const std::string& phase, std::chrono::steady_clock::time_point deadline);

}  // namespace lowcomm::comm
