// Rabenseifner's allreduce: recursive-halving reduce-scatter, then recursive-doubling
// allgather, over the largest power of two p <= n. For other n, the first 2(n-p) ranks first
// fold pairwise (even sends to odd), and the odd ones return the result at the end.
// log2(p) steps each way: fewer, larger messages than the ring (good for small/medium sizes).
//
// Every receive is posted up front (halving steps into disjoint scratch slices, doubling steps
// straight into the buffer): data for a region only arrives after the partner reduced it, which
// needed our own send of that region to have left the buffer.
#include <vector>

#include "algorithms.h"

namespace lowcomm::comm {

namespace {
struct Range {
  size_t lo, hi;
};
}  // namespace

void allreduceHalvingDoubling(Exchange& ex, const Group& g, const AllreduceOptions& opts) {
  char* const buf = opts.buf;
  const size_t count = opts.count;
  const DType dt = opts.dt;
  const ReduceOp op = opts.op;
  const uint32_t sub = opts.sub;
  Scratch& scratch = *opts.scratch;
  const int n = g.size();
  if (n == 1 || count == 0) return;
  const size_t es = dtypeSize(dt);
  int p = 1, logp = 0;
  while (p * 2 <= n) p *= 2, ++logp;
  const int rem = n - p;
  const int r = g.me;
  // Scratch: the folded-in buffer (count) + one slice per halving step; the slices add up to
  // ceil(c/2) + ceil(c/4) + ... <= count + logp.
  char* tmp = scratch.get((2 * count + logp + 1) * es);
  const uint32_t last_step = 1 + 2 * logp;

  const bool folds = r < 2 * rem;
  const int vr = folds ? (r % 2 == 0 ? -1 : r / 2) : r - rem;  // -1: folded away
  auto real = [&](int v) { return g.peer(v < rem ? 2 * v + 1 : v + rem); };

  if (vr < 0) {  // even folding rank: hand our data over, get the result back at the end
    int q = ex.irecv(g.peer(r + 1), buf, count * es, ex.slot(sub, last_step));
    ex.wait(ex.isend(g.peer(r + 1), buf, count * es, ex.slot(sub, 0)));
    ex.wait(q);
    ex.waitAll();
    return;
  }

  // Plan the halving: the range kept after each step, and what the partner sends us.
  // given[i] is the half of kept[i] handed to the partner at step i (and received back when
  // doubling).
  std::vector<Range> kept{{0, count}}, given;
  std::vector<int> partner;
  for (int mask = p / 2; mask >= 1; mask /= 2) {
    const Range cur = kept.back();
    const size_t mid = cur.lo + (cur.hi - cur.lo) / 2;
    const int pv = vr ^ mask;
    partner.push_back(real(pv));
    kept.push_back(vr < pv ? Range{cur.lo, mid} : Range{mid, cur.hi});
    given.push_back(vr < pv ? Range{mid, cur.hi} : Range{cur.lo, mid});
  }
  // Post every receive now.
  int fold_q = -1;
  if (folds) fold_q = ex.irecv(g.peer(r - 1), tmp, count * es, ex.slot(sub, 0));
  std::vector<int> half_q(logp), dbl_q(logp);
  size_t slice = count;  // scratch offset (elements) of the next halving slice
  std::vector<size_t> slice_at(logp);
  for (int i = 0; i < logp; ++i) {
    const Range k = kept[i + 1];
    slice_at[i] = slice;
    half_q[i] = ex.irecv(partner[i], tmp + slice * es, (k.hi - k.lo) * es, ex.slot(sub, 1 + i));
    slice += k.hi - k.lo;
  }
  for (int i = logp - 1; i >= 0; --i) {  // doubling: receive the other half of kept[i]
    const Range other = given[i];
    dbl_q[i] = ex.irecv(partner[i], buf + other.lo * es, (other.hi - other.lo) * es, ex.slot(sub, 1 + logp + (logp - 1 - i)));
  }

  if (folds) {
    ex.wait(fold_q);
    ex.reduce(buf, tmp, count, dt, op);
  }
  for (int i = 0; i < logp; ++i) {
    const Range k = kept[i + 1], send = given[i];
    ex.isend(partner[i], buf + send.lo * es, (send.hi - send.lo) * es, ex.slot(sub, 1 + i));
    ex.wait(half_q[i]);
    ex.reduce(buf + k.lo * es, tmp + slice_at[i] * es, k.hi - k.lo, dt, op);
  }
  for (int i = logp - 1; i >= 0; --i) {
    const Range mine = kept[i + 1];
    ex.isend(partner[i], buf + mine.lo * es, (mine.hi - mine.lo) * es, ex.slot(sub, 1 + logp + (logp - 1 - i)));
    ex.wait(dbl_q[i]);
  }
  if (folds) ex.isend(g.peer(r - 1), buf, count * es, ex.slot(sub, last_step));
  ex.waitAll();
}

}  // namespace lowcomm::comm
