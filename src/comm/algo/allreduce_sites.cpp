// Allreduce for sites joined by a slow, high-latency WAN (ranks grouped by site: contiguous
// groups of `group_size` members of g; the last group may be smaller). The buffer is cut into
// pieces (sitesPieces); per piece:
//   1. ring reduce-scatter inside the site (LAN): local rank k holds chunk k of the piece,
//      reduced over the site;
//   2. WAN exchange: every rank sends its chunk straight to the ranks of the other sites holding
//      the same elements (with equal groups: the rank of the same local index; otherwise the
//      overlaps of the chunk layouts) and receives theirs: every rank's uplink carries a share
//      in parallel, as in rails, and one WAN message latency is paid per piece;
//   3. the received chunks are reduced in site order, ((c0 op c1) op c2)..., so every rank of
//      every site gets the same bits;
//   4. ring allgather inside the site (LAN).
// Pipelining: the WAN receives of every piece are posted at the start (so their ready
// notifications are on the wire before the data is sent), each piece's WAN send is posted as
// soon as its reduce-scatter is done, and the allgathers run in piece order afterwards: the LAN
// phases of later pieces (reduce-scatter) and earlier ones (allgather) overlap the WAN transfer,
// which is busy in both directions from the end of piece 0's reduce-scatter on.
//
// Bytes across the WAN per rank: (S - 1) N / group_size for S sites (the full chunk to every
// other site). For two sites that is the optimum (each site must receive N); for more sites a
// reduce-scatter across the rails would send less (2 (S-1)/S), at S - 1 more WAN latencies.
//
// Latency (small buffers, one piece): gs - 1 LAN steps, one WAN message, gs - 1 LAN steps.
// Gloo's TCP pairs move an unbound buffer only once the receiver's notice of its posted receive
// has reached the sender, so a message costs half a round trip (the data) after that notice:
// one RTT when both sides post their receive and send at the same moment (notice, then data),
// half an RTT when the receive was announced half an RTT earlier. Measured on the emulated WAN
// (50 ms RTT, 2 sites x 2 nodes, 4 KiB): this algorithm, its WAN receive posted at the start of
// the call, 56-67 ms (one exchange: one RTT plus the LAN steps); hier and rails, whose second
// WAN step's receives were announced during the first, 80-88 ms (1.6-1.8 RTT for two steps),
// the ring 110-123 ms. Below one RTT per call needs receives posted before the call: the WAN
// messages go through Exchange::isendEager / irecvEager, which the real executor delivers from
// receives kept posted between calls (src/comm/eager.h) when they are small enough.
//
// Slots: subs 0 .. kSitesMaxPieces - 1: piece p's reduce-scatter; kSitesMaxPieces + p: its
// allgather; 2 kSitesMaxPieces: the WAN exchange (step = piece). Messages between one pair of
// ranks in one piece are at most one, so (sender, receiver, slot) is unique.
#include <algorithm>

#include "algorithms.h"

