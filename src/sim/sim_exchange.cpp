#include "sim_exchange.h"

#include <algorithm>
#include <fstream>
#include <string>

#include "lowcomm/base/error.h"
#include "lowcomm/comm/dtype.h"

namespace lowcomm::sim {

namespace sg4 = simgrid::s4u;

SimNetwork::SimNetwork(std::vector<sg4::Host*> host_of_rank, std::vector<int> node_of, const PlatformSpec& p)
    : sent(host_of_rank.size(), 0),
      recv(host_of_rank.size(), 0),
      messages(host_of_rank.size(), 0),
      inter_node_sent(host_of_rank.size(), 0),
      inter_leaf_sent(host_of_rank.size(), 0),
      inter_site_sent(host_of_rank.size(), 0),
      world_(static_cast<int>(host_of_rank.size())),
      notice_bytes_(p.notice_bytes),
      message_overhead_s_(p.message_overhead_s),
      burst_bytes_(p.link_burst_bytes),
      burst_Bps_(p.link_Bps),
      queue_s_(p.link_queue_s),
      queue_Bps_(p.link_Bps * p.bandwidth_factor),
      call_overhead_s_(p.call_overhead_s),
      node_memory_work_(p.reduce_Bps / p.node_memory_Bps),
      host_of_(std::move(host_of_rank)),
      node_of_(std::move(node_of)),
      stream_cap_Bps_(p.streamCapBps()),
      wan_oneway_s_(p.sites > 1 ? p.wanRtt() / 2 : 0),
      streams_(p.streams),
      stripe_min_(p.stripe_min_bytes),
      eager_max_(p.eager_max_bytes) {
  for (int r = 0; r < world_; ++r) leaf_of_.push_back(p.leafOfRank(r));
  for (int r = 0; r < world_; ++r) site_of_.push_back(p.siteOf(node_of_[r]));
  if (burst_bytes_ > 0 || queue_s_ > 0) {
    const int nodes = node_of_.empty() ? 0 : *std::max_element(node_of_.begin(), node_of_.end()) + 1;
    out_.resize(nodes);
    in_.resize(nodes);
  }
}

double SimNetwork::takeBurst(int a, int b, double bytes) {
  const double now = sg4::Engine::get_clock();
  auto refill = [&](Bucket& k) {
    if (k.busy == 0) k.tokens = std::min(burst_bytes_, k.tokens + (now - k.since) * burst_Bps_);
    k.since = now;
    ++k.busy;
  };
  refill(out_[a]);
  refill(in_[b]);
  const double free = std::min({bytes, out_[a].tokens, in_[b].tokens});
  out_[a].tokens -= free;
  in_[b].tokens -= free;
  return free;
}

double SimNetwork::queueWait(int a) const {
  double bytes = 0;
  for (const auto& q : out_[a].crossing) bytes += q.comm ? q.comm->get_remaining() : q.bytes;
  return std::min(bytes / queue_Bps_, queue_s_);
}

void SimNetwork::joinQueue(int src, int dst, Pending& m) {
  if (queue_s_ <= 0 || m.in_queue || sameNode(src, dst) || otherSite(src, dst)) return;
  auto& crossing = out_[node_of_[src]].crossing;
  m.queued = crossing.insert(crossing.end(), Queued{nullptr, static_cast<double>(m.bytes)});
  m.in_queue = true;
}

void SimNetwork::burstDone(int a, int b) {
  const double now = sg4::Engine::get_clock();
  for (Bucket* k : {&out_[a], &in_[b]})
    if (--k->busy == 0) k->since = now;
}

// SimGrid gives every actor a stack of its own (one memory mapping each): past the kernel's
// vm.max_map_count the simulation would abort. Fails first, saying what to change.
void SimNetwork::checkActorBudget(int more) {
  actors_ += more;
  if (map_limit_ == 0) {
    std::ifstream f("/proc/sys/vm/max_map_count");
    if (!(f >> map_limit_)) map_limit_ = -1;
  }
  const long headroom = 2048;  // libraries, heap, the ranks' own actors
  if (map_limit_ > 0 && actors_ + 2L * world_ + headroom > map_limit_)
    throw ConfigError("simulate: " + std::to_string(world_) + " ranks need more than " + std::to_string(actors_) +
                      " SimGrid actors (one per connection and direction), more memory mappings than "
                      "vm.max_map_count = " + std::to_string(map_limit_) +
                      " allows; raise it (sysctl -w vm.max_map_count=" + std::to_string(4 * map_limit_) +
                      ") or simulate rings (--algo ring, coarsened) instead of halving-doubling");
}

void SimNetwork::count(int src, int dst, uint64_t bytes, uint64_t msgs) {
  sent[src] += bytes;
  messages[src] += msgs;
  if (sameNode(src, dst)) return;
  inter_node += bytes;
  inter_node_sent[src] += bytes;
  if (otherLeaf(src, dst)) inter_leaf_sent[src] += bytes;
  if (otherSite(src, dst)) inter_site_sent[src] += bytes;
}

SimNetwork::Pair& SimNetwork::pair(int src, int dst) {
  const uint64_t key = static_cast<uint64_t>(src) * static_cast<uint64_t>(world_) + static_cast<uint64_t>(dst);
  auto it = pairs_.find(key);
  if (it != pairs_.end()) return *it->second;
  checkActorBudget(notice_bytes_ > 0 ? 2 : 1);
  auto p = std::make_unique<Pair>();
  p->events = sg4::Semaphore::create(0);
  p->notice_events = sg4::Semaphore::create(0);
  Pair& ref = *p;
  pairs_.emplace(key, std::move(p));
  auto connection = sg4::Actor::create("send" + std::to_string(src) + ">" + std::to_string(dst), host_of_[src],
                                        [this, src, dst, &ref] { sender(src, dst, ref); });
  connection->daemonize();
  if (notice_bytes_ > 0) {
    ref.notice_box = sg4::Mailbox::by_name("notice " + std::to_string(src) + ">" + std::to_string(dst));
    ref.notice_box->set_receiver(connection);  // before any notice is put
    sg4::Actor::create("notify" + std::to_string(dst) + ">" + std::to_string(src), host_of_[dst],
                       [this, src, dst, &ref] { notifier(src, dst, ref); })
        ->daemonize();
    if (otherSite(src, dst)) {  // notices cross the WAN pipelined
      ref.landing_events = sg4::Semaphore::create(0);
      sg4::Actor::create("land" + std::to_string(dst) + ">" + std::to_string(src), host_of_[src],
                         [this, src, dst, &ref] { lander(src, dst, ref); })
          ->daemonize();
    }
  }
  if (otherSite(src, dst)) {
    checkActorBudget(ref.landing_events ? 2 : 1);
    ref.delivering_events = sg4::Semaphore::create(0);
    auto deliver = sg4::Actor::create("deliver" + std::to_string(src) + ">" + std::to_string(dst), host_of_[dst],
                                      [this, src, dst, &ref] { deliverer(src, dst, ref); });
    deliver->daemonize();
    ref.stream_box = sg4::Mailbox::by_name("streams " + std::to_string(src) + ">" + std::to_string(dst));
    ref.stream_box->set_receiver(deliver);
  }
  return ref;
}

void SimNetwork::enqueue(int src, int dst, uint64_t slot, uint64_t bytes, sg4::SemaphorePtr done) {
  Pair& p = pair(src, dst);
  p.queue.push_back(Pending{slot, bytes, std::move(done), sg4::Engine::get_clock() + message_overhead_s_});
  if (p.posted.count(slot) > 0) joinQueue(src, dst, p.queue.back());
  p.events->release();
}

void SimNetwork::posted(int src, int dst, uint64_t slot) {
  Pair& p = pair(src, dst);
  if (notice_bytes_ <= 0) {
    p.posted.insert(slot);
    p.events->release();
    return;
  }
  // A notice joins its links' queues when it is posted, behind what they hold then.
  double leaves = sg4::Engine::get_clock();
  if (queue_s_ > 0 && !sameNode(src, dst) && !otherSite(src, dst)) leaves += queueWait(node_of_[dst]);
  if (!p.notices.empty()) leaves = std::max(leaves, p.notices.back().second);  // FIFO
  p.notices.emplace_back(slot, leaves);
  p.notice_events->release();
}

void SimNetwork::prePosted(int src, int dst, uint64_t slot) {
  Pair& p = pair(src, dst);
  p.posted.insert(slot);
  p.events->release();
}

// The receiver's side of the pair's connection: each notice is a small flow from dst to src.
void SimNetwork::notifier(int src, int dst, Pair& p) {
  for (;;) {
    p.notice_events->acquire();
    const auto [slot, leaves] = p.notices.front();
    p.notices.pop_front();
    if (leaves > sg4::Engine::get_clock()) sg4::this_actor::sleep_until(leaves);
    static char notice;  // a payload (SimGrid refuses a null one); no data moves
    if (p.landing_events) {  // across sites: the lander takes it in
      p.landing.emplace_back(p.notice_box->put_async(&notice, static_cast<uint64_t>(notice_bytes_)), slot);
      p.landing_events->release();
      continue;
    }
    p.notice_box->put(&notice, static_cast<uint64_t>(notice_bytes_));  // from dst's host to src's
    p.notice_box->get<char>();  // out of the box's received list: it is the one just put
    noticeIn(src, dst, p, slot);
  }
}

void SimNetwork::lander(int src, int dst, Pair& p) {
  for (;;) {
    p.landing_events->acquire();
    auto [comm, slot] = p.landing.front();
    p.landing.pop_front();
    comm->wait();  // notices started in order on one route arrive in order
    sg4::this_actor::sleep_until(comm->get_finish_time() + wan_oneway_s_);
    p.notice_box->get<char>();
    noticeIn(src, dst, p, slot);
  }
}

void SimNetwork::noticeIn(int src, int dst, Pair& p, uint64_t slot) {
  p.posted.insert(slot);
  for (auto& m : p.queue)
    if (m.slot == slot && !m.in_queue) {
      joinQueue(src, dst, m);
      break;
    }
  p.events->release();
}

// The pair's connection: sends the first queued message whose receive is posted, one at a time.
void SimNetwork::sender(int src, int dst, Pair& p) {
  for (;;) {
    auto ready = p.queue.begin();
    while (ready != p.queue.end() && p.posted.find(ready->slot) == p.posted.end()) ++ready;
    if (ready == p.queue.end()) {
      p.events->acquire();  // no other actor runs between the scan and this wait: no lost event
      continue;
    }
    Pending msg = *ready;
    p.queue.erase(ready);
    p.posted.erase(p.posted.find(msg.slot));
    const bool across = otherSite(src, dst);
    const bool shaped = (burst_bytes_ > 0 || queue_s_ > 0) && !sameNode(src, dst) && !across;
    const bool queued = shaped && queue_s_ > 0;
    const int a = node_of_[src], b = node_of_[dst];
    // Its notice is in: the host writes it now, so a notice posted from here on leaves behind it.
    joinQueue(src, dst, msg);
    // The host's time for the message ran since it was posted, also while the connection carried
    // the pair's previous messages (a pipelined transfer hides it; a lone small message does not).
    if (msg.ready_at > sg4::Engine::get_clock()) sg4::this_actor::sleep_until(msg.ready_at);
    uint64_t rated = msg.bytes;  // what crosses at the links' rate
    if (shaped) rated -= std::min(msg.bytes, static_cast<uint64_t>(takeBurst(a, b, static_cast<double>(msg.bytes))));
    // The payload pointer carries the slot (+ 1: SimGrid refuses a null payload), so the receiver
    // can check it got the message it expects.
    if (across) {
      sendAcross(src, dst, p, msg.slot, rated);
    } else {
      auto comm = mailbox(src, dst, msg.slot)
                      ->put_async(reinterpret_cast<void*>(static_cast<uintptr_t>(msg.slot + 1)), rated);
      if (queued) msg.queued->comm = comm;
      comm->wait();
    }
    if (queued) out_[a].crossing.erase(msg.queued);
    if (shaped) burstDone(a, b);
    msg.done->release();
  }
}

void SimNetwork::sendAcross(int src, int dst, Pair& p, uint64_t slot, uint64_t bytes) {
  const uint64_t k = streams_ > 1 && bytes >= stripe_min_ ? static_cast<uint64_t>(streams_) : 1;
  // Contiguous near-equal pieces (the first bytes % k one byte longer), each its own stream.
  std::vector<sg4::CommPtr> stripes;
  static char piece;  // a payload (SimGrid refuses a null one); no data moves
  for (uint64_t i = 0; i < k; ++i) {
    auto c = p.stream_box->put_init(&piece, bytes / k + (i < bytes % k ? 1 : 0));
    if (stream_cap_Bps_ > 0) c->set_rate(stream_cap_Bps_);
    c->start();
    stripes.push_back(c);
  }
  sg4::Comm::wait_all(stripes);
  p.delivering.emplace_back(slot, sg4::Engine::get_clock() + wan_oneway_s_);
  p.stream_count.push_back(k);
  p.delivering_events->release();
}

void SimNetwork::deliverer(int src, int dst, Pair& p) {
  for (;;) {
    p.delivering_events->acquire();
    const auto [slot, arrives] = p.delivering.front();
    p.delivering.pop_front();
    for (uint64_t k = p.stream_count.front(); k > 0; --k) p.stream_box->get<char>();  // in, out of the list
    p.stream_count.pop_front();
    sg4::this_actor::sleep_until(arrives);
    // The receive is posted (its notice let the bytes go): the hand-over costs the LAN's latency.
    mailbox(src, dst, slot)->put(reinterpret_cast<void*>(static_cast<uintptr_t>(slot + 1)), 0);
  }
}

sg4::BarrierPtr SimNetwork::barrier(uint64_t key, int n) {
  auto it = barriers_.find(key);
  if (it == barriers_.end()) it = barriers_.emplace(key, std::make_pair(sg4::Barrier::create(n), 0)).first;
  sg4::BarrierPtr b = it->second.first;
  if (++it->second.second == n) barriers_.erase(it);
  return b;
}

sg4::Mailbox* SimNetwork::mailbox(int src, int dst, uint64_t slot) {
  const uint64_t ns = ((slot >> 52) << 6) | ((slot >> 26) & 0x3f);  // 18 bits: group and thread, sub
  const uint64_t key = ((static_cast<uint64_t>(src) * static_cast<uint64_t>(world_) + static_cast<uint64_t>(dst)) << 18) | ns;
  auto it = boxes_.find(key);
  if (it != boxes_.end()) return it->second;
  auto* box = sg4::Mailbox::by_name(std::to_string(src) + ">" + std::to_string(dst) + "/" + std::to_string(ns));
  boxes_.emplace(key, box);
  return box;
}

int SimExchange::isend(int peer, const void*, size_t bytes, uint64_t slot) {
  if (bytes == 0) return -1;
  auto done = sg4::Semaphore::create(0);
  net_.enqueue(rank_, peer, slot, bytes, done);
  bytes_sent_ += bytes;
  messages_sent_ += 1;
  if (count_) net_.count(rank_, peer, bytes, 1);
  reqs_.push_back(Request{nullptr, peer, slot, true, false, nullptr, nullptr});
  reqs_.back().sent_sem = std::move(done);
  return static_cast<int>(reqs_.size() - 1);
}

void SimExchange::countNode(int peer, uint64_t bytes) {
  if (count_) {
    net_.count(rank_, peer, bytes, 1);
  } else {
    node_bytes_sent_ += bytes;
    node_messages_sent_ += 1;
  }
}

int SimExchange::irecv(int peer, void*, size_t bytes, uint64_t slot) {
  if (bytes == 0) return -1;
  reqs_.push_back(Request{nullptr, peer, slot, false, false, nullptr, nullptr});
  Request& r = reqs_.back();
  r.comm = net_.mailbox(peer, rank_, slot)->get_async<void>(&r.got);
  net_.posted(peer, rank_, slot);
  net_.recv[rank_] += bytes;
  return static_cast<int>(reqs_.size() - 1);
}

int SimExchange::isendEager(int peer, const void* ptr, size_t bytes, uint64_t slot) {
  if (net_.eager(rank_, peer, bytes)) net_.prePosted(rank_, peer, slot);
  return isend(peer, ptr, bytes, slot);
}

int SimExchange::irecvEager(int peer, void* ptr, size_t bytes, uint64_t slot) {
  if (!net_.eager(peer, rank_, bytes)) return irecv(peer, ptr, bytes, slot);
  reqs_.push_back(Request{nullptr, peer, slot, false, false, nullptr, nullptr});
  Request& r = reqs_.back();
  r.comm = net_.mailbox(peer, rank_, slot)->get_async<void>(&r.got);
  net_.recv[rank_] += bytes;
  return static_cast<int>(reqs_.size() - 1);
}

int SimExchange::irecvAny(const std::vector<int>&, void*, size_t, uint64_t) {
  throw Error("simulated exchange: receive-from-any is not simulated (no collective uses it)");
}

void SimExchange::wait(int req) {
  if (req < 0) return;
  LC_ENFORCE(static_cast<size_t>(req) < reqs_.size(), "simulated exchange: wait on request ", req, " of ", reqs_.size(), " (used after waitAll?)");
  Request& r = reqs_[req];
  if (r.done) return;
  if (r.send) r.sent_sem->acquire();
  else r.comm->wait();
  r.done = true;
  if (!r.send && reinterpret_cast<uintptr_t>(r.got) - 1 != r.slot)
    throw Error("simulated exchange: rank " + std::to_string(rank_) + " expected slot " + std::to_string(r.slot) +
                " from rank " + std::to_string(r.peer) + " but the next message on that path has slot " +
                std::to_string(reinterpret_cast<uintptr_t>(r.got) - 1) +
                " (the algorithm posts one namespace's messages between two ranks in a different order on each side)");
}

void SimExchange::waitAll() {
  for (size_t i = 0; i < reqs_.size(); ++i) wait(static_cast<int>(i));
  reqs_.clear();
}

// Host speeds are in bytes per second of reduction (platform.h: reduce_Bps), so a reduction of
// n bytes is n "flops" on one of the host's cores.
void SimExchange::reduce(void*, const void*, size_t count, comm::DType dt, comm::ReduceOp) {
  const double bytes = static_cast<double>(count * comm::dtypeSize(dt));
  if (bytes > 0) sg4::this_actor::execute(bytes);
}

void SimExchange::copy(void*, const void*, size_t bytes) {
  if (bytes > 0) sg4::this_actor::execute(static_cast<double>(bytes));
}

}  // namespace lowcomm::sim
