// Two-level allgather(v) for ranks grouped by node (contiguous groups of `group_size`, the last
// one possibly smaller): 1. every member sends its block to its group's leader (first rank),
// 2. the leaders run the ring allgather over whole group blocks, 3. each leader broadcasts the
// gathered buffer inside its group. Only leaders cross group boundaries, each group's block once
// per group link: on 2 x 2 ranks, 4 block crossings of the node boundary instead of the flat
// ring's 6, and no member's block crosses it twice.
#include <algorithm>

#include "algorithms.h"
#include "lowcomm/comm/selector.h"

namespace lowcomm::comm {

void allgatherHierarchical(Exchange& ex, const Group& g, int group_size, char* buf, const std::vector<size_t>& off,
                           size_t seg_bytes) {
  const int n = g.size();
  if (n == 1) return;
  const int gs = std::max(1, std::min(group_size, n));
  const int my_group = g.me / gs, first = my_group * gs;
  Group local;
  for (int i = first; i < std::min(n, first + gs); ++i) local.ranks.push_back(g.ranks[i]);
  local.me = g.me - first;
  const int m = local.size();
  // 1. Blocks to the leader (empty blocks send nothing, on both sides).
  if (local.me == 0) {
    for (int c = 1; c < m; ++c)
      if (off[first + c + 1] > off[first + c])
        ex.irecv(local.peer(c), buf + off[first + c], off[first + c + 1] - off[first + c], ex.slot(0, 0));
  } else if (off[g.me + 1] > off[g.me]) {
    ex.isend(local.peer(0), buf + off[g.me], off[g.me + 1] - off[g.me], ex.slot(0, 0));
  }
  ex.waitAll();
  // 2. The leaders' ring over group blocks.
  if (local.me == 0) {
    Group leaders;
    std::vector<size_t> block_off;
    for (int i = 0; i < n; i += gs) {
      leaders.ranks.push_back(g.ranks[i]);
      block_off.push_back(off[i]);
    }
    block_off.push_back(off[n]);
    leaders.me = my_group;
    ringAllgather(ex, leaders, buf, block_off, seg_bytes, 1);
  }
  // 3. The whole buffer inside the group, as the automatic broadcast would send it.
  if (autoBroadcast(off[n], m, seg_bytes) == Algo::chain) broadcastChain(ex, local, buf, off[n], 0, seg_bytes, 2);
  else broadcastTree(ex, local, buf, off[n], 0, seg_bytes, 2);
}

}  // namespace lowcomm::comm
