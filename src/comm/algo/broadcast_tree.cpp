// Binomial-tree broadcast, segmented: a member forwards each segment to its children as soon
// as it arrives, so a large message streams down the tree instead of hopping whole.
#include <algorithm>
#include <vector>

#include "algorithms.h"

namespace lowcomm::comm {

void broadcastTree(Exchange& ex, const Group& g, const BroadcastOptions& o) {
  char* const buf = o.buf;
  const size_t bytes = o.bytes, seg_bytes = o.segment_bytes;
  const int root = o.root;
  const uint32_t sub = o.sub;
  const int n = g.size();
  if (n == 1 || bytes == 0) return;
  const int vr = (g.me - root + n) % n;
  int high = 0;  // highest power of two <= vr
  if (vr > 0) high = 1 << (31 - __builtin_clz(static_cast<unsigned>(vr)));
  std::vector<int> children;
  for (int m = vr == 0 ? 1 : 2 * high; vr + m < n; m *= 2) children.push_back(g.peer(vr + m + root));
  const size_t seg = segmentElems(seg_bytes, 1, bytes);
  std::vector<int> rq;
  if (vr > 0) {
    const int parent = g.peer(vr - high + root);
    for (size_t k = 0, s = 0; s < bytes; ++k, s += seg)
      rq.push_back(ex.irecv(parent, buf + s, std::min(seg, bytes - s), ex.slot(sub, 0, k)));
  }
  for (size_t k = 0, s = 0; s < bytes; ++k, s += seg) {
    if (vr > 0) ex.wait(rq[k]);
    for (int c : children) ex.isend(c, buf + s, std::min(seg, bytes - s), ex.slot(sub, 0, k));
  }
  ex.waitAll();
}

}  // namespace lowcomm::comm
