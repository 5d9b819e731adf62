// Two-level allreduce with each group's part in the memory its members share (a node): the group
// sums into its leader's buffer (NodeMemory::reduceToLeader), the leaders run the ring allreduce
// over the network, and each leader's result goes back to its group (broadcastFromLeader). Only
// leaders use the Exchange: N bytes per leader between nodes, and no loopback TCP inside the node
// (allreduce_hierarchical.cpp puts a reduce-scatter, a gather and a tree broadcast there). The
// communicator runs the group's part in a shared-memory segment (src/comm/shm_node.h), the
// simulator as host copies and a barrier (src/sim/sim_node.h).
//
// Pipelined over chunks of the buffer: while the leaders' ring moves chunk k, each leader sums
// chunk k + 1 with its group and hands chunk k - 1 back to it. The leader does these node steps
// at its ring's waits (NodeOverlap below), while the ring's messages are in flight; the other
// members do the same steps in the same order, so only the first chunk's sum and the last
// chunk's copy out are not overlapped.
#include <algorithm>
#include <deque>
#include <functional>

#include "lowcomm/comm/algorithms.h"

namespace lowcomm::comm {

namespace {

using NodeStep = std::function<void()>;

// The inner Exchange, with the next pending node step run at each wait before waiting.
class NodeOverlap final : public Exchange {
 public:
  NodeOverlap(Exchange& inner, std::deque<NodeStep>& steps) : Exchange(inner.seq()), in_(inner), steps_(steps) {}
  int isend(int peer, const void* ptr, size_t bytes, uint64_t slot) override {
    return in_.isend(peer, ptr, bytes, slot);
  }
  int irecv(int peer, void* ptr, size_t bytes, uint64_t slot) override { return in_.irecv(peer, ptr, bytes, slot); }
  int irecvAny(const std::vector<int>& peers, void* ptr, size_t bytes, uint64_t slot) override {
    return in_.irecvAny(peers, ptr, bytes, slot);
  }
  int peerOf(int req) const override { return in_.peerOf(req); }
  void wait(int req) override {
    runNext();
    in_.wait(req);
  }
  void waitAll() override {
    runNext();
    in_.waitAll();
  }
  void reduce(void* dst, const void* src, size_t count, DType dt, ReduceOp op) override {
    in_.reduce(dst, src, count, dt, op);
  }
  void copy(void* dst, const void* src, size_t bytes) override { in_.copy(dst, src, bytes); }

 private:
  void runNext() {
    if (steps_.empty()) return;
    NodeStep s = std::move(steps_.front());
    steps_.pop_front();
    s();
  }
  Exchange& in_;
  std::deque<NodeStep>& steps_;
};

}  // namespace

size_t nodePipelineChunks(size_t bytes, size_t seg_bytes, int leaders) {
  const size_t min_chunk = std::max<size_t>(seg_bytes, 1) * static_cast<size_t>(std::max(1, leaders / 2));
  return std::clamp<size_t>(bytes / min_chunk, 1, kNodePipelineChunks);
}

void allreduceHierarchicalNode(Exchange& ex, const Group& g, const AllreduceOptions& opts) {
  char* const buf = opts.buf;
  const size_t count = opts.count;
  const DType dt = opts.dt;
  const ReduceOp op = opts.op;
  NodeMemory& node = *opts.node;
  const int n = g.size();
  if (n == 1 || count == 0) return;
  const int gs = std::max(1, std::min(opts.group_size, n));
  if (n <= gs) {  // one group: nothing crosses the network
    node.reduceToLeader(buf, count, dt, op);
    node.broadcastFromLeader(buf, count, dt);
    return;
  }
  const size_t es = dtypeSize(dt);
  const bool leader = g.me % gs == 0;
  Group leaders;
  for (int i = 0; i < n; i += gs) leaders.ranks.push_back(g.ranks[i]);
  leaders.me = g.me / gs;
  const size_t parts = nodePipelineChunks(count * es, opts.segment_bytes, leaders.size());
  const auto chunk = evenOffsets(count, static_cast<int>(std::min(count, parts)));
  const int chunks = static_cast<int>(chunk.size()) - 1;
  auto sum = [&](int k) -> NodeStep {
    return [&, k] { node.reduceToLeader(buf + chunk[k] * es, chunk[k + 1] - chunk[k], dt, op); };
  };
  auto back = [&](int k) -> NodeStep {
    return [&, k] { node.broadcastFromLeader(buf + chunk[k] * es, chunk[k + 1] - chunk[k], dt); };
  };

  sum(0)();
  for (int k = 0; k < chunks; ++k) {
    std::deque<NodeStep> steps;  // the same steps in the same order on every member of the group
    if (k + 1 < chunks) steps.push_back(sum(k + 1));
    if (k > 0) steps.push_back(back(k - 1));
    if (leader) {
      NodeOverlap ox(ex, steps);
      AllreduceOptions ring = opts;
      ring.buf = buf + chunk[k] * es;
      ring.count = chunk[k + 1] - chunk[k];
      ring.sub = 2 + 2 * static_cast<uint32_t>(k);
      ring.node = nullptr;
      allreduceRing(ox, leaders, ring);
    }
    for (auto& s : steps) s();  // what the ring's waits left (all of them on the other members)
  }
  back(chunks - 1)();
}

NodeBytes nodeReduceBytes(size_t count, size_t es, int n, int me, size_t piece_bytes, bool all_out) {
  const size_t piece = std::max<size_t>(1, piece_bytes / es);
  const uint64_t readers = all_out ? n - 1 : (me == 0 ? 0 : 1);  // of this member's share of the sum
  NodeBytes b;
  for (size_t off = 0; off < count; off += piece) {
    const size_t len = std::min(piece, count - off);
    const auto share = evenOffsets(len, n);
    const size_t sl = share[me + 1] - share[me];
    b.sent += (len - sl + readers * sl) * es;  // its slot but its own share; its share of the sum
    b.got += (static_cast<uint64_t>(n - 1) * sl + (all_out || me == 0 ? len - sl : 0)) * es;
  }
  return b;
}

NodeBytes nodeBroadcastBytes(size_t count, size_t es, int n, int me) {
  NodeBytes b;
  if (me == 0) b.sent = static_cast<uint64_t>(n - 1) * count * es;
  else b.got = count * es;
  return b;
}

}  // namespace lowcomm::comm
