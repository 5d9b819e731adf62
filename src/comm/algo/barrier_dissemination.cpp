// Dissemination barrier: ceil(log2 n) rounds; in round k each member signals member +2^k and
// waits for member -2^k. No member leaves before all have entered.
#include "algorithms.h"

namespace lowcomm::comm {

void barrierDissemination(Exchange& ex, const Group& g, const BarrierOptions& o) {
  const uint32_t sub = o.sub;
  const int n = g.size();
  char out = 1, in = 0;
  uint32_t round = 0;
  for (int dist = 1; dist < n; dist *= 2, ++round) {
    int s = ex.isend(g.peer(g.me + dist), &out, 1, ex.slot(sub, round));
    int q = ex.irecv(g.peer(g.me - dist), &in, 1, ex.slot(sub, round));
    ex.wait(q);
    ex.wait(s);
  }
  ex.waitAll();
}

}  // namespace lowcomm::comm
