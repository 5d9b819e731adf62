// Communicator point-to-point calls (lowcomm/comm/communicator.h): send, recv, exchange,
// recvAny and posted requests, each a timeline event of category "p2p" when traced.
#include <memory>
#include <string>
#include <vector>

#include "call_record.h"
#include "link.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/communicator.h"

namespace lowcomm::comm {

namespace {

// A rank of this communicator as a rank of the root one (the timeline names root ranks).
int rootOf(const std::vector<int>& world_ranks, int r) { return world_ranks.empty() ? r : world_ranks[r]; }

// A point-to-point call's peers and sizes on its timeline event: "peer:bytes,peer:bytes".
std::string peersArg(const std::vector<int>& world_ranks, const std::vector<Communicator::P2P>& msgs) {
  std::string out;
  for (const auto& m : msgs)
    out += (out.empty() ? "" : ",") + std::to_string(rootOf(world_ranks, m.peer)) + ":" + std::to_string(m.bytes);
  return out;
}

// Called only when `rec` records (the lists cost an allocation). `comm`: the communicator's
// store prefix, which tells a split's messages from its parent's between the same two ranks.
void p2pArgs(CallRecord& rec, const std::vector<int>& world_ranks, const std::vector<Communicator::P2P>& sends,
             const std::vector<Communicator::P2P>& recvs, uint32_t tag, const std::string& comm) {
  rec.args["sends"] = peersArg(world_ranks, sends);
  rec.args["recvs"] = peersArg(world_ranks, recvs);
  rec.args["tag"] = std::to_string(tag);
  rec.args["comm"] = comm;
}

}  // namespace

void Communicator::send(const void* buf, size_t bytes, int dst, uint32_t tag) {
  if (dst < 0 || dst >= size_ || dst == rank_)
    throw ConfigError("send: destination rank " + std::to_string(dst) + " is not another rank of this communicator");
  CallRecord rec(trace_, "send", bytes, DType::u8, {}, "p2p");
  if (rec.on()) p2pArgs(rec, world_ranks_, {{dst, const_cast<void*>(buf), bytes}}, {}, tag, prefix_);
  GlooExchange ex(*link_, *meter_, "send", phase_, opts_.timeout, Link::kP2PSeq);
  ex.wait(ex.isend(dst, buf, bytes, (static_cast<uint64_t>(Link::kP2PSeq) << 32) | tag));
}

void Communicator::recv(void* buf, size_t bytes, int src, uint32_t tag) {
  if (src < 0 || src >= size_ || src == rank_)
    throw ConfigError("recv: source rank " + std::to_string(src) + " is not another rank of this communicator");
  CallRecord rec(trace_, "recv", bytes, DType::u8, {}, "p2p");
  if (rec.on()) p2pArgs(rec, world_ranks_, {}, {{src, buf, bytes}}, tag, prefix_);
  GlooExchange ex(*link_, *meter_, "recv", phase_, opts_.timeout, Link::kP2PSeq);
  ex.wait(ex.irecv(src, buf, bytes, (static_cast<uint64_t>(Link::kP2PSeq) << 32) | tag));
}

struct Communicator::Request::Impl {
  std::unique_ptr<GlooExchange> ex;
  int id = -1;
  int peer = -1;
  bool done = false;
  Trace* trace = nullptr;  // records the wait as a "wait" event naming `req` (its post's id)
  std::string req;
};

Communicator::Request::Request(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::Request::~Request() = default;

void Communicator::Request::wait() {
  if (impl_->done) return;
  CallRecord rec(impl_->trace, "wait", 0, DType::u8, {}, "p2p");
  if (rec.on()) rec.args["req"] = impl_->req;
  impl_->ex->wait(impl_->id);
  impl_->done = true;
}

bool Communicator::Request::done() const { return impl_->done; }
int Communicator::Request::peer() const { return impl_->peer; }

namespace {

// Posts one message on an exchange of its own (the request owns it until waited).
std::unique_ptr<Communicator::Request::Impl> postP2P(Link& link, TrafficMeter& meter, const std::string& phase,
                                                     std::chrono::milliseconds timeout, bool send, void* buf,
                                                     size_t bytes, int peer, uint32_t tag) {
  auto impl = std::make_unique<Communicator::Request::Impl>();
  impl->ex = std::make_unique<GlooExchange>(link, meter, send ? "send" : "recv", phase, timeout, Link::kP2PSeq);
  const uint64_t slot = (static_cast<uint64_t>(Link::kP2PSeq) << 32) | tag;
  impl->id = send ? impl->ex->isend(peer, buf, bytes, slot) : impl->ex->irecv(peer, buf, bytes, slot);
  impl->peer = peer;
  return impl;
}

// A posted request's id on its "isend"/"irecv" event and, later, on its "wait" event.
void traceRequest(CallRecord& rec, Communicator::Request::Impl& impl, Trace* trace, std::string req) {
  impl.trace = trace;
  impl.req = std::move(req);
  rec.args["req"] = impl.req;
}

}  // namespace

std::unique_ptr<Communicator::Request> Communicator::isend(const void* buf, size_t bytes, int dst, uint32_t tag) {
  if (dst < 0 || dst >= size_ || dst == rank_)
    throw ConfigError("isend: destination rank " + std::to_string(dst) + " is not another rank of this communicator");
  CallRecord rec(trace_, "isend", bytes, DType::u8, {}, "p2p");
  if (rec.on()) p2pArgs(rec, world_ranks_, {{dst, const_cast<void*>(buf), bytes}}, {}, tag, prefix_);
  auto impl = postP2P(*link_, *meter_, phase_, opts_.timeout, true, const_cast<void*>(buf), bytes, dst, tag);
  if (rec.on()) traceRequest(rec, *impl, trace_, prefix_ + "#" + std::to_string(p2p_requests_++));
  return std::make_unique<Request>(std::move(impl));
}

std::unique_ptr<Communicator::Request> Communicator::irecv(void* buf, size_t bytes, int src, uint32_t tag) {
  if (src < 0 || src >= size_ || src == rank_)
    throw ConfigError("irecv: source rank " + std::to_string(src) + " is not another rank of this communicator");
  CallRecord rec(trace_, "irecv", bytes, DType::u8, {}, "p2p");
  if (rec.on()) p2pArgs(rec, world_ranks_, {}, {{src, buf, bytes}}, tag, prefix_);
  auto impl = postP2P(*link_, *meter_, phase_, opts_.timeout, false, buf, bytes, src, tag);
  if (rec.on()) traceRequest(rec, *impl, trace_, prefix_ + "#" + std::to_string(p2p_requests_++));
  return std::make_unique<Request>(std::move(impl));
}

void Communicator::exchange(const std::vector<P2P>& sends, const std::vector<P2P>& recvs, uint32_t tag) {
  auto check = [&](const std::vector<P2P>& msgs, const char* what) {
    std::vector<bool> seen(size_, false);
    for (const auto& m : msgs) {
      if (m.peer < 0 || m.peer >= size_ || m.peer == rank_)
        throw ConfigError(std::string("exchange: ") + what + " rank " + std::to_string(m.peer) +
                          " is not another rank of this communicator");
      if (seen[m.peer])
        throw ConfigError(std::string("exchange: two ") + what + " messages with rank " + std::to_string(m.peer) +
                          " in one call");
      seen[m.peer] = true;
    }
  };
  check(sends, "send to");
  check(recvs, "receive from");
  size_t total = 0;
  for (const auto& m : sends) total += m.bytes;
  CallRecord rec(trace_, "exchange", total, DType::u8, {}, "p2p");
  if (rec.on()) p2pArgs(rec, world_ranks_, sends, recvs, tag, prefix_);
  GlooExchange ex(*link_, *meter_, "exchange", phase_, opts_.timeout, Link::kP2PSeq);
  const uint64_t slot = (static_cast<uint64_t>(Link::kP2PSeq) << 32) | tag;
  for (const auto& m : recvs) ex.irecv(m.peer, m.buf, m.bytes, slot);
  for (const auto& m : sends) ex.isend(m.peer, m.buf, m.bytes, slot);
  ex.waitAll();
}

int Communicator::recvAny(void* buf, size_t bytes, const std::vector<int>& srcs, uint32_t tag) {
  if (srcs.empty()) throw ConfigError("recvAny: no source rank given");
  for (int s : srcs)
    if (s < 0 || s >= size_ || s == rank_)
      throw ConfigError("recvAny: source rank " + std::to_string(s) + " is not another rank of this communicator");
  CallRecord rec(trace_, "recv_any", bytes, DType::u8, {}, "p2p");  // on the timeline, not replayable
  GlooExchange ex(*link_, *meter_, "recv", phase_, opts_.timeout, Link::kP2PSeq);
  const int req = ex.irecvAny(srcs, buf, bytes, (static_cast<uint64_t>(Link::kP2PSeq) << 32) | tag);
  ex.wait(req);
  return ex.peerOf(req);
}

}  // namespace lowcomm::comm
