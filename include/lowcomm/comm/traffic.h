// Traffic meter: every payload byte a rank sends and receives through the Communicator,
// keyed by operation, by a caller-supplied phase label and by link class: "intra-node" (the peer
// shares this rank's host key, lowcomm/net/shm.h: same machine and network namespace; shared
// memory always is), "inter-node" (another node of this rank's site, or sites unknown) or
// "inter-site" (the peer declared another site, lowcomm/comm/topology.h). The classes are
// disjoint: their sum is the total. Without site information no byte is "inter-site".
// Thread-safe.
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
  std::map<std::string, TrafficCount> by_link;   // kIntraNode / kInterNode / kInterSite
  std::map<std::string, std::map<std::string, TrafficCount>> by_phase_link;  // phase -> link class
};

inline constexpr const char* kIntraNode = "intra-node";
inline constexpr const char* kInterNode = "inter-node";
inline constexpr const char* kInterSite = "inter-site";

enum class LinkClass : uint8_t { intra_node, inter_node, inter_site };
const char* linkClassName(LinkClass c);  // kIntraNode, kInterNode, kInterSite

class TrafficMeter {
 public:
  void recordSend(const std::string& op, const std::string& phase, uint64_t bytes, LinkClass link);
  void recordRecv(const std::string& op, const std::string& phase, uint64_t bytes, LinkClass link);
  // same_host: the peer is on this rank's node (kIntraNode), else kInterNode.
  void recordSend(const std::string& op, const std::string& phase, uint64_t bytes, bool same_host) {
    recordSend(op, phase, bytes, same_host ? LinkClass::intra_node : LinkClass::inter_node);
  }
  void recordRecv(const std::string& op, const std::string& phase, uint64_t bytes, bool same_host) {
    recordRecv(op, phase, bytes, same_host ? LinkClass::intra_node : LinkClass::inter_node);
  }
  TrafficSnapshot snapshot() const;
  void reset();

 private:
  mutable std::mutex mu_;
  TrafficSnapshot s_;
};

}  // namespace lowcomm::comm
