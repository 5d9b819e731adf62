// In-network aggregation on the simulated star (PlatformSpec::in_network_aggregation; private to
// the sim layer), SwitchML-like: the switch sums the packets of an allreduce as they arrive and
// sends every member the sum of each chunk once all members' copies of it are in.
//
// Model: a rank streams its buffer to the switch in chunks, one after another
// (PlatformSpec::ina_chunk_bytes, coarser for big buffers: at most kInaMaxChunks per call), at
// most ina_window chunks ahead of the sums it has received (the switch's pool of aggregation
// slots); the switch adds at line rate
// (no compute time) and its fabric carries nodes x link rate, so only the ranks' own links
// limit it: each link carries the buffer once up and once down, at the same time. Packets are
// never lost; no per-message host overhead (kernel-bypass transports). Sent-byte counters count
// the buffer once per rank, as inter-node traffic.
#pragma once

#include <simgrid/s4u.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "lowcomm/sim/platform.h"

namespace lowcomm::sim {

class SimNetwork;

inline constexpr int kInaMaxChunks = 64;

class InaFabric {
 public:
  InaFabric(SimNetwork& net, simgrid::s4u::Host* switch_host, const PlatformSpec& p);
  // One rank's part of an allreduce of `bytes` over `members` (root ranks, this one among them).
  // `seq` names the call's group and number as the exchange's slots do: every member passes the
  // same, and a group's calls follow one another. Returns once the rank holds every chunk's sum.
  void allreduce(int rank, const std::vector<int>& members, uint64_t bytes, uint32_t seq);

 private:
  struct Call;
  std::shared_ptr<Call> prepare(const std::vector<int>& members, uint64_t bytes, uint32_t seq, uint64_t number) const;
  void serve(const std::shared_ptr<Call>& call);

  SimNetwork& net_;
  simgrid::s4u::Host* switch_;
  uint64_t chunk_bytes_;
  int window_;
  std::map<std::pair<int, uint32_t>, uint64_t> calls_of_;                   // (rank, seq) -> calls so far
  std::map<std::pair<uint32_t, uint64_t>, std::shared_ptr<Call>> active_;  // (seq, number) -> call
};

}  // namespace lowcomm::sim
