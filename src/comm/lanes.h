// Dynamic striping of large messages between sites (private to the comm layer).
//
// Static striping (stripe.h) cuts a message into one piece per stream fixed in advance, so the
// message is done when the slowest connection is: on a shared WAN uplink the connections of a pair
// do not get equal shares (measured on the emulated 100 Mbit/s, 50 ms WAN: the 16 connections of a
// node finished a 64 MiB allreduce over a spread of 1.2-2.0 s). Lanes hand the work out as the
// connections drain: a message is cut into chunks of kLaneChunkBytes, and each connection (a lane:
// one sender thread per peer and stream) takes the next chunk when its previous one has left.
//
// Contract, the same on sender and receiver (both compute it from the same inputs):
// - A message travels on lanes iff Link::laned(peer, bytes, slot): it would be striped
//   (Link::stripes) and it belongs to a collective call (its slot's sequence is not Link::kP2PSeq:
//   point-to-point receives may come from any rank, and then only stream 0 is known).
// - Wire format: every chunk is one Gloo message on kLaneSlot of one stream, LaneHeader{slot,
//   offset, bytes, total} then the payload; chunks of one message may use any streams in any order.
// - Receiving: from the first laned message a peer sends, each stream keeps kLaneDepth receives of
//   one chunk posted for that peer (standing receives, as eager.h's), drained by one thread per
//   stream that copies each chunk to its message's buffer (or keeps it until that receive is
//   posted) and posts the receive again. A sender thus waits for a notice only when kLaneDepth
//   chunks of its own on that connection are not yet read.
// - Sending: when a send on a connection completes the lane takes the next chunk. The cross-site
//   sockets have TCP_NOTSENT_LOWAT (kLaneNotSentLowat, set by the communicator), so a send completes
//   when its bytes are nearly on the wire, not when they are in a large socket buffer.
// - A header whose chunk does not fit (bytes > kLaneChunkBytes, offset + bytes > total) or whose
//   total differs from the posted receive's size is the peer's fault: PeerError naming it; nothing
//   is written outside the receive's buffer.
// - Errors in a lane (peer closed, malformed header) are kept and thrown by every later wait on
//   that Lanes; the caller poisons the Link. cancel() guarantees no lane touches the message's
//   buffer afterwards.
// - Traffic meter: the caller records payload bytes, as for any message (headers are not counted).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "abort.h"

namespace gloo {
class Context;
namespace transport {
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace lowcomm::comm {

constexpr uint64_t kLaneSlot = 0x3ffffffeull;  // sequence 0, as kEagerSlot
constexpr size_t kLaneChunkBytes = 64 << 10;
constexpr int kLaneDepth = 12;  // 768 KiB per connection: one 100 Mbit/s x 50 ms window
constexpr int kLaneNotSentLowat = 32 << 10;

struct LaneHeader {
  uint64_t slot;
  uint64_t offset;
  uint64_t bytes;
  uint64_t total;
};

// One laned message. Its fields are guarded by the Lanes' mutex.
struct LaneMessage {
  int peer = -1;
  bool send = false;
  char* ptr = nullptr;
  size_t bytes = 0;
  uint64_t slot = 0;
  size_t done = 0;  // bytes sent (completed) or received (copied)
  bool cancelled = false;
};

class Lanes final : public Abortable {
 public:
  // streams: the Link's connected meshes, stream 0 first (they outlive this object). Registers
  // with `abort` (abort.h; may be null) for its lifetime.
  Lanes(std::vector<gloo::Context*> streams, AbortState* abort);
  ~Lanes();
  Lanes(const Lanes&) = delete;
  Lanes& operator=(const Lanes&) = delete;

  std::shared_ptr<LaneMessage> send(int peer, const void* ptr, size_t bytes, uint64_t slot);
  std::shared_ptr<LaneMessage> recv(int peer, void* ptr, size_t bytes, uint64_t slot);
  // Blocks until m is complete. Throws PeerError when a lane failed, TimeoutError at `deadline`.
  void wait(LaneMessage& m, std::chrono::steady_clock::time_point deadline);
  // After this no lane reads or writes m's buffer.
  void cancel(LaneMessage& m);
  // From any thread: every wait() in flight and later throws (the caller names the abort), and
  // the lane threads leave their waits and end.
  void abort() override;

 private:
  struct Chunk {
    std::shared_ptr<LaneMessage> msg;
    size_t offset, bytes;
  };
  struct Lane {  // one connection to one peer: its sender and receiver threads' state
    std::vector<char> out_mem;
    std::unique_ptr<gloo::transport::UnboundBuffer> out;
    std::vector<std::vector<char>> box_mem;
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> boxes;
    std::thread sender, receiver;
  };
  struct Peer {
    std::deque<Chunk> queue;  // chunks not yet taken by a lane
    std::vector<std::unique_ptr<Lane>> lanes;
    bool sending = false, receiving = false;
    std::map<uint64_t, std::shared_ptr<LaneMessage>> posted;  // receives by slot
    std::map<uint64_t, std::vector<std::pair<LaneHeader, std::vector<char>>>> kept;  // early chunks
  };

  Peer& peer(int p);  // with mu_ held
  std::pair<Peer*, Lane*> laneOf(int p, int j);  // takes mu_: for the lane threads' start
  void startSenders(int p, Peer& q);
  void startReceivers(int p, Peer& q);
  void sendLoop(int p, int j);
  void receiveLoop(int p, int j);
  // Copies one chunk into its receive, or keeps it; with mu_ held. PeerError on a bad header.
  void deliver(int p, Peer& q, const LaneHeader& h, const char* payload);
  void place(int p, LaneMessage& m, const LaneHeader& h, const char* payload);
  void setError(int p, const std::string& why);  // with mu_ held; the first error stays
  void failLanes(int p, const std::string& why);

  std::vector<gloo::Context*> streams_;
  std::mutex mu_;
  std::condition_variable work_cv_;  // chunks queued, or stopping: for the sender threads
  std::condition_variable done_cv_;  // progress or an error: for wait()
  bool stop_ = false;
  std::string error_;
  int error_peer_ = -1;
  std::map<int, Peer> peers_;
  AbortState::Registration registration_;  // last: unregistered before the lanes go
};

}  // namespace lowcomm::comm
