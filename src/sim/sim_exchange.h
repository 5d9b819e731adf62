// The simulated executor of lowcomm/comm/exchange.h (private to the sim layer): messages are
// SimGrid communications between the ranks' actors, reductions and copies are computations on
// the rank's host. Buffers are never read or written.
#pragma once

#include <simgrid/s4u.hpp>

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lowcomm/comm/exchange.h"
#include "lowcomm/sim/platform.h"

namespace lowcomm::sim {

class InaFabric;

// What all ranks of one simulation share: the mailboxes, the per-pair send queues and the
// per-rank counters. Actors run one at a time (SimGrid's contexts), so the queues need no lock;
// a pair's sender sleeps on a semaphore counting the events that may have made a message ready.
//
// A pair of ranks talks over one connection (Gloo: one TCP socket per pair), so its messages
// go one at a time: a message is transferred once the sender knows its receiver has posted the
// matching receive and no other message of the pair is on the wire; among ready messages the one
// posted first goes first. A daemon "sender" actor per pair, on the sender's host, does that; a
// daemon "notifier" on the receiver's host carries the receiver's notices to it (across sites
// with a "lander" on the sender's host that takes them in; lander()) (Gloo's
// NOTIFY_RECV_READY), one after another.
//
// With PlatformSpec::link_burst_bytes (the emulated cluster's tbf), each node's way out and way
// in is a token bucket: a message between nodes first passes what both its buckets hold at once
// and the rest at the links' rate. A bucket refills at the link's nominal rate while no message
// of this network crosses its link (empty at time 0). With PlatformSpec::link_queue_s, those
// links are FIFO queues too: a notice waits behind what the messages crossing its way have left
// to send on its node's way out (TCP keeps a shaped link's queue full), at most the queue's
// length; only between nodes of one site (PlatformSpec::sites: across, the WAN's rate shapes a
// message, and its uplinks' bucket and queue are not modelled). A message across sites goes at
// most at the lossy WAN's bound per stream (PlatformSpec::streamCapBps), striped over
// PlatformSpec::streams flows from stripe_min_bytes on; the WAN's latency is added after its bytes
// have left (sendAcross), and to a notice after it has crossed (lander). The switch's port to the peer holds no queue: what arrives there from one node comes at
// the rate it leaves (several nodes sending to one, incast, would queue there; not modelled).
class SimNetwork {
 public:
  // Takes from `p` the notice size, the per-message overhead and the shaped links' burst and
  // queue (notice_bytes, message_overhead_s, link_burst_bytes, link_queue_s, at link_Bps and
  // link_Bps x bandwidth_factor).
  SimNetwork(std::vector<simgrid::s4u::Host*> host_of_rank, std::vector<int> node_of, const PlatformSpec& p);
  // The mailbox of messages from `src` to `dst` in the namespace of `slot`: its sequence number's
  // top 12 bits (the replay's group and thread: calls of two threads run at once) and its sub
  // (algorithms post the messages of one namespace between two ranks in the same order on both
  // sides: checked).
  simgrid::s4u::Mailbox* mailbox(int src, int dst, uint64_t slot);
  bool sameNode(int a, int b) const { return node_of_[a] == node_of_[b]; }
  bool otherLeaf(int a, int b) const { return leaf_of_[a] != leaf_of_[b]; }
  bool otherSite(int a, int b) const { return site_of_[a] != site_of_[b]; }
  int world() const { return world_; }
  // The host work ("flops" at reduce_Bps) of copying or summing `bytes` in a node's shared
  // memory (PlatformSpec::node_memory_Bps).
  double nodeMemoryWork(double bytes) const { return bytes * node_memory_work_; }
  // PlatformSpec::call_overhead_s of "op/algo" (0 when it has none).
  double callOverhead(const std::string& key) const {
    const auto it = call_overhead_s_.find(key);
    return it == call_overhead_s_.end() ? 0.0 : it->second;
  }

