// Alltoall by pairwise exchange: every block goes straight to its owner, n-1 messages each way.

#include "algorithms.h"

namespace lowcomm::comm {

void alltoallPairwise(Exchange& ex, const Group& g, const AlltoallOptions& o) {
  const char* const send = o.send;
  char* const recv = o.recv;
  const size_t block_bytes = o.block_bytes;
  const uint32_t sub = o.sub;
  const int n = g.size();
  const int r = g.me;
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n, from = (r - s + n) % n;
    ex.irecv(g.peer(from), recv + from * block_bytes, block_bytes, ex.slot(sub, 0));
    ex.isend(g.peer(to), send + to * block_bytes, block_bytes, ex.slot(sub, 0));
  }
  if (block_bytes) ex.copy(recv + r * block_bytes, send + r * block_bytes, block_bytes);
  ex.waitAll();
}

}  // namespace lowcomm::comm
