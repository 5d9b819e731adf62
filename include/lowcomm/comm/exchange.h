// The point-to-point interface every collective algorithm is written against: one description of
// each algorithm (include/lowcomm/comm/algorithms.h), two executors. The communicator runs it over
// Gloo's TCP pairs (src/comm/link.h: GlooExchange); the simulator runs the same code on SimGrid
// actors (src/sim), where messages are flows on a simulated network and reductions cost time
// instead of touching data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "lowcomm/comm/dtype.h"

namespace lowcomm::comm {

// Members of a collective as global ranks; `me` is this rank's index in `ranks`.
struct Group {
  std::vector<int> ranks;
  int me = 0;
  int size() const { return static_cast<int>(ranks.size()); }
  int peer(int i) const { return ranks[((i % size()) + size()) % size()]; }
  static Group world(int rank, int size);
  static Group range(int first, int count, int me_global);  // contiguous ranks
};

// Grow-only scratch memory reused across calls (not zeroed).
class Scratch {
 public:
  char* get(size_t bytes) {
    if (bytes > size_) {
      data_.reset(new char[bytes]);
      size_ = bytes;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<char[]> data_;
  size_t size_ = 0;
};

// Slot layout: | seq:32 | sub:6 | step:12 | seg:14 |. Sender and receiver compute the same
// slot for the same message; distinct messages of one call never share a slot. 12 step bits let
// a ring span 4096 ranks (steps 0 .. n - 2); 14 segment bits are 16384 segments of a chunk
// (segmentElems grows the segment beyond that).
inline uint64_t makeSlot(uint32_t seq, uint32_t sub, uint32_t step, uint32_t seg) {
  return (static_cast<uint64_t>(seq) << 32) | (static_cast<uint64_t>(sub & 0x3f) << 26) |
         (static_cast<uint64_t>(step & 0xfff) << 14) | (seg & 0x3fff);
}
constexpr uint32_t kMaxSegments = 1u << 14;
constexpr uint32_t kMaxSteps = 1u << 12;
constexpr int kMaxRanks = static_cast<int>(kMaxSteps);  // a communicator's largest size

// One collective call's messages. Contract for executors:
// - A message is matched by (sender, receiver, slot); zero-byte messages are never sent (both
//   sides skip them by computing the same sizes) and return request -1 (wait(-1) is a no-op).
// - Requests complete in any order; wait() blocks until that one has, waitAll() until all have.
// - Failures throw TimeoutError / PeerError naming the peer (real executor).
// - reduce() and copy() are the algorithm's local work on its buffers, so an executor may run
//   them (real data) or only account for their time (simulation, where buffers hold no data).
class Exchange {
 public:
  explicit Exchange(uint32_t seq) : seq_(seq) {}
  virtual ~Exchange() = default;
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  uint32_t seq() const { return seq_; }
  uint64_t slot(uint32_t sub, uint32_t step, uint32_t seg = 0) const { return makeSlot(seq_, sub, step, seg); }

  virtual int isend(int peer, const void* ptr, size_t bytes, uint64_t slot) = 0;
  virtual int irecv(int peer, void* ptr, size_t bytes, uint64_t slot) = 0;
  // Latency-bound messages between sites: an executor may deliver them without the receiver's
  // ready notice (the real one, for messages up to CommOptions::eager_max_bytes to the ranks of
  // the other sites at the same index inside their site: src/comm/eager.h). A message sent with
  // isendEager must be received with irecvEager and the other way round; otherwise (other peers,
  // larger messages, executors without it) they are isend/irecv.
  virtual int isendEager(int peer, const void* ptr, size_t bytes, uint64_t slot) { return isend(peer, ptr, bytes, slot); }
  virtual int irecvEager(int peer, void* ptr, size_t bytes, uint64_t slot) { return irecv(peer, ptr, bytes, slot); }
  // From whichever of `peers` sends first; wait() then sets peerOf(req).
  virtual int irecvAny(const std::vector<int>& peers, void* ptr, size_t bytes, uint64_t slot) = 0;
  virtual int peerOf(int req) const = 0;
  virtual void wait(int req) = 0;
  virtual void waitAll() = 0;

  // dst[i] = dst[i] (op) src[i] over `count` elements (avg sums; the caller divides once).
  virtual void reduce(void* dst, const void* src, size_t count, DType dt, ReduceOp op) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;

 private:
  uint32_t seq_;
};

}  // namespace lowcomm::comm
