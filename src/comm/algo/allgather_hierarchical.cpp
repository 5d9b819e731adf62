// Two-level allgather(v) for ranks grouped by node (contiguous groups of `group_size`, the last
// one possibly smaller): 1. every member sends its block to its group's leader (first rank),
// 2. the leaders run the ring allgather over whole group blocks, 3. each leader broadcasts the
// gathered buffer inside its group. Only leaders cross group boundaries, each group's block once
// per group link: on 2 x 2 ranks, 4 block crossings of the node boundary instead of the flat
// ring's 6, and no member's block crosses it twice.
#include <algorithm>

#include "algorithms.h"
#include "lowcomm/comm/algorithm_table.h"
#include "lowcomm/comm/selector.h"

namespace lowcomm::comm {

void allgatherHierarchical(Exchange& ex, const Group& g, const AllgatherOptions& opts) {
  char* const buf = opts.buf;
  const std::vector<size_t>& off = *opts.off_bytes;
  const size_t seg_bytes = opts.segment_bytes;
  const int n = g.size();
  if (n == 1) return;
  const int gs = std::max(1, std::min(opts.group_size, n));
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
    AllgatherOptions ring;
    ring.buf = buf;
    ring.off_bytes = &block_off;
    ring.segment_bytes = seg_bytes;
    ring.sub = 1;
    ringAllgather(ex, leaders, ring);
  }
  // 3. The whole buffer inside the group, as the automatic broadcast would send it.
  BroadcastOptions b;
  b.buf = buf;
  b.bytes = off[n];
  b.root = 0;
  b.segment_bytes = seg_bytes;
  b.sub = 2;
  algorithmSpec(autoBroadcast(off[n], m, seg_bytes)).runs.broadcast_fn(ex, local, b);
}

}  // namespace lowcomm::comm
