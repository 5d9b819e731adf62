// One rank's point-to-point calls of a replayed timeline (private to the sim layer): sends,
// receives and exchanges as messages on the simulated network, matched like the communicator
// matches them (per communicator, sender, receiver and tag, in posting order).
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

// What every rank of one replay shares: the slot namespace (mailbox) of each (communicator, tag)
// in use, in the order they first appear. At most 16 (the namespaces no collective uses).
class P2PChannels {
 public:
  uint32_t subOf(const std::string& comm, uint32_t tag);

 private:
  std::map<std::pair<std::string, uint32_t>, uint32_t> subs_;
};

// A rank's point-to-point state: how many messages it posted per (communicator, sender, receiver,
// tag), which numbers a message's slot the same way on both sides, and its posted requests not
// yet waited.
class P2PRank {
 public:
  explicit P2PRank(int rank) : rank_(rank) {}
  // Runs `c` (CallSpec::p2p()): send, recv and exchange return when all their messages completed;
  // isend and irecv post theirs and return; wait completes the post of the same req (a wait whose
  // post is not in the replayed window returns at once). Throws for a peer out of the world, a
  // request id posted twice, or more (communicator, tag) pairs than there are namespaces.
  void run(SimNetwork& net, P2PChannels& channels, const CallSpec& c);
  // Requests posted and never waited (their messages may never complete).
  size_t pending() const { return pending_.size(); }

 private:
  uint64_t slot(uint32_t sub, int src, int dst);

  int rank_;
  std::map<std::tuple<uint32_t, int, int>, uint32_t> posted_;  // (sub, src, dst) -> messages so far
  std::map<std::string, std::pair<std::unique_ptr<SimExchange>, int>> pending_;
};

}  // namespace lowcomm::sim
