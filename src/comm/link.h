// Point-to-point layer under the collectives (private to the comm layer).
//
// A Link owns the Gloo context (full mesh of TCP pairs), and with several streams further
// contexts over the same ranks (src/comm/stripe.h); a GlooExchange is one collective call's
// traffic over it (the real executor of lowcomm/comm/exchange.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "abort.h"
#include "lowcomm/comm/exchange.h"
#include "lowcomm/comm/traffic.h"

namespace gloo {
class Context;
namespace transport {
class Device;
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace lowcomm::comm {

class EagerInbox;
class Lanes;
struct LaneMessage;

class Link final : public Abortable {
 public:
  Link(std::shared_ptr<gloo::Context> ctx, std::shared_ptr<gloo::transport::Device> dev);
  ~Link();
  int rank() const;
  int size() const;
  gloo::Context& context() { return *ctx_; }
  const std::shared_ptr<gloo::Context>& sharedContext() const { return ctx_; }
  const std::shared_ptr<gloo::transport::Device>& device() const { return dev_; }
  Scratch& scratch() { return scratch_; }
  Scratch& work() { return work_; }  // a second buffer, for ops that must not touch their input
  // Collective call numbers; kP2PSeq is reserved for send/recv.
  uint32_t nextSeq() {
    if (++seq_ == kP2PSeq) seq_ = 1;
    return seq_;
  }
  static constexpr uint32_t kP2PSeq = 0xffffffffu;
  // Set after any failed operation: the mesh state is unknown, later calls fail fast.
  // Also closes every connection, so peers blocked on us fail at once with a PeerError naming
  // this rank instead of waiting for their timeout (and no pair keeps a dead buffer).
  // Thread-safe (abort() poisons from another thread).
  void poison(const std::string& why);
  std::string broken() const;

  // Abort (abort.h): a Link starts with an AbortState of its own; a split's Link shares its
  // parent's (shareAbort, before anything waits on it), so one trigger ends every wait of a
  // communicator and its splits. The Link's own abort() poisons it: connections close, so peers
  // waiting on this rank fail at once.
  AbortState& abortState() { return *abort_; }
  const std::shared_ptr<AbortState>& sharedAbortState() const { return abort_; }
  void shareAbort(std::shared_ptr<AbortState> state);
  void abort() override;
  // Which peers share this rank's host key (set once the communicator has exchanged them; until
  // then every peer counts as another node). Decides the traffic meter's link class.
  void setSameHost(std::vector<bool> same);
  bool sameHost(int peer) const;
  // Which peers declared another site (set with the sites; until then none did). Decides the
  // link class and whether messages to the peer are striped.
  void setCrossSite(std::vector<bool> cross);
  bool crossSite(int peer) const;
  LinkClass linkClass(int peer) const;

  // Streams: stream 0 is context(); addStream appends another connected mesh of the same ranks.
  // Messages of at least `stripe_min` bytes (and at least one byte per stream) to or from a
  // cross-site peer are striped over all streams (lanes.h for collectives, stripe.h otherwise).
  void addStream(std::shared_ptr<gloo::Context> ctx);
  int streams() const { return 1 + static_cast<int>(more_.size()); }
  gloo::Context& stream(int j) { return j == 0 ? *ctx_ : *more_[j - 1]; }
  void setStripeMin(size_t bytes) { stripe_min_ = bytes; }
  bool stripes(int peer, size_t bytes) const;
  // Striped messages of collective calls travel on lanes (lanes.h: chunks handed to the
  // connections as they drain); point-to-point ones keep the fixed pieces of stripe.h.
  bool laned(int peer, size_t bytes, uint64_t slot) const {
    return stripes(peer, bytes) && static_cast<uint32_t>(slot >> 32) != kP2PSeq;
  }
  Lanes& lanes();  // started on first use, over every stream

  // Eager messages (eager.h): standing receives from `peers` on stream 0, for messages of up to
  // max_bytes. eager(peer, bytes) is the rule both sides apply to an isendEager/irecvEager.
  void openInbox(const std::vector<int>& peers, size_t max_bytes);
  bool eager(int peer, size_t bytes) const;
  EagerInbox& inbox() { return *inbox_; }

 private:
  std::vector<bool> same_host_;
  std::vector<bool> cross_site_;
  std::vector<std::shared_ptr<gloo::Context>> more_;  // streams 1 .. k-1
  size_t stripe_min_ = 0;
  std::shared_ptr<gloo::Context> ctx_;
  std::shared_ptr<gloo::transport::Device> dev_;
  std::shared_ptr<AbortState> abort_;  // before the inbox and the lanes: they unregister from it
  uint32_t seq_ = 0;
  mutable std::mutex mu_;  // broken_ and more_ (abort() reads them from another thread)
  std::string broken_;
  Scratch scratch_;
  Scratch work_;
  std::unique_ptr<EagerInbox> inbox_;  // after ctx_: released before the connections close
  std::unique_ptr<Lanes> lanes_;       // its threads stop before anything they use goes
  AbortState::Registration registration_;  // last: unregistered before anything abort() uses goes
};

// Exchange over the Link's Gloo pairs: posts sends/receives on unbound buffers, waits for them
// against the call's deadline, turns Gloo failures into TimeoutError/PeerError naming the peer,
// and records every completed message's bytes in the traffic meter.
// Registered with the Link's AbortState while it lives: an abort wakes its waits (abortWait* on
// every buffer it posted), and a wait woken so, or any later post or wait, throws AbortedError.
class GlooExchange final : public Exchange, public Abortable {
 public:
  // `seq` numbers the call; collectives take link.nextSeq() so all ranks agree on it.
  GlooExchange(Link& link, TrafficMeter& meter, std::string op, std::string phase, std::chrono::milliseconds timeout,
               uint32_t seq);
  ~GlooExchange() override;

  int isend(int peer, const void* ptr, size_t bytes, uint64_t slot) override;
  int irecv(int peer, void* ptr, size_t bytes, uint64_t slot) override;
  int irecvAny(const std::vector<int>& peers, void* ptr, size_t bytes, uint64_t slot) override;
  int isendEager(int peer, const void* ptr, size_t bytes, uint64_t slot) override;
  int irecvEager(int peer, void* ptr, size_t bytes, uint64_t slot) override;
  int peerOf(int req) const override { return reqs_[req].peer; }
  void wait(int req) override;
  void waitAll() override;
  void reduce(void* dst, const void* src, size_t count, DType dt, ReduceOp op) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void abort() override;

 private:
  struct Request {
    std::unique_ptr<gloo::transport::UnboundBuffer> buf;  // the whole message, or piece 0 (stream 0)
    int peer;
    size_t bytes;
    bool send;
    bool done;
    std::vector<int> any;  // irecvAny's candidates (peer is -1 until it completed)
    // A striped message's pieces 1 .. k-1 (stream j), completed in order; `waited` of them are.
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> pieces;
    size_t waited = 0;
    char* ptr = nullptr;   // irecvAny, eager receive: its buffer and slot
    uint64_t slot = 0;
    bool eager = false;       // an eager receive: taken from the Link's inbox by wait()
    std::vector<char> staged;  // an eager send: header and payload, alive until sent
    std::shared_ptr<LaneMessage> lane;  // a message on the Link's lanes
  };
  [[noreturn]] void fail(const Request& r, const std::exception& e);
  std::chrono::milliseconds left() const;
  // Posts pieces 1 .. k-1 of a striped message on streams 1 .. k-1 (stripe.cpp).
  void postPieces(Request& r, char* ptr, uint64_t slot);
  void waitPieces(Request& r);
  // Posts a message on the Link's lanes (lanes.h).
  int postLaned(int peer, void* ptr, size_t bytes, uint64_t slot, bool send);
  // Completes an eager receive from the Link's inbox (eager.cpp).
  void takeEager(Request& r);

  Link& link_;
  TrafficMeter& meter_;
  std::string op_;
  std::string phase_;
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point deadline_;
  // Guards reqs_ and its buffers against abort() from another thread: every change of reqs_
  // (post, clear) holds it, and a post checks the abort flag under it.
  std::mutex mu_;
  std::vector<Request> reqs_;
  AbortState::Registration registration_;  // last: unregistered before reqs_ goes
};

}  // namespace lowcomm::comm
