// Ring allreduce = pipelined ring reduce-scatter + pipelined ring allgather. Each rank sends
// 2(n-1)/n of the buffer, the bandwidth optimum.
//
// The allgather's receives are posted before the reduce-scatter starts. That is safe: a block
// arrives in the allgather only after its owner finished reducing it, which needed our own
// reduce-scatter send of that block to have left our buffer first.
#include "algorithms.h"

namespace lowcomm::comm {

void allreduceRing(Exchange& ex, const Group& g, const AllreduceOptions& o) {
  const int n = g.size();
  if (n == 1 || o.count == 0) return;
  const size_t es = dtypeSize(o.dt);
  const auto off = evenOffsets(o.count, n);
  const size_t seg = segmentElems(o.segment_bytes, es, off[1] - off[0]);
  std::vector<size_t> off_bytes(off);
  for (auto& b : off_bytes) b *= es;
  AllgatherOptions ag;
  ag.buf = o.buf;
  ag.off_bytes = &off_bytes;
  ag.segment_bytes = seg * es;
  ag.sub = o.sub + 1;
  const Posted posted = postRingAllgather(ex, g, ag);
  ReduceScatterOptions rs;
  rs.buf = o.buf;
  rs.off = &off;
  rs.dt = o.dt;
  rs.op = o.op;
  rs.seg_elems = seg;
  rs.sub = o.sub;
  rs.tmp = o.scratch->get(ringScratchBytes(off, es));
  ringReduceScatter(ex, g, rs);
  ag.posted = &posted;
  ringAllgather(ex, g, ag);
  ex.waitAll();  // the reduce-scatter's last sends
}

}  // namespace lowcomm::comm
