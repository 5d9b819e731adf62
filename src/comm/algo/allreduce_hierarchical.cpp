// Two-level allreduce for ranks grouped by node (contiguous groups of `group_size`):
// 1. ring reduce-scatter inside each group, 2. the group's chunks gathered on its leader
// (first rank), 3. ring allreduce across the group leaders, 4. tree broadcast inside each
// group. Only leaders cross group boundaries: N bytes per leader instead of 2(n-1)/n N per rank.
#include <algorithm>

#include "algorithms.h"

namespace lowcomm::comm {

void allreduceHierarchical(Exchange& ex, const Group& g, const AllreduceOptions& opts) {
  if (opts.node) {
    allreduceHierarchicalNode(ex, g, opts);
    return;
  }
  char* const buf = opts.buf;
  const size_t count = opts.count;
  const DType dt = opts.dt;
  const ReduceOp op = opts.op;
  const size_t seg_bytes = opts.segment_bytes;
  const int n = g.size();
  if (n == 1 || count == 0) return;
  const int gs = std::max(1, std::min(opts.group_size, n));
  const size_t es = dtypeSize(dt);
  const int my_group = g.me / gs;
  const int first = my_group * gs;
  Group local;
  for (int i = first; i < std::min(n, first + gs); ++i) local.ranks.push_back(g.ranks[i]);
  local.me = g.me - first;
  const int m = local.size();

  auto off = evenOffsets(count, m);
  const size_t seg = segmentElems(seg_bytes, es, off[1] - off[0]);
  ReduceScatterOptions rs;
  rs.buf = buf;
  rs.off = &off;
  rs.dt = dt;
  rs.op = op;
  rs.seg_elems = seg;
  rs.sub = 0;
  rs.tmp = opts.scratch->get(ringScratchBytes(off, es));
  ringReduceScatter(ex, local, rs);
  // Gather the reduced chunks on the leader.
  if (local.me == 0) {
    for (int c = 1; c < m; ++c) ex.irecv(local.peer(c), buf + off[c] * es, (off[c + 1] - off[c]) * es, ex.slot(1, 0));
  } else {
    ex.isend(local.peer(0), buf + off[local.me] * es, (off[local.me + 1] - off[local.me]) * es, ex.slot(1, 0));
  }
  ex.waitAll();
  if (local.me == 0) {
    Group leaders;
    for (int i = 0; i < n; i += gs) leaders.ranks.push_back(g.ranks[i]);
    leaders.me = my_group;
    AllreduceOptions ring = opts;
    ring.sub = 2;
    allreduceRing(ex, leaders, ring);
  }
  BroadcastOptions b;
  b.buf = buf;
  b.bytes = count * es;
  b.root = 0;
  b.segment_bytes = seg_bytes;
  b.sub = 4;
  broadcastTree(ex, local, b);
}

}  // namespace lowcomm::comm
