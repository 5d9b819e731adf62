// Pipelined chain broadcast: the root streams segments to the next member, which forwards each
// one as soon as it arrives, down a chain in rank order from the root. Every link carries the
// buffer once (the binomial tree's root sends it log2(n) times), so for k segments the time is
// (k + n - 2) segment times: k / (k + n - 2) of the link rate.
#include <algorithm>
#include <vector>

#include "algorithms.h"

namespace lowcomm::comm {

size_t chainSegmentBytes(size_t bytes, int n, size_t seg_bytes) {
  if (n < 2) return std::max<size_t>(bytes, 1);
  // ~10 segments per hop keep the pipeline's fill and drain (n - 2 segment times) under ~10 %
  // of the transfer; at least kChainMinSegment so the per-message cost stays small.
  const size_t want = bytes / (10 * static_cast<size_t>(n - 1));
  const size_t seg = std::clamp(want, std::min(kChainMinSegment, seg_bytes), std::max(seg_bytes, kChainMinSegment));
  return std::max(seg, bytes / (kMaxSegments - 1) + 1);
}

void broadcastChain(Exchange& ex, const Group& g, const BroadcastOptions& o) {
  char* const buf = o.buf;
  const size_t bytes = o.bytes, seg_bytes = o.segment_bytes;
  const int root = o.root;
  const uint32_t sub = o.sub;
  const int n = g.size();
  if (n == 1 || bytes == 0) return;
  const int vr = (g.me - root + n) % n;  // position in the chain, the root first
  const size_t seg = chainSegmentBytes(bytes, n, seg_bytes);
  const bool forwards = vr + 1 < n;
  const int next = forwards ? g.peer((vr + 1 + root) % n) : -1;
  std::vector<int> rq;
  if (vr > 0) {  // every segment's receive posted first (see algorithms.h)
    const int prev = g.peer((vr - 1 + root) % n);
    for (size_t k = 0, s = 0; s < bytes; ++k, s += seg)
      rq.push_back(ex.irecv(prev, buf + s, std::min(seg, bytes - s), ex.slot(sub, 0, static_cast<uint32_t>(k))));
  }
  for (size_t k = 0, s = 0; s < bytes; ++k, s += seg) {
    if (vr > 0) ex.wait(rq[k]);
    if (forwards) ex.isend(next, buf + s, std::min(seg, bytes - s), ex.slot(sub, 0, static_cast<uint32_t>(k)));
  }
  ex.waitAll();
}

}  // namespace lowcomm::comm
