#include "lanes.h"

#include <algorithm>
#include <cstring>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "lowcomm/base/error.h"

namespace lowcomm::comm {

namespace {

// Lane threads wait for their connection without a deadline of their own (an idle communicator
// is not an error); the waiting collective owns the deadline, and poisoning the Link on its
// failure closes the connections, which ends these waits. Gloo turns an expired wait into an
// error of the whole context, hence a wait that does not expire.
constexpr std::chrono::milliseconds kForever = std::chrono::hours(24 * 365 * 10);

std::string rankName(int p) { return "rank " + std::to_string(p); }

}  // namespace

Lanes::Lanes(std::vector<gloo::Context*> streams, AbortState* abort)
    : streams_(std::move(streams)), registration_(abort, this) {}

void Lanes::abort() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    setError(-1, "aborted");
    for (auto& [p, q] : peers_) {
      for (auto& lane : q.lanes) {
        if (lane->out) lane->out->abortWaitSend();
        for (auto& b : lane->boxes) b->abortWaitRecv();
      }
    }
  }
  work_cv_.notify_all();
  done_cv_.notify_all();
}

Lanes::~Lanes() {
  registration_ = {};  // no abort() from here on
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  done_cv_.notify_all();
  for (auto& [p, q] : peers_) {
    for (auto& lane : q.lanes) {
      if (lane->out) lane->out->abortWaitSend();
      for (auto& b : lane->boxes) b->abortWaitRecv();
    }
  }
  for (auto& [p, q] : peers_) {
    for (auto& lane : q.lanes) {
      if (lane->sender.joinable()) lane->sender.join();
      if (lane->receiver.joinable()) lane->receiver.join();
    }
  }
}

Lanes::Peer& Lanes::peer(int p) {
  Peer& q = peers_[p];
  if (q.lanes.empty())
    for (size_t j = 0; j < streams_.size(); ++j) q.lanes.push_back(std::make_unique<Lane>());
  return q;
}

void Lanes::startSenders(int p, Peer& q) {
  q.sending = true;
  for (size_t j = 0; j < streams_.size(); ++j) {
    Lane& lane = *q.lanes[j];
    lane.out_mem.resize(sizeof(LaneHeader) + kLaneChunkBytes);
    lane.out = streams_[j]->createUnboundBuffer(lane.out_mem.data(), lane.out_mem.size());
    lane.sender = std::thread(&Lanes::sendLoop, this, p, static_cast<int>(j));
  }
}

void Lanes::startReceivers(int p, Peer& q) {
  q.receiving = true;
  for (size_t j = 0; j < streams_.size(); ++j) {
    Lane& lane = *q.lanes[j];
    lane.box_mem.resize(kLaneDepth);
    for (auto& mem : lane.box_mem) {
      mem.assign(sizeof(LaneHeader) + kLaneChunkBytes, 0);  // a zero header is never valid
      lane.boxes.push_back(streams_[j]->createUnboundBuffer(mem.data(), mem.size()));
      lane.boxes.back()->recv(p, kLaneSlot);
    }
    lane.receiver = std::thread(&Lanes::receiveLoop, this, p, static_cast<int>(j));
  }
}

std::shared_ptr<LaneMessage> Lanes::send(int p, const void* ptr, size_t bytes, uint64_t slot) {
  auto m = std::make_shared<LaneMessage>();
  m->peer = p, m->send = true, m->ptr = static_cast<char*>(const_cast<void*>(ptr)), m->bytes = bytes, m->slot = slot;
  {
    std::lock_guard<std::mutex> lk(mu_);
    Peer& q = peer(p);
    if (!q.sending) startSenders(p, q);
    for (size_t off = 0; off < bytes; off += kLaneChunkBytes)
      q.queue.push_back(Chunk{m, off, std::min(kLaneChunkBytes, bytes - off)});
  }
  work_cv_.notify_all();
  return m;
}

std::shared_ptr<LaneMessage> Lanes::recv(int p, void* ptr, size_t bytes, uint64_t slot) {
  auto m = std::make_shared<LaneMessage>();
  m->peer = p, m->ptr = static_cast<char*>(ptr), m->bytes = bytes, m->slot = slot;
  std::lock_guard<std::mutex> lk(mu_);
  Peer& q = peer(p);
  if (!q.receiving) startReceivers(p, q);
  auto k = q.kept.find(slot);
  if (k != q.kept.end()) {
    auto early = std::move(k->second);
    q.kept.erase(k);
    try {
      for (const auto& [h, payload] : early) place(p, *m, h, payload.data());
    } catch (const PeerError& e) {
      setError(p, e.what());
      throw;
    }
  }
  if (m->done < m->bytes) q.posted[slot] = m;
  return m;
}

void Lanes::wait(LaneMessage& m, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lk(mu_);
  done_cv_.wait_until(lk, deadline, [&] { return m.done >= m.bytes || !error_.empty(); });
  if (m.done >= m.bytes) return;
  if (!error_.empty()) throw PeerError(error_peer_, error_);
  throw TimeoutError("timed out waiting for " + std::to_string(m.bytes - m.done) + " of " + std::to_string(m.bytes) +
                     " bytes on " + std::to_string(streams_.size()) + " connections");
}