  // Queues a message on the pair's connection; `done` is released once it has been received.
  void enqueue(int src, int dst, uint64_t slot, uint64_t bytes, simgrid::s4u::SemaphorePtr done);
  // The receiver of (src → dst) posted the receive of `slot`: the sender learns it once the
  // notice has crossed from dst to src.
  void posted(int src, int dst, uint64_t slot);
  // Whether a message of `bytes` from src to dst sent with isendEager goes eagerly (across sites,
  // at most PlatformSpec::eager_max_bytes), and such a message's receive, known to the sender
  // before it is sent (the real executor's standing receives, src/comm/eager.h).
  bool eager(int src, int dst, uint64_t bytes) const {
    return bytes > 0 && bytes <= eager_max_ && otherSite(src, dst);
  }
  void prePosted(int src, int dst, uint64_t slot);
  // Counts `msgs` messages of `bytes` in all from src to dst (sent, inter-node, cross-leaf).
  void count(int src, int dst, uint64_t bytes, uint64_t msgs);
  // The barrier of `n` ranks named `key` (made by the first of them to ask, forgotten once all n
  // have theirs).
  simgrid::s4u::BarrierPtr barrier(uint64_t key, int n);

  std::vector<uint64_t> sent, recv, messages;
  std::vector<uint64_t> inter_node_sent;  // per rank: sent to a rank of another node
  std::vector<uint64_t> inter_leaf_sent;  // per rank: sent to a rank under another leaf switch (fat-tree)
  std::vector<uint64_t> inter_site_sent;  // per rank: sent to a rank of another site
  uint64_t inter_node = 0;
  InaFabric* ina = nullptr;  // the switch that sums allreduces (ina.h), when the platform has one

 private:
  // A message in a link's queue (link_queue_s, ways out only): on the wire (`comm`) or sendable
  // and being written by its host (`bytes`, no comm yet).
  struct Queued {
    simgrid::s4u::CommPtr comm;
    double bytes;
  };
  struct Pending {
    uint64_t slot, bytes;
    simgrid::s4u::SemaphorePtr done;
    double ready_at;  // posted + message_overhead_s: the host's part, overlapping the pair's transfers
    bool in_queue = false;  // counted in its node's way out (joinQueue)
    std::list<Queued>::iterator queued{};
  };
  struct Pair {
    std::deque<Pending> queue;
    std::multiset<uint64_t> posted;  // receives the sender knows of
    simgrid::s4u::SemaphorePtr events;
    // Receives posted, their notice not yet at the sender: the slot and when the notice leaves
    // the links' queues (link_queue_s; the post's time otherwise).
    std::deque<std::pair<uint64_t, double>> notices;
    simgrid::s4u::SemaphorePtr notice_events;
    // Across sites: notices on their way (FIFO) and their count, for the pair's lander.
    std::deque<std::pair<simgrid::s4u::CommPtr, uint64_t>> landing;
    simgrid::s4u::SemaphorePtr landing_events;
    // Across sites: messages whose bytes have left, by slot and when they arrive (FIFO).
    std::deque<std::pair<uint64_t, double>> delivering;
    simgrid::s4u::SemaphorePtr delivering_events;
    // Their streams' way: the deliverer is its permanent receiver, so a stream's bytes flow at
    // once (a host-to-host comm would ignore the stream's rate cap in SimGrid 3.32).
    simgrid::s4u::Mailbox* stream_box = nullptr;
    std::deque<uint64_t> stream_count;  // streams per message in `delivering`
    // The notices' way: the pair's sender actor is its permanent receiver, so a notice flows
    // as soon as it is put (SimGrid's Comm::sendto would do the same as a detached comm, and
    // SimGrid 3.32 keeps all detached comms in one list it searches linearly as each ends: a
    // quarter of a 4096-rank simulation's time).
    simgrid::s4u::Mailbox* notice_box = nullptr;
  };
  struct Bucket {
    double tokens = 0;  // bytes that may pass at once
    double since = 0;   // when it was last brought up to date
    int busy = 0;       // messages crossing the link now
    std::list<Queued> crossing;  // ways out only
  };
  Pair& pair(int src, int dst);
  // The bytes of a message from node `a` to node `b` that its links' buckets let through at
  // once (both buckets lose them; both links count as busy until burstDone).
  double takeBurst(int a, int b, double bytes);
  void burstDone(int a, int b);
  // How long a notice leaving node `a` waits in its way out's queue.
  double queueWait(int a) const;
  // A message whose notice is in (and was queued) joins its node's way out at once, before a
  // notice its rank posts in the same simulated instant: its host starts writing it then.
  void joinQueue(int src, int dst, Pending& m);
  void checkActorBudget(int more);
  // A message across sites: its bytes leave as one flow or as stripes (host to host, no
  // latency on the WAN's links), then the pair's deliverer hands it to the receiver one way's
  // latency later. So its send completes once written, as on a TCP socket, not once received.
  void sendAcross(int src, int dst, Pair& p, uint64_t slot, uint64_t bytes);
  void deliverer(int src, int dst, Pair& p);
  void sender(int src, int dst, Pair& p);
  void notifier(int src, int dst, Pair& p);
  // Across sites the notifier only starts each notice and a daemon "lander" on the sender's host
  // takes them in as they arrive, so that notices posted together cross the WAN together (TCP
  // pipelines them) instead of one round trip's half each, one after another.
  void lander(int src, int dst, Pair& p);
  // The notice of `slot` is in at the sender: the message may go.
  void noticeIn(int src, int dst, Pair& p, uint64_t slot);

