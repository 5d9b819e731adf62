// Ring allreduce = pipelined ring reduce-scatter + pipelined ring allgather. Each rank sends
// 2(n-1)/n of the buffer, the bandwidth optimum.
//
// The allgather's receives are posted before the reduce-scatter starts. That is safe: a block
// arrives in the allgather only after its owner finished reducing it, which needed our own
// reduce-scatter send of that block to have left our buffer first.
#include "algorithms.h"

namespace lowcomm::comm {

void allreduceRing(Exchange& ex, const Group& g, char* buf, size_t count, DType dt, ReduceOp op,
                   size_t seg_bytes, uint32_t sub, Scratch& scratch) {
  const int n = g.size();
  if (n == 1 || count == 0) return;
  const size_t es = dtypeSize(dt);
  const auto off = evenOffsets(count, n);
  const size_t seg = segmentElems(seg_bytes, es, off[1] - off[0]);
  std::vector<size_t> off_bytes(off);
  for (auto& o : off_bytes) o *= es;
  const Posted ag = postRingAllgather(ex, g, buf, off_bytes, seg * es, sub + 1);
  ringReduceScatter(ex, g, buf, off, dt, op, seg, sub, scratch.get(ringScratchBytes(off, es)));
  ringAllgather(ex, g, buf, off_bytes, seg * es, sub + 1, &ag);
}

}  // namespace lowcomm::comm
