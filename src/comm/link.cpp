#include "link.h"

#include <cstring>

#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "lowcomm/base/error.h"
#include "eager.h"
#include "lanes.h"
#include "reduce.h"
#include "stripe.h"

namespace lowcomm::comm {

Link::Link(std::shared_ptr<gloo::Context> ctx, std::shared_ptr<gloo::transport::Device> dev)
    : ctx_(std::move(ctx)), dev_(std::move(dev)), abort_(std::make_shared<AbortState>()),
      registration_(abort_.get(), this) {}
Link::~Link() { registration_ = {}; }
int Link::rank() const { return ctx_->rank; }

void Link::poison(const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!broken_.empty()) return;
  broken_ = why;
  ctx_->closeConnections();
  for (auto& c : more_) c->closeConnections();
}
std::string Link::broken() const {
  std::lock_guard<std::mutex> lk(mu_);
  return broken_;
}

void Link::shareAbort(std::shared_ptr<AbortState> state) {
  registration_ = {};
  abort_ = std::move(state);
  registration_ = AbortState::Registration(abort_.get(), this);
}
// Gloo's closeConnections does not wake this process's own waits (measured: a waitRecv posted
// before it waits out its timeout); the exchanges' and lanes' own abort() do that.
void Link::abort() { poison("aborted: " + abort_->why()); }
int Link::size() const { return ctx_->size; }

void Link::setSameHost(std::vector<bool> same) { same_host_ = std::move(same); }
bool Link::sameHost(int peer) const {
  return peer >= 0 && static_cast<size_t>(peer) < same_host_.size() && same_host_[peer];
}

void Link::setCrossSite(std::vector<bool> cross) { cross_site_ = std::move(cross); }
bool Link::crossSite(int peer) const {
  return peer >= 0 && static_cast<size_t>(peer) < cross_site_.size() && cross_site_[peer];
}
LinkClass Link::linkClass(int peer) const {
  if (crossSite(peer)) return LinkClass::inter_site;
  return sameHost(peer) ? LinkClass::intra_node : LinkClass::inter_node;
}

void Link::addStream(std::shared_ptr<gloo::Context> ctx) {
  std::lock_guard<std::mutex> lk(mu_);
  more_.push_back(std::move(ctx));
}
Lanes& Link::lanes() {
  if (!lanes_) {
    std::vector<gloo::Context*> all{ctx_.get()};
    for (auto& c : more_) all.push_back(c.get());
    lanes_ = std::make_unique<Lanes>(std::move(all), abort_.get());
  }
  return *lanes_;
}
bool Link::stripes(int peer, size_t bytes) const {
  return !more_.empty() && bytes >= stripe_min_ && bytes >= static_cast<size_t>(streams()) && crossSite(peer);
}

GlooExchange::GlooExchange(Link& link, TrafficMeter& meter, std::string op, std::string phase,
                           std::chrono::milliseconds timeout, uint32_t seq)
    : Exchange(seq), link_(link), meter_(meter), op_(std::move(op)), phase_(std::move(phase)), timeout_(timeout),
      deadline_(std::chrono::steady_clock::now() + timeout), registration_(&link.abortState(), this) {
  link_.abortState().check(op_);
  const std::string broken = link_.broken();
  if (!broken.empty()) throw PeerError(-1, op_ + ": communicator is unusable after an earlier failure: " + broken);
}

void GlooExchange::abort() {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& r : reqs_) {
    if (!r.buf) continue;
    if (r.send) r.buf->abortWaitSend();
    else r.buf->abortWaitRecv();
    for (auto& piece : r.pieces) {
      if (r.send) piece->abortWaitSend();
      else piece->abortWaitRecv();
    }
  }
}

