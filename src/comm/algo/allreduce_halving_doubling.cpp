// Rabenseifner's allreduce: recursive-halving reduce-scatter, then recursive-doubling
// allgather, over the largest power of two p <= n. For other n, the first 2(n-p) ranks first
// fold pairwise (even sends to odd), and the odd ones return the result at the end.
// log2(p) steps each way: fewer, larger messages than the ring (good for small/medium sizes).
#include <vector>

#include "../reduce.h"
#include "algorithms.h"

namespace lowcomm::comm {

void allreduceHalvingDoubling(Exchange& ex, const Group& g, char* buf, size_t count, DType dt, ReduceOp op,
                              uint32_t sub) {
  const int n = g.size();
  if (n == 1 || count == 0) return;
  const size_t es = dtypeSize(dt);
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int rem = n - p;
  const int r = g.me;
  std::vector<char> tmp;
  uint32_t step = 0;

  int vr;  // rank among the p participants, -1 when folded away
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      ex.wait(ex.isend(g.peer(r + 1), buf, count * es, ex.slot(sub, step)));
      vr = -1;
    } else {
      tmp.resize(count * es);
      ex.wait(ex.irecv(g.peer(r - 1), tmp.data(), count * es, ex.slot(sub, step)));
      reduceInto(buf, tmp.data(), count, dt, op);
      vr = r / 2;
    }
  } else {
    vr = r - rem;
  }
  ++step;
  auto real = [&](int v) { return g.peer(v < rem ? 2 * v + 1 : v + rem); };

  if (vr >= 0) {
    tmp.resize((count / 2 + 1) * es);
    struct Range { size_t lo, hi; };
    std::vector<Range> kept;
    size_t lo = 0, hi = count;
    for (int mask = p / 2; mask >= 1; mask /= 2, ++step) {
      const int partner = vr ^ mask;
      const size_t mid = lo + (hi - lo) / 2;
      const bool lower = vr < partner;
      const size_t klo = lower ? lo : mid, khi = lower ? mid : hi;
      const size_t slo = lower ? mid : lo, shi = lower ? hi : mid;
      int s = ex.isend(real(partner), buf + slo * es, (shi - slo) * es, ex.slot(sub, step));
      int q = ex.irecv(real(partner), tmp.data(), (khi - klo) * es, ex.slot(sub, step));
      ex.wait(q);
      reduceInto(buf + klo * es, tmp.data(), khi - klo, dt, op);
      ex.wait(s);
      kept.push_back({lo, hi});
      lo = klo;
      hi = khi;
    }
    for (int mask = 1; mask < p; mask *= 2, ++step) {
      const int partner = vr ^ mask;
      const Range parent = kept.back();
      kept.pop_back();
      // The partner holds the other half of `parent`.
      const size_t olo = (lo == parent.lo) ? hi : parent.lo;
      const size_t ohi = (lo == parent.lo) ? parent.hi : lo;
      int s = ex.isend(real(partner), buf + lo * es, (hi - lo) * es, ex.slot(sub, step));
      int q = ex.irecv(real(partner), buf + olo * es, (ohi - olo) * es, ex.slot(sub, step));
      ex.wait(q);
      ex.wait(s);
      lo = parent.lo;
      hi = parent.hi;
    }
  } else {
    step += 2 * __builtin_ctz(static_cast<unsigned>(p));
  }

  if (r < 2 * rem) {
    if (r % 2 == 1) ex.wait(ex.isend(g.peer(r - 1), buf, count * es, ex.slot(sub, step)));
    else ex.wait(ex.irecv(g.peer(r + 1), buf, count * es, ex.slot(sub, step)));
  }
  ex.waitAll();
}

}  // namespace lowcomm::comm
