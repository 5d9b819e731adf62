// Ring reduce-scatter, segmented and pipelined: a segment reduced at step s is forwarded at
// once for step s+1, so sending, receiving and reducing overlap. Every step's receives are
// posted up front, each into its own scratch slice.
#include <algorithm>

#include "algorithms.h"
#include "lowcomm/base/error.h"

namespace lowcomm::comm {

Group Group::world(int rank, int size) {
  Group g;
  for (int i = 0; i < size; ++i) g.ranks.push_back(i);
  g.me = rank;
  return g;
}

Group Group::range(int first, int count, int me_global) {
  Group g;
  for (int i = 0; i < count; ++i) g.ranks.push_back(first + i);
  g.me = me_global - first;
  return g;
}

std::vector<size_t> evenOffsets(size_t count, int n) {
  std::vector<size_t> off(n + 1, 0);
  const size_t base = count / n, rem = count % n;
  for (int i = 0; i < n; ++i) off[i + 1] = off[i] + base + (static_cast<size_t>(i) < rem ? 1 : 0);
  return off;
}

size_t segmentElems(size_t segment_bytes, size_t es, size_t max_chunk_elems) {
  size_t seg = std::max<size_t>(1, segment_bytes / es);
  const size_t min_seg = max_chunk_elems / (kMaxSegments - 1) + 1;
  return std::max(seg, min_seg);
}

namespace {
size_t maxChunk(const std::vector<size_t>& off) {
  size_t m = 0;
  for (size_t c = 0; c + 1 < off.size(); ++c) m = std::max(m, off[c + 1] - off[c]);
  return m;
}
}  // namespace

size_t ringScratchBytes(const std::vector<size_t>& off, size_t es) {
  return (off.size() - 2) * maxChunk(off) * es;
}

void ringReduceScatter(Exchange& ex, const Group& g, const ReduceScatterOptions& opts) {
  char* const buf = opts.buf;
  const std::vector<size_t>& off = *opts.off;
  const DType dt = opts.dt;
  const ReduceOp op = opts.op;
  const size_t seg_elems = opts.seg_elems;
  const uint32_t sub = opts.sub;
  char* const tmp = opts.tmp;
  const int n = g.size();
  if (n == 1) return;
  LC_ENFORCE_LE(static_cast<uint32_t>(n), kMaxSteps, "ring too large");  // steps 0 .. n - 2
  const int r = g.me;
  const int next = g.peer(r + 1), prev = g.peer(r - 1);
  const size_t es = dtypeSize(dt);
  auto chunk = [&](int c) { c = ((c % n) + n) % n; return std::make_pair(off[c], off[c + 1] - off[c]); };
  const size_t stride = maxChunk(off) * es;

  // At step s we receive chunk r-s-2 (partially reduced by the s+1 ranks before us).
  std::vector<std::vector<int>> rq(n - 1);
  for (int step = 0; step < n - 1; ++step) {
    auto [o, len] = chunk(r - step - 2);
    for (size_t k = 0, s = 0; s < len; ++k, s += seg_elems)
      rq[step].push_back(ex.irecv(prev, tmp + step * stride + s * es, std::min(seg_elems, len - s) * es,
                                  ex.slot(sub, step, k)));
  }
  {  // Step 0 sends our own contribution of chunk r-1.
    auto [o, len] = chunk(r - 1);
    for (size_t k = 0, s = 0; s < len; ++k, s += seg_elems)
      ex.isend(next, buf + (o + s) * es, std::min(seg_elems, len - s) * es, ex.slot(sub, 0, k));
  }
  for (int step = 0; step < n - 1; ++step) {
    auto [o, len] = chunk(r - step - 2);
    for (size_t k = 0, s = 0; s < len; ++k, s += seg_elems) {
      const size_t m = std::min(seg_elems, len - s);
      ex.wait(rq[step][k]);
      ex.reduce(buf + (o + s) * es, tmp + step * stride + s * es, m, dt, op);
      if (step < n - 2) ex.isend(next, buf + (o + s) * es, m * es, ex.slot(sub, step + 1, k));
    }
  }
}

}  // namespace lowcomm::comm
