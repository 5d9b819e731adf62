// Traffic meter: every payload byte a rank sends and receives through the Communicator,
// keyed by operation and by a caller-supplied phase label. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace lowcomm::comm {

struct TrafficCount {
  uint64_t bytes_sent = 0;
  uint64_t bytes_recv = 0;
  uint64_t messages_sent = 0;
  uint64_t messages_recv = 0;
  TrafficCount& operator+=(const TrafficCount& o);
};

struct TrafficSnapshot {
  TrafficCount total;
  std::map<std::string, TrafficCount> by_op;     // "allreduce", "allgather", ...
  std::map<std::string, TrafficCount> by_phase;  // caller labels; "" when none was set
};

class TrafficMeter {
 public:
  void recordSend(const std::string& op, const std::string& phase, uint64_t bytes);
  void recordRecv(const std::string& op, const std::string& phase, uint64_t bytes);
  TrafficSnapshot snapshot() const;
  void reset();

 private:
  mutable std::mutex mu_;
  TrafficSnapshot s_;
};

}  // namespace lowcomm::comm
