#include "eager.h"

#include <cstring>
#include <string>

#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "link.h"
#include "lowcomm/base/error.h"

namespace lowcomm::comm {

namespace {

std::chrono::milliseconds until(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return left.count() < 1 ? std::chrono::milliseconds(1) : left;
}

}  // namespace

EagerInbox::EagerInbox(gloo::Context& ctx, const std::vector<int>& peers, size_t max_bytes, int depth,
                       AbortState* abort)
    : max_bytes_(max_bytes) {
  for (int p : peers) {
    From& f = peers_[p];
    f.ring.resize(static_cast<size_t>(depth));
    for (Box& b : f.ring) {
      b.mem.resize(sizeof(EagerHeader) + max_bytes);
      b.buf = ctx.createUnboundBuffer(b.mem.data(), b.mem.size());
      b.buf->recv(p, kEagerSlot);
    }
  }
  registration_ = AbortState::Registration(abort, this);  // once every box exists
}

// Standing receives are released without waiting: the connections close with the context.
EagerInbox::~EagerInbox() = default;

// The boxes are fixed at construction (a box is posted again, never replaced), so this is safe
// against take() on the owner's thread; the flag a box keeps makes its next wait return false.
void EagerInbox::abort() {
  for (auto& [p, f] : peers_)
    for (Box& b : f.ring) b.buf->abortWaitRecv();
}

void EagerInbox::readNext(int peer, From& f, std::chrono::steady_clock::time_point deadline) {
  Box& b = f.ring[f.head];
  if (!b.buf->waitRecv(until(deadline))) throw gloo::IoException("aborted");
  EagerHeader h;
  std::memcpy(&h, b.mem.data(), sizeof(h));
  if (h.bytes == 0 || h.bytes > max_bytes_)
    throw PeerError(peer, "eager message from rank " + std::to_string(peer) + " claims " + std::to_string(h.bytes) +
                              " bytes; at most " + std::to_string(max_bytes_) + " fit (malformed or mismatched comm.eager_max_bytes)");
  const char* payload = b.mem.data() + sizeof(h);
  f.kept[h.slot].emplace_back(payload, payload + h.bytes);
  b.buf->recv(peer, kEagerSlot);
  f.head = (f.head + 1) % f.ring.size();
}

void EagerInbox::take(int peer, uint64_t slot, void* dst, size_t bytes, std::chrono::steady_clock::time_point deadline) {
  auto it = peers_.find(peer);
  if (it == peers_.end()) throw PeerError(peer, "eager receive from rank " + std::to_string(peer) + ", not an eager peer");
  From& f = it->second;
  auto q = f.kept.find(slot);
  while (q == f.kept.end()) {
    readNext(peer, f, deadline);
    q = f.kept.find(slot);
  }
  std::vector<char> msg = std::move(q->second.front());
  q->second.pop_front();
  if (q->second.empty()) f.kept.erase(q);
  if (msg.size() != bytes)
    throw PeerError(peer, "eager message from rank " + std::to_string(peer) + " has " + std::to_string(msg.size()) +
                              " bytes; " + std::to_string(bytes) + " were expected (ranks disagree on the call)");
  std::memcpy(dst, msg.data(), bytes);
}

// Link's inbox and GlooExchange's eager messages (link.h).

void Link::openInbox(const std::vector<int>& peers, size_t max_bytes) {
  inbox_ = std::make_unique<EagerInbox>(*ctx_, peers, max_bytes, kEagerDepth, abort_.get());
}

bool Link::eager(int peer, size_t bytes) const {
  return inbox_ && bytes > 0 && bytes <= inbox_->maxBytes() && inbox_->hasPeer(peer);
}

int GlooExchange::isendEager(int peer, const void* ptr, size_t bytes, uint64_t slot) {
  if (!link_.eager(peer, bytes)) return isend(peer, ptr, bytes, slot);
  Request r{};
  r.peer = peer, r.bytes = bytes, r.send = true, r.slot = slot;
  const EagerHeader h{slot, bytes};
  r.staged.resize(sizeof(h) + bytes);
  std::memcpy(r.staged.data(), &h, sizeof(h));
  std::memcpy(r.staged.data() + sizeof(h), ptr, bytes);
  std::lock_guard<std::mutex> lk(mu_);
  link_.abortState().check(op_);
  r.buf = link_.context().createUnboundBuffer(r.staged.data(), r.staged.size());
  try {
    r.buf->send(peer, kEagerSlot);
  } catch (const std::exception& e) {
    r.done = true;
    fail(r, e);
  }
  reqs_.push_back(std::move(r));
  return static_cast<int>(reqs_.size() - 1);
}

int GlooExchange::irecvEager(int peer, void* ptr, size_t bytes, uint64_t slot) {
  if (!link_.eager(peer, bytes)) return irecv(peer, ptr, bytes, slot);
  Request r{};
  r.peer = peer, r.bytes = bytes, r.ptr = static_cast<char*>(ptr), r.slot = slot, r.eager = true;
  std::lock_guard<std::mutex> lk(mu_);
  reqs_.push_back(std::move(r));
  return static_cast<int>(reqs_.size() - 1);
}

void GlooExchange::takeEager(Request& r) {
  try {
    link_.inbox().take(r.peer, r.slot, r.ptr, r.bytes, deadline_);
  } catch (const gloo::Exception& e) {
    fail(r, e);
  } catch (const PeerError& e) {
    link_.poison(e.what());
    throw;
  }
}

}  // namespace lowcomm::comm