GlooExchange::~GlooExchange() {
  registration_ = {};  // no abort() from here on: the buffers below go
  // Unwinding with messages in flight: the mesh state is unknown. Close it (peers fail fast),
  // then release the buffers Gloo may still reference.
  bool pending = false;
  for (const auto& r : reqs_) {
    pending = pending || (!r.done && (r.buf || r.lane));
    if (!r.done && r.lane) link_.lanes().cancel(*r.lane);
  }
  if (pending) link_.poison(op_ + " was interrupted with messages in flight");
  for (auto& r : reqs_) {
    if (r.done || !r.buf) continue;
    if (r.send) r.buf->abortWaitSend();
    else r.buf->abortWaitRecv();
    for (size_t j = r.waited; j < r.pieces.size(); ++j) {
      if (r.send) r.pieces[j]->abortWaitSend();
      else r.pieces[j]->abortWaitRecv();
    }
  }
}

int GlooExchange::isend(int peer, const void* ptr, size_t bytes, uint64_t slot) {
  if (bytes == 0) return -1;
  if (link_.laned(peer, bytes, slot)) return postLaned(peer, const_cast<void*>(ptr), bytes, slot, true);
  std::lock_guard<std::mutex> lk(mu_);
  link_.abortState().check(op_);
  const bool striped = link_.stripes(peer, bytes);
  char* p = static_cast<char*>(const_cast<void*>(ptr));
  auto buf = link_.context().createUnboundBuffer(p, striped ? stripePiece(bytes, link_.streams(), 0).bytes : bytes);
  try {
    buf->send(peer, slot);
  } catch (const std::exception& e) {
    Request r{nullptr, peer, bytes, true, true, {}, {}, 0, nullptr, 0, false, {}, {}};
    fail(r, e);
  }
  reqs_.push_back(Request{std::move(buf), peer, bytes, true, false, {}, {}, 0, nullptr, 0, false, {}, {}});
  if (striped) postPieces(reqs_.back(), p, slot);
  return static_cast<int>(reqs_.size() - 1);
}

int GlooExchange::irecv(int peer, void* ptr, size_t bytes, uint64_t slot) {
  if (bytes == 0) return -1;
  if (link_.laned(peer, bytes, slot)) return postLaned(peer, ptr, bytes, slot, false);
  std::lock_guard<std::mutex> lk(mu_);
  link_.abortState().check(op_);
  const bool striped = link_.stripes(peer, bytes);
  auto buf = link_.context().createUnboundBuffer(ptr, striped ? stripePiece(bytes, link_.streams(), 0).bytes : bytes);
  try {
    buf->recv(peer, slot);
  } catch (const std::exception& e) {
    Request r{nullptr, peer, bytes, false, true, {}, {}, 0, nullptr, 0, false, {}, {}};
    fail(r, e);
  }
  reqs_.push_back(Request{std::move(buf), peer, bytes, false, false, {}, {}, 0, nullptr, 0, false, {}, {}});
  if (striped) postPieces(reqs_.back(), static_cast<char*>(ptr), slot);
  return static_cast<int>(reqs_.size() - 1);
}

// The whole buffer is posted on stream 0: a candidate that stripes sends only piece 0 there
// (Gloo takes a shorter message into a larger receive), and wait() posts the other pieces from
// that peer once it is known.
int GlooExchange::irecvAny(const std::vector<int>& peers, void* ptr, size_t bytes, uint64_t slot) {
  std::lock_guard<std::mutex> lk(mu_);
  link_.abortState().check(op_);
  auto buf = link_.context().createUnboundBuffer(ptr, bytes);
  try {
    buf->recv(peers, slot);
  } catch (const std::exception& e) {
    Request r{nullptr, -1, bytes, false, true, peers, {}, 0, nullptr, 0, false, {}, {}};
    fail(r, e);
  }
  reqs_.push_back(Request{std::move(buf), -1, bytes, false, false, peers, {}, 0, static_cast<char*>(ptr), slot, false, {}, {}});
  return static_cast<int>(reqs_.size() - 1);
}

// The Lanes abort themselves (they register on creation, outside mu_: registering takes the
// AbortState's lock, which trigger() holds while it takes mu_).
int GlooExchange::postLaned(int peer, void* ptr, size_t bytes, uint64_t slot, bool send) {
  Lanes& lanes = link_.lanes();
  link_.abortState().check(op_);
  Request r{};
  r.peer = peer, r.bytes = bytes, r.send = send, r.slot = slot;
  try {
    r.lane = send ? lanes.send(peer, ptr, bytes, slot) : lanes.recv(peer, ptr, bytes, slot);
  } catch (const std::exception& e) {
    r.done = true;
    fail(r, e);
  }
  std::lock_guard<std::mutex> lk(mu_);
  reqs_.push_back(std::move(r));
  return static_cast<int>(reqs_.size() - 1);
}