  int world_;
  long actors_ = 0, map_limit_ = 0;  // daemon actors made so far; vm.max_map_count (-1: unknown)
  double notice_bytes_, message_overhead_s_;
  double burst_bytes_, burst_Bps_, queue_s_, queue_Bps_;
  std::vector<Bucket> out_, in_;  // per node: its way out to the switch, its way in
  std::map<std::string, double> call_overhead_s_;
  double node_memory_work_;  // reduce_Bps / node_memory_Bps
  std::vector<simgrid::s4u::Host*> host_of_;
  std::vector<int> node_of_, leaf_of_, site_of_;
  double stream_cap_Bps_;  // 0: none
  double wan_oneway_s_;    // across sites: the WAN's latency one way
  int streams_;
  uint64_t stripe_min_;
  uint64_t eager_max_;
  std::unordered_map<uint64_t, simgrid::s4u::Mailbox*> boxes_;
  std::unordered_map<uint64_t, std::unique_ptr<Pair>> pairs_;
  std::unordered_map<uint64_t, std::pair<simgrid::s4u::BarrierPtr, int>> barriers_;  // and how many took it
};

class SimExchange final : public comm::Exchange {
 public:
  // `count`: whether its messages go into the network's counters (a coarsened call's sample
  // counts itself; lowcomm/sim/replay.h CoarseOptions).
  SimExchange(SimNetwork& net, int rank, uint32_t seq, bool count = true)
      : Exchange(seq), net_(net), rank_(rank), count_(count) {}
  ~SimExchange() override = default;
  // What this call's isends sent so far, counted or not.
  uint64_t bytesSent() const { return bytes_sent_; }
  uint64_t messagesSent() const { return messages_sent_; }
  // A node-memory step's bytes to `peer` of its node (SimNode): counted as sent, or, when this
  // exchange does not count, kept apart (nodeBytesSent) for the coarsened call to scale.
  void countNode(int peer, uint64_t bytes);
  uint64_t nodeBytesSent() const { return node_bytes_sent_; }
  uint64_t nodeMessagesSent() const { return node_messages_sent_; }
  // Simulated time this rank spent in node-memory steps (SimNode; not a member's wait for its
  // leader's ring), for the coarsened call.
  void addNodeTime(double s) { node_s_ += s; }
  double nodeTime() const { return node_s_; }
  SimNetwork& network() { return net_; }
  int rank() const { return rank_; }

  int isend(int peer, const void* ptr, size_t bytes, uint64_t slot) override;
  int irecv(int peer, void* ptr, size_t bytes, uint64_t slot) override;
  int isendEager(int peer, const void* ptr, size_t bytes, uint64_t slot) override;
  int irecvEager(int peer, void* ptr, size_t bytes, uint64_t slot) override;
  // Not used by any collective; throws.
  int irecvAny(const std::vector<int>& peers, void* ptr, size_t bytes, uint64_t slot) override;
  int peerOf(int req) const override { return reqs_[req].peer; }
  void wait(int req) override;
  void waitAll() override;
  void reduce(void* dst, const void* src, size_t count, comm::DType dt, comm::ReduceOp op) override;
  void copy(void* dst, const void* src, size_t bytes) override;

 private:
  struct Request {
    simgrid::s4u::CommPtr comm;
    int peer;
    uint64_t slot;
    bool send;
    bool done = false;
    void* got = nullptr;                    // a receive's payload: the sender's slot
    simgrid::s4u::SemaphorePtr sent_sem;    // a send's completion
  };
  SimNetwork& net_;
  int rank_;
  bool count_;
  uint64_t bytes_sent_ = 0, messages_sent_ = 0;
  uint64_t node_bytes_sent_ = 0, node_messages_sent_ = 0;  // uncounted node-memory steps
  double node_s_ = 0;
  std::deque<Request> reqs_;  // stable addresses: `got` is written when a receive completes
};

}  // namespace lowcomm::sim
