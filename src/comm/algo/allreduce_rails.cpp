// Two-level allreduce in which every rank of a node crosses the network, each on its own rail
// (NCCL's multi-ring hierarchy; the algorithm a rail-optimised cluster, one NIC per local rank,
// needs): 1. ring reduce-scatter inside each group (node) of `group_size`, leaving chunk j reduced
// over the node on local rank j; 2. ring allreduce of chunk j across the groups among the local
// ranks j (rail j); 3. ring allgather of the chunks inside each group. Each rank sends
// 2(m-1)/m N inside its node and 2(g-1)/g N/m across nodes: the node's N/m per rank spread over
// m NICs, where the hierarchical algorithm's leader sends 2(g-1)/g N over one. Groups of unequal
// size (n not a multiple of group_size) cannot pair their chunks: that case runs the hierarchical
// algorithm.
#include <algorithm>

#include "algorithms.h"

namespace lowcomm::comm {

void allreduceRails(Exchange& ex, const Group& g, const AllreduceOptions& opts) {
  char* const buf = opts.buf;
  const size_t count = opts.count;
  const DType dt = opts.dt;
  const ReduceOp op = opts.op;
  const size_t seg_bytes = opts.segment_bytes;
  const int n = g.size();
  if (n == 1 || count == 0) return;
  const int gs = std::max(1, std::min(opts.group_size, n));
  if (n % gs != 0) {
    allreduceHierarchical(ex, g, opts);
    return;
  }
  const size_t es = dtypeSize(dt);
  const int first = g.me / gs * gs, j = g.me - first;
  Group local;
  for (int i = first; i < first + gs; ++i) local.ranks.push_back(g.ranks[i]);
  local.me = j;
  Group rail;
  for (int i = j; i < n; i += gs) rail.ranks.push_back(g.ranks[i]);
  rail.me = g.me / gs;

  const auto off = evenOffsets(count, gs);
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
  ex.waitAll();
  AllreduceOptions ring = opts;
  ring.buf = buf + off[j] * es;
  ring.count = off[j + 1] - off[j];
  ring.sub = 2;
  allreduceRing(ex, rail, ring);
  ex.waitAll();
  std::vector<size_t> off_bytes(off);
  for (auto& o : off_bytes) o *= es;
  AllgatherOptions ag;
  ag.buf = buf;
  ag.off_bytes = &off_bytes;
  ag.segment_bytes = seg * es;
  ag.sub = 4;
  ringAllgather(ex, local, ag);
  ex.waitAll();
}

}  // namespace lowcomm::comm