namespace {

std::string peerName(int peer, const std::vector<int>& any) {
  if (any.empty()) return "rank " + std::to_string(peer);
  std::string out = "any of ranks ";
  for (size_t i = 0; i < any.size(); ++i) out += (i ? ", " : "") + std::to_string(any[i]);
  return out;
}

}  // namespace

void GlooExchange::fail(const Request& r, const std::exception& e) {
  if (link_.abortState().aborted()) {  // a woken wait, or a peer that closed because it aborted too
    link_.poison("aborted: " + link_.abortState().why());
    link_.abortState().raise(op_ + " (rank " + std::to_string(link_.rank()) + ")");
  }
  const std::string what = e.what();
  const bool timed_out = what.find("imed out") != std::string::npos || what.find("imeout") != std::string::npos;
  std::string msg = op_ + " (rank " + std::to_string(link_.rank()) + "): " +
                    (r.send ? "sending " : "receiving ") + std::to_string(r.bytes) + " bytes " +
                    (r.send ? "to" : "from") + " " + peerName(r.peer, r.any) + " ";
  if (timed_out) {
    msg += "timed out after " + std::to_string(timeout_.count()) + " ms (peer dead or stuck?): " + what;
    link_.poison(msg);
    throw TimeoutError(msg);
  }
  msg += "failed (peer died or closed the connection?): " + what;
  link_.poison(msg);
  throw PeerError(r.peer, msg);
}

std::chrono::milliseconds GlooExchange::left() const {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now());
  return left.count() < 1 ? std::chrono::milliseconds(1) : left;
}

void GlooExchange::wait(int req) {
  if (req < 0) return;
  LC_ENFORCE(static_cast<size_t>(req) < reqs_.size(), "wait on request ", req, " of ", reqs_.size(), " (used after waitAll?)");
  Request& r = reqs_[req];
  if (r.done) return;
  if (r.lane) {
    try {
      link_.lanes().wait(*r.lane, deadline_);
    } catch (const std::exception& e) {
      fail(r, e);
    }
    r.done = true;
    if (r.send) meter_.recordSend(op_, phase_, r.bytes, link_.linkClass(r.peer));
    else meter_.recordRecv(op_, phase_, r.bytes, link_.linkClass(r.peer));
    return;
  }
  if (r.eager) {
    takeEager(r);
    r.done = true;
    meter_.recordRecv(op_, phase_, r.bytes, link_.linkClass(r.peer));
    return;
  }
  try {
    int from = r.peer;
    bool ok = r.send ? r.buf->waitSend(left()) : r.buf->waitRecv(&from, left());
    r.peer = from;
    if (!ok) throw gloo::IoException("aborted");
    if (!r.any.empty() && link_.stripes(r.peer, r.bytes)) {
      std::lock_guard<std::mutex> lk(mu_);
      link_.abortState().check(op_);
      r.any.clear();  // from now on errors name the peer that sent piece 0
      postPieces(r, r.ptr, r.slot);
    }
  } catch (const gloo::IoException& e) {
    fail(r, e);
  } catch (const gloo::Exception& e) {
    fail(r, e);
  }
  if (!r.pieces.empty()) waitPieces(r);
  r.done = true;
  if (r.send) meter_.recordSend(op_, phase_, r.bytes, link_.linkClass(r.peer));
  else meter_.recordRecv(op_, phase_, r.bytes, link_.linkClass(r.peer));
}

void GlooExchange::waitAll() {
  for (size_t i = 0; i < reqs_.size(); ++i) wait(static_cast<int>(i));
  std::lock_guard<std::mutex> lk(mu_);
  reqs_.clear();
}

void GlooExchange::reduce(void* dst, const void* src, size_t count, DType dt, ReduceOp op) {
  reduceInto(dst, src, count, dt, op);
}

void GlooExchange::copy(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

}  // namespace lowcomm::comm