void Lanes::cancel(LaneMessage& m) {
  std::lock_guard<std::mutex> lk(mu_);
  m.cancelled = true;
  auto q = peers_.find(m.peer);
  if (m.send || q == peers_.end()) return;
  auto it = q->second.posted.find(m.slot);
  if (it != q->second.posted.end() && it->second.get() == &m) q->second.posted.erase(it);
}

std::pair<Lanes::Peer*, Lanes::Lane*> Lanes::laneOf(int p, int j) {
  std::lock_guard<std::mutex> lk(mu_);
  Peer* q = &peers_.at(p);
  return {q, q->lanes[j].get()};
}

void Lanes::sendLoop(int p, int j) {
  const auto [qp, lp] = laneOf(p, j);
  Peer* q = qp;
  Lane* lane = lp;
  for (;;) {
    Chunk c;
    {
      std::unique_lock<std::mutex> lk(mu_);
      work_cv_.wait(lk, [&] { return stop_ || !error_.empty() || !q->queue.empty(); });
      if (stop_ || !error_.empty()) return;
      c = std::move(q->queue.front());
      q->queue.pop_front();
      if (c.msg->cancelled) continue;
      const LaneHeader h{c.msg->slot, c.offset, c.bytes, c.msg->bytes};
      std::memcpy(lane->out_mem.data(), &h, sizeof(h));
      std::memcpy(lane->out_mem.data() + sizeof(h), c.msg->ptr + c.offset, c.bytes);
    }
    try {
      lane->out->send(p, kLaneSlot, 0, sizeof(LaneHeader) + c.bytes);
      if (!lane->out->waitSend(kForever)) return;  // aborted: shutting down
    } catch (const std::exception& e) {
      failLanes(p, "sending to " + rankName(p) + " on connection " + std::to_string(j) + ": " + e.what());
      return;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      c.msg->done += c.bytes;
    }
    done_cv_.notify_all();
  }
}

void Lanes::receiveLoop(int p, int j) {
  const auto [qp, lp] = laneOf(p, j);
  Peer* q = qp;
  Lane* lane = lp;
  for (size_t i = 0;; i = (i + 1) % lane->boxes.size()) {
    auto& box = lane->boxes[i];
    char* mem = lane->box_mem[i].data();
    try {
      if (!box->waitRecv(nullptr, kForever)) return;  // aborted: shutting down
    } catch (const std::exception& e) {
      failLanes(p, "receiving from " + rankName(p) + " on connection " + std::to_string(j) + ": " + e.what());
      return;
    }
    LaneHeader h;
    std::memcpy(&h, mem, sizeof(h));
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stop_) return;
      try {
        deliver(p, *q, h, mem + sizeof(h));
      } catch (const PeerError& e) {
        setError(p, e.what());
        done_cv_.notify_all();
        work_cv_.notify_all();
        return;
      }
    }
    done_cv_.notify_all();
    std::memset(mem, 0, sizeof(LaneHeader));
    try {
      box->recv(p, kLaneSlot);
    } catch (const std::exception& e) {
      failLanes(p, "receiving from " + rankName(p) + " on connection " + std::to_string(j) + ": " + e.what());
      return;
    }
  }
}

void Lanes::deliver(int p, Peer& q, const LaneHeader& h, const char* payload) {
  if (h.bytes == 0 || h.bytes > kLaneChunkBytes || h.offset > h.total || h.bytes > h.total - h.offset)
    throw PeerError(p, "malformed chunk from " + rankName(p) + ": " + std::to_string(h.bytes) + " bytes at offset " +
                           std::to_string(h.offset) + " of a " + std::to_string(h.total) +
                           "-byte message (chunks carry 1 to " + std::to_string(kLaneChunkBytes) + " bytes)");
  auto it = q.posted.find(h.slot);
  if (it == q.posted.end()) {
    q.kept[h.slot].emplace_back(h, std::vector<char>(payload, payload + h.bytes));
    return;
  }
  LaneMessage& m = *it->second;
  place(p, m, h, payload);
  if (m.done >= m.bytes) q.posted.erase(it);
}

void Lanes::place(int p, LaneMessage& m, const LaneHeader& h, const char* payload) {
  if (h.total != m.bytes)
    throw PeerError(p, "chunk from " + rankName(p) + " belongs to a " + std::to_string(h.total) + "-byte message; " +
                           std::to_string(m.bytes) + " bytes were expected (ranks disagree on the call)");
  std::memcpy(m.ptr + h.offset, payload, h.bytes);
  m.done += h.bytes;
}

void Lanes::setError(int p, const std::string& why) {
  if (!error_.empty()) return;
  error_ = why;
  error_peer_ = p;
}

void Lanes::failLanes(int p, const std::string& why) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) return;
    setError(p, why);
  }
  done_cv_.notify_all();
  work_cv_.notify_all();
}

}  // namespace lowcomm::comm
