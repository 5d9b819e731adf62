// Ring allgather (and allgatherv: blocks may differ in size), segmented and pipelined: each
// received segment is forwarded at once. All receives land directly in the output.
#include <algorithm>

#include "algorithms.h"
#include "lowcomm/base/error.h"

namespace lowcomm::comm {

namespace {
size_t segFor(const std::vector<size_t>& off, size_t seg_bytes) {
  size_t max_len = 0;
  for (size_t c = 0; c + 1 < off.size(); ++c) max_len = std::max(max_len, off[c + 1] - off[c]);
  return segmentElems(seg_bytes, 1, max_len);
}
}  // namespace

// At step s member r receives block r-s-1 from its predecessor.
Posted postRingAllgather(Exchange& ex, const Group& g, const AllgatherOptions& opts) {
  char* const buf = opts.buf;
  const std::vector<size_t>& off = *opts.off_bytes;
  const uint32_t sub = opts.sub;
  const int n = g.size();
  const int r = g.me, prev = g.peer(r - 1);
  const size_t seg = segFor(off, opts.segment_bytes);
  Posted rq(std::max(0, n - 1));
  for (int step = 0; step < n - 1; ++step) {
    const int c = (((r - step - 1) % n) + n) % n;
    const size_t o = off[c], len = off[c + 1] - off[c];
    for (size_t k = 0, s = 0; s < len; ++k, s += seg)
      rq[step].push_back(ex.irecv(prev, buf + o + s, std::min(seg, len - s), ex.slot(sub, step, k)));
  }
  return rq;
}

void ringAllgather(Exchange& ex, const Group& g, const AllgatherOptions& opts) {
  char* const buf = opts.buf;
  const std::vector<size_t>& off = *opts.off_bytes;
  const uint32_t sub = opts.sub;
  const Posted* posted = opts.posted;
  const int n = g.size();
  if (n == 1) return;
  LC_ENFORCE_LE(static_cast<uint32_t>(n), kMaxSteps, "ring too large");  // steps 0 .. n - 2
  const int r = g.me, next = g.peer(r + 1);
  const size_t seg = segFor(off, opts.segment_bytes);
  Posted own;
  if (!posted) {
    own = postRingAllgather(ex, g, opts);
    posted = &own;
  }
  std::vector<int> sends;
  {
    const size_t o = off[r], len = off[r + 1] - off[r];
    for (size_t k = 0, s = 0; s < len; ++k, s += seg)
      sends.push_back(ex.isend(next, buf + o + s, std::min(seg, len - s), ex.slot(sub, 0, k)));
  }
  for (int step = 0; step < n - 1; ++step) {
    const int c = (((r - step - 1) % n) + n) % n;
    const size_t o = off[c], len = off[c + 1] - off[c];
    for (size_t k = 0, s = 0; s < len; ++k, s += seg) {
      ex.wait((*posted)[step][k]);
      if (step < n - 2) sends.push_back(ex.isend(next, buf + o + s, std::min(seg, len - s), ex.slot(sub, step + 1, k)));
    }
  }
  for (int s : sends) ex.wait(s);
}

}  // namespace lowcomm::comm
