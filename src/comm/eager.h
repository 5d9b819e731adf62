// Eager messages between sites (private to the comm layer).
//
// Gloo moves an unbound buffer only once the receiver's notice of its posted receive has reached
// the sender, so a message whose receive is posted when its send is takes a round trip (notice,
// then data) where the data alone takes half of one: across a 50 ms WAN a small collective pays
// 25 ms more per exchange than the path needs. An EagerInbox keeps `depth` receives per peer
// posted before any call needs them, on a slot of their own (kEagerSlot), so the peer's notices
// are already there when a send starts and the data leaves at once.
//
// Contract, the same on sender and receiver (both compute it from the same inputs):
// - A message travels eagerly iff the algorithm asked for it on both sides (Exchange::isendEager
//   and irecvEager) and Link::eager(peer, bytes): the peer is one of the inbox's peers and
//   0 < bytes <= maxBytes(). The communicator gives each rank as peers the ranks of the other
//   sites at its own index inside the site (a symmetric relation: the sites allreduce's partners).
// - Wire format: one Gloo message on kEagerSlot of stream 0 holding Header{slot, bytes}, then the
//   payload. Payload bytes are what the traffic meter records, as for any message.
// - Each peer's standing receives fill in arrival order (Gloo matches one slot FIFO per pair).
//   take() returns the message for the awaited slot; one that arrived for another slot (a later
//   call's, or one this call awaits later) is kept in memory until it is taken. A standing receive
//   is posted again as soon as its message has been read, so a sender waits for a notice only when
//   `depth` of its messages to this rank are not yet read.
// - A header naming a size other than the awaited one or above maxBytes() is the peer's fault:
//   PeerError naming it (nothing is written to the destination).
// - One thread at a time (the communicator's rule).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "abort.h"

namespace gloo {
class Context;
namespace transport {
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace lowcomm::comm {

// Collective calls number their slots from sequence 1 (Link::nextSeq), so sequence 0 is free.
constexpr uint64_t kEagerSlot = 0x3fffffffull;
constexpr int kEagerDepth = 4;

struct EagerHeader {
  uint64_t slot;
  uint64_t bytes;
};

class EagerInbox final : public Abortable {
 public:
  // Posts `depth` receives of up to max_bytes payload from each of `peers` on ctx (stream 0).
  // Registers with `abort` (abort.h; may be null) for its lifetime.
  EagerInbox(gloo::Context& ctx, const std::vector<int>& peers, size_t max_bytes, int depth, AbortState* abort);
  ~EagerInbox();
  EagerInbox(const EagerInbox&) = delete;
  EagerInbox& operator=(const EagerInbox&) = delete;

  size_t maxBytes() const { return max_bytes_; }
  bool hasPeer(int peer) const { return peers_.count(peer) > 0; }
  // Blocks until `peer`'s message for `slot` has arrived (or was kept) and copies its `bytes`
  // into dst. Gloo's exceptions (timeout at `deadline`, closed connection) pass through for the
  // caller to name; a malformed message throws PeerError.
  void take(int peer, uint64_t slot, void* dst, size_t bytes, std::chrono::steady_clock::time_point deadline);
  // Wakes a take() in flight (its wait returns as aborted) from any thread.
  void abort() override;

 private:
  struct Box {
    std::vector<char> mem;
    std::unique_ptr<gloo::transport::UnboundBuffer> buf;
  };
  struct From {
    std::vector<Box> ring;
    size_t head = 0;
    std::map<uint64_t, std::deque<std::vector<char>>> kept;  // by slot, in arrival order
  };
  // Reads the next message from `peer` into its slot's queue and posts that receive again.
  void readNext(int peer, From& f, std::chrono::steady_clock::time_point deadline);

  size_t max_bytes_;
  std::map<int, From> peers_;
  AbortState::Registration registration_;  // last: unregistered before the boxes go
};

}  // namespace lowcomm::comm
