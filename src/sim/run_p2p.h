// One rank's point-to-point calls of a replayed timeline (private to the sim layer): sends,
// receives and exchanges as messages on the simulated network, matched like the communicator
// matches them (per sender, receiver and tag, in posting order).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "lowcomm/sim/replay.h"
#include "sim_exchange.h"

namespace lowcomm::sim {

// A rank's point-to-point state: how many messages it posted per (sender, receiver, tag), which
// numbers a message's slot the same way on both sides, and its posted requests not yet waited.
class P2PRank {
 public:
  explicit P2PRank(int rank) : rank_(rank) {}
  // Runs `c` (CallSpec::p2p()): send, recv and exchange return when all their messages completed;
  // isend and irecv post theirs and return; wait completes the post of the same req (a wait whose
  // post is not in the replayed window returns at once). Throws for a peer out of the world.
  void run(SimNetwork& net, const CallSpec& c);
  // Requests posted and never waited (their messages may never complete).
  size_t pending() const { return pending_.size(); }

 private:
  uint64_t slot(int src, int dst, uint32_t tag);

  int rank_;
  std::map<std::tuple<int, int, uint32_t>, uint32_t> posted_;
  std::map<std::string, std::pair<std::unique_ptr<SimExchange>, int>> pending_;
};

}  // namespace lowcomm::sim