namespace lowcomm::comm {

size_t sitesPieces(size_t bytes) {
  return std::clamp<size_t>(bytes / kSitesMinPieceBytes, 1, kSitesMaxPieces);
}

namespace {

// Where piece p's chunks live: site t's local rank k owns elements [at(t, k), at(t, k + 1)).
struct Layout {
  int n = 0, gs = 0;
  size_t piece_begin = 0, piece_len = 0;
  int sites() const { return (n + gs - 1) / gs; }
  int siteSize(int t) const { return std::min(gs, n - t * gs); }
  size_t at(int t, int k) const { return piece_begin + evenOffsets(piece_len, siteSize(t))[k]; }
};

struct Range {
  size_t lo = 0, hi = 0;
  size_t len() const { return hi > lo ? hi - lo : 0; }
};

Range overlap(Range a, Range b) { return {std::max(a.lo, b.lo), std::min(a.hi, b.hi)}; }

// The requests of one piece's WAN exchange, and where its contributions land: site t's share of
// this rank's chunk at recv + t * chunk elements (t != own site).
struct WanPiece {
  std::vector<int> sends, recvs;
  Range mine;
  char* recv = nullptr;
};

// Posts this rank's receives of piece p from every other site's ranks.
void postWanRecvs(Exchange& ex, const Group& g, const Layout& L, int site, uint32_t p, size_t es, WanPiece& w) {
  const size_t stride = w.mine.len() * es;
  for (int t = 0; t < L.sites(); ++t) {
    if (t == site) continue;
    for (int q = 0; q < L.siteSize(t); ++q) {
      const Range o = overlap(w.mine, {L.at(t, q), L.at(t, q + 1)});
      if (o.len() == 0) continue;
      char* dst = w.recv + t * stride + (o.lo - w.mine.lo) * es;
      w.recvs.push_back(ex.irecvEager(g.peer(t * L.gs + q), dst, o.len() * es, ex.slot(2 * kSitesMaxPieces, p)));
    }
  }
}

// Sends this rank's site-reduced chunk of piece p to the ranks of other sites owning its parts.
void postWanSends(Exchange& ex, const Group& g, const Layout& L, int site, char* buf, uint32_t p, size_t es,
                  WanPiece& w) {
  for (int t = 0; t < L.sites(); ++t) {
    if (t == site) continue;
    for (int q = 0; q < L.siteSize(t); ++q) {
      const Range o = overlap(w.mine, {L.at(t, q), L.at(t, q + 1)});
      if (o.len() == 0) continue;
      w.sends.push_back(ex.isendEager(g.peer(t * L.gs + q), buf + o.lo * es, o.len() * es, ex.slot(2 * kSitesMaxPieces, p)));
    }
  }
}

// buf's chunk becomes ((c0 op c1) op c2)... over the sites, c_site being buf itself.
void reduceInSiteOrder(Exchange& ex, const WanPiece& w, int sites, int site, char* buf, DType dt, ReduceOp op) {
  const size_t es = dtypeSize(dt), len = w.mine.len(), stride = len * es;
  char* own = buf + w.mine.lo * es;
  if (len == 0 || sites == 1) return;
  if (site <= 1) {  // c0 op c1 == c1 op c0 bit for bit (sum, prod, min, max commute)
    ex.reduce(own, w.recv + (1 - site) * stride, len, dt, op);
    for (int t = 2; t < sites; ++t) ex.reduce(own, w.recv + t * stride, len, dt, op);
    return;
  }
  char* acc = w.recv;  // site 0's contribution
  for (int t = 1; t < sites; ++t) ex.reduce(acc, t == site ? own : w.recv + t * stride, len, dt, op);
  ex.copy(own, acc, stride);
}

}  // namespace

void allreduceSites(Exchange& ex, const Group& g, const AllreduceOptions& opts) {
  const int n = g.size();
  if (n == 1 || opts.count == 0) return;
  const size_t es = dtypeSize(opts.dt);
  Layout L;
  L.n = n;
  L.gs = std::max(1, std::min(opts.group_size, n));
  const int site = g.me / L.gs, k = g.me - site * L.gs, m = L.siteSize(site);
  Group local = Group::range(site * L.gs, m, g.me);
  for (auto& r : local.ranks) r = g.ranks[r];

  const auto pieces = evenOffsets(opts.count, static_cast<int>(sitesPieces(opts.count * es)));
  const int P = static_cast<int>(pieces.size()) - 1;
  const size_t max_piece = pieces[1] - pieces[0];
  const size_t max_chunk = evenOffsets(max_piece, m)[1];
  const size_t seg = segmentElems(opts.segment_bytes, es, max_chunk);
  // Scratch: the ring reduce-scatter's slices (reused piece after piece), then each piece's WAN
  // landing area of `sites` chunk slots.
  const size_t rs_bytes = (static_cast<size_t>(m) - 1) * max_chunk * es;
  const size_t wan_bytes = static_cast<size_t>(L.sites()) * max_chunk * es;
  char* scratch = opts.scratch->get(rs_bytes + P * wan_bytes);

  std::vector<WanPiece> wan(P);
  std::vector<std::vector<size_t>> off(P);
  for (int p = 0; p < P; ++p) {
    L.piece_begin = pieces[p];
    L.piece_len = pieces[p + 1] - pieces[p];
    off[p] = evenOffsets(L.piece_len, m);
    for (auto& o : off[p]) o += L.piece_begin;
    wan[p].mine = {off[p][k], off[p][k + 1]};
    wan[p].recv = scratch + rs_bytes + p * wan_bytes;
    postWanRecvs(ex, g, L, site, static_cast<uint32_t>(p), es, wan[p]);
  }
  for (int p = 0; p < P; ++p) {
    ReduceScatterOptions rs;
    rs.buf = opts.buf;
    rs.off = &off[p];
    rs.dt = opts.dt;
    rs.op = opts.op;
    rs.seg_elems = seg;
    rs.sub = static_cast<uint32_t>(p);
    rs.tmp = scratch;
    ringReduceScatter(ex, local, rs);
    L.piece_begin = pieces[p];
    L.piece_len = pieces[p + 1] - pieces[p];
    postWanSends(ex, g, L, site, opts.buf, static_cast<uint32_t>(p), es, wan[p]);
  }
  for (int p = 0; p < P; ++p) {
    for (int r : wan[p].recvs) ex.wait(r);
    for (int s : wan[p].sends) ex.wait(s);  // the chunk is reduced in place: its sends must be out
    reduceInSiteOrder(ex, wan[p], L.sites(), site, opts.buf, opts.dt, opts.op);
    std::vector<size_t> off_bytes(off[p]);
    for (auto& o : off_bytes) o *= es;
    AllgatherOptions ag;
    ag.buf = opts.buf;
    ag.off_bytes = &off_bytes;
    ag.segment_bytes = seg * es;
    ag.sub = kSitesMaxPieces + static_cast<uint32_t>(p);
    ringAllgather(ex, local, ag);
  }
  ex.waitAll();
}

}  // namespace lowcomm::comm
