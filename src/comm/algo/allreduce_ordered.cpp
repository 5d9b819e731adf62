// Deterministic allreduce: member c receives chunk c from everyone (pairwise exchange), sums
// the contributions in rank order 0..n-1, then a ring allgather spreads the result. The sum is
// the same whatever the timing, algorithm choice or topology; same volume as the ring.
#include <algorithm>
#include <vector>

#include "algorithms.h"

namespace lowcomm::comm {

void allreduceOrdered(Exchange& ex, const Group& g, const AllreduceOptions& opts) {
  char* const buf = opts.buf;
  const size_t count = opts.count;
  const DType dt = opts.dt;
  const ReduceOp op = opts.op;
  const int n = g.size();
  if (n == 1 || count == 0) return;
  const size_t es = dtypeSize(dt);
  const auto off = evenOffsets(count, n);
  const int r = g.me;
  const size_t mine = off[r + 1] - off[r];
  char* parts = opts.scratch->get(static_cast<size_t>(n) * mine * es + 1);
  for (int j = 0; j < n; ++j) {
    if (j == r) continue;
    ex.isend(g.peer(j), buf + off[j] * es, (off[j + 1] - off[j]) * es, ex.slot(0, 0));
    ex.irecv(g.peer(j), parts + j * mine * es, mine * es, ex.slot(0, 0));
  }
  ex.waitAll();
  ex.copy(parts + r * mine * es, buf + off[r] * es, mine * es);
  char* acc = buf + off[r] * es;
  ex.copy(acc, parts, mine * es);
  for (int j = 1; j < n; ++j) ex.reduce(acc, parts + j * mine * es, mine, dt, op);
  std::vector<size_t> off_bytes(off);
  for (auto& o : off_bytes) o *= es;
  AllgatherOptions ag;
  ag.buf = buf;
  ag.off_bytes = &off_bytes;
  ag.segment_bytes = opts.segment_bytes;
  ag.sub = 1;
  ringAllgather(ex, g, ag);
}

}  // namespace lowcomm::comm
