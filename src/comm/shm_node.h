// A node's memory for the hierarchical allreduce (lowcomm/comm/algorithms.h NodeMemory) in the
// shared-memory segment of the node's ranks (private to comm). Each step records its traffic
// (nodeReduceBytes, nodeBroadcastBytes) on the meter as same-host bytes, one record per step and
// direction that moved bytes.
#pragma once

#include <chrono>
#include <string>

#include "lowcomm/comm/algorithms.h"
#include "lowcomm/comm/traffic.h"
#include "shm_domain.h"

namespace lowcomm::comm {

class ShmNode final : public NodeMemory {
 public:
  ShmNode(ShmDomain& d, TrafficMeter& meter, const std::string& phase, std::chrono::steady_clock::time_point deadline)
      : d_(d), meter_(meter), phase_(phase), deadline_(deadline) {}
  void reduceToLeader(char* buf, size_t count, DType dt, ReduceOp op) override;
  void broadcastFromLeader(char* buf, size_t count, DType dt) override;

 private:
  void record(const NodeBytes& b);
  ShmDomain& d_;
  TrafficMeter& meter_;
  const std::string& phase_;
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace lowcomm::comm
