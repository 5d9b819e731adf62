// Ring allgather (and allgatherv: blocks may differ in size), segmented and pipelined: each
// received segment is forwarded at once.
#include <algorithm>

#include "algorithms.h"
#include "lowcomm/base/error.h"

namespace lowcomm::comm {

void ringAllgather(Exchange& ex, const Group& g, char* buf, const std::vector<size_t>& off, size_t seg_bytes,
                   uint32_t sub) {
  const int n = g.size();
  if (n == 1) return;
  LC_ENFORCE_LT(static_cast<uint32_t>(n), kMaxSteps, "ring too large");
  const int r = g.me;
  const int next = g.peer(r + 1), prev = g.peer(r - 1);
  size_t max_len = 0;
  for (int c = 0; c < n; ++c) max_len = std::max(max_len, off[c + 1] - off[c]);
  const size_t seg = segmentElems(seg_bytes, 1, max_len);
  auto block = [&](int c) { c = ((c % n) + n) % n; return std::make_pair(off[c], off[c + 1] - off[c]); };

  {
    auto [o, len] = block(r);
    for (size_t k = 0, s = 0; s < len; ++k, s += seg)
      ex.isend(next, buf + o + s, std::min(seg, len - s), ex.slot(sub, 0, k));
  }
  std::vector<int> rq;
  for (int step = 0; step < n - 1; ++step) {
    auto [o, len] = block(r - step - 1);
    rq.clear();
    for (size_t k = 0, s = 0; s < len; ++k, s += seg)
      rq.push_back(ex.irecv(prev, buf + o + s, std::min(seg, len - s), ex.slot(sub, step, k)));
    for (size_t k = 0, s = 0; s < len; ++k, s += seg) {
      ex.wait(rq[k]);
      if (step < n - 2) ex.isend(next, buf + o + s, std::min(seg, len - s), ex.slot(sub, step + 1, k));
    }
  }
  ex.waitAll();
}

}  // namespace lowcomm::comm
