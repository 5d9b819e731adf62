// Two-level allreduce with each group's part in the memory its members share (a node): the group
// sums into its leader's buffer (NodeMemory::reduceToLeader), the leaders run the ring allreduce
// over the network on the whole buffer, and each leader's result goes back to its group
// (broadcastFromLeader). Only leaders use the Exchange: N bytes per leader between nodes, and no
// loopback TCP inside the node (allreduce_hierarchical.cpp puts a reduce-scatter, a gather and a
// tree broadcast there). The communicator runs the group's part in a shared-memory segment
// (src/comm/shm_node.h), the simulator as host copies and a barrier (src/sim/sim_node.h).
#include <algorithm>

#include "lowcomm/comm/algorithms.h"

namespace lowcomm::comm {

void allreduceHierarchicalNode(Exchange& ex, const Group& g, int group_size, NodeMemory& node, char* buf,
                               size_t count, DType dt, ReduceOp op, size_t seg_bytes, Scratch& scratch) {
  const int n = g.size();
  if (n == 1 || count == 0) return;
  const int gs = std::max(1, std::min(group_size, n));
  node.reduceToLeader(buf, count, dt, op);
  if (g.me % gs == 0 && n > gs) {
    Group leaders;
    for (int i = 0; i < n; i += gs) leaders.ranks.push_back(g.ranks[i]);
    leaders.me = g.me / gs;
    allreduceRing(ex, leaders, buf, count, dt, op, seg_bytes, 2, scratch);
  }
  node.broadcastFromLeader(buf, count, dt);
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
