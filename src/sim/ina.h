// In-network aggregation (PlatformSpec::in_network_aggregation; private to the sim layer),
// SwitchML-like on a star, ATP-like on a fat-tree: switches sum the packets of an allreduce as
// they arrive and send every member the sum of each chunk once all members' copies of it are in.
//
// Model: a rank streams its buffer to its leaf switch in chunks, one after another
// (PlatformSpec::ina_chunk_bytes, coarser for big buffers: at most kInaMaxChunks per call), at
// most ina_window chunks ahead of the sums it has received (the switches' pool of aggregation
// slots). A leaf switch sums its members' copies of a chunk; when the call's members are under
// one leaf it sends the sum down to them, else it sends the partial sum up to spine c mod spines
// (the chunks spread over the leaf's uplinks), which sums the leaves' partial sums and sends the
// total down to each of them, and they to their members. Switches add at line rate (no compute
// time). On a star the switch's fabric carries nodes x link rate, so only the ranks' own links
// limit it; on a fat-tree the chunks cross the fat-tree's own links (sharing them with all other
// traffic): each host link carries the buffer once up and once down, each leaf's uplinks the
// leaf's partial sum once up and the total once down. Packets are never lost; no per-message host
// overhead (kernel-bypass transports). Sent-byte counters count the buffer once per member (a
// node's leader, when the node's ranks summed in its memory first: src/sim/run_call.cpp), as
// inter-node traffic; on a fat-tree a leaf's partial sums count as its members' cross-leaf bytes,
// shared among them. Every call has mailboxes and switch actors of its own.
#pragma once

#include <simgrid/s4u.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "engine.h"
#include "lowcomm/sim/platform.h"

namespace lowcomm::sim {

class SimNetwork;

inline constexpr int kInaMaxChunks = 64;

class InaFabric {
 public:
  InaFabric(SimNetwork& net, InaHosts hosts, const PlatformSpec& p);
  // One rank's part of an allreduce of `bytes` over `members` (root ranks, this one among them).
  // `seq` names the call's group as the exchange's slots do: every member passes the same, and a
  // group's calls follow one another (counted per rank). Returns once the rank holds every
  // chunk's sum.
  void allreduce(int rank, const std::vector<int>& members, uint64_t bytes, uint32_t seq);

 private:
  struct Call;
  std::shared_ptr<Call> prepare(const std::vector<int>& members, uint64_t bytes, uint32_t seq, uint64_t number) const;
  void start(const std::shared_ptr<Call>& call);
  void sumAtLeaf(const std::shared_ptr<Call>& call, int leaf);
  void sumAtSpine(const std::shared_ptr<Call>& call, int spine);
  void sendDown(const std::shared_ptr<Call>& call, int leaf);

  SimNetwork& net_;
  InaHosts hosts_;
  uint64_t chunk_bytes_;
  int window_;
  std::map<std::pair<int, uint32_t>, uint64_t> calls_of_;                   // (rank, seq) -> calls so far
  std::map<std::pair<uint32_t, uint64_t>, std::shared_ptr<Call>> active_;  // (seq, number) -> call
};

}  // namespace lowcomm::sim
