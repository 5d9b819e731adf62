// Ring allreduce = pipelined ring reduce-scatter + pipelined ring allgather. Each rank sends
// 2(n-1)/n of the buffer, the bandwidth optimum.
#include "algorithms.h"

namespace lowcomm::comm {

void allreduceRing(Exchange& ex, const Group& g, char* buf, size_t count, DType dt, ReduceOp op,
                   size_t seg_bytes, uint32_t sub) {
  const int n = g.size();
  if (n == 1 || count == 0) return;
  const size_t es = dtypeSize(dt);
  auto off = evenOffsets(count, n);
  const size_t seg = segmentElems(seg_bytes, es, off[1] - off[0]);
  ringReduceScatter(ex, g, buf, off, dt, op, seg, sub);
  for (auto& o : off) o *= es;
  ringAllgather(ex, g, buf, off, seg * es, sub + 1);
}

}  // namespace lowcomm::comm
