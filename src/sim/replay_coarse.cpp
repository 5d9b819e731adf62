// The replay's coarsened calls (CoarseOptions): a large ring (or rails' rings, or hier's ring of
// node leaders) runs on a sample of the ranks, its time and bytes scaled to the full call.
#include <algorithm>
#include <cstdint>

#include "lowcomm/comm/dtype.h"
#include "replay_state.h"
#include "run_call.h"

namespace lowcomm::sim::replay_detail {

namespace {

// The ranks a coarsened call samples together: hier's and rails' node groups, else single ranks.
int coarseUnit(const Shared& sh, const CallSpec& c) {
  const bool nodes = c.algo == comm::Algo::hierarchical || c.algo == comm::Algo::rails;
  return nodes ? (c.group_size > 0 ? c.group_size : sh.platform.ppn) : 1;
}

}  // namespace

bool coarsens(Shared& sh, const CallSpec& c) {
  const int n = sh.net.world();
  if (sh.coarse.max_ring <= 1 || !c.ranks.empty()) return false;
  if (c.algo == comm::Algo::ring)
    return n > sh.coarse.max_ring && (c.op == "allgatherv" || (c.op == "allreduce" && !sh.net.ina));
  if (c.op != "allreduce") return false;
  if (c.algo == comm::Algo::rails) {  // one ring per local index across the nodes
    const int unit = coarseUnit(sh, c);
    // Each rail's share must give every node of its ring an element (else rails send less than a
    // sample scaled up would: small calls run exact, cheaply).
    const uint64_t count = c.bytes / comm::dtypeSize(c.dtype);
    return !sh.net.ina && unit > 1 && n % unit == 0 && n / unit > sh.coarse.max_ring &&
           count / static_cast<uint64_t>(unit) >= static_cast<uint64_t>(n / unit);
  }
  if (c.algo != comm::Algo::hierarchical) return false;
  // hier: a ring of node leaders, each node's part in its shared memory (where the leaders'
  // bytes are all the node sends).
  const int unit = coarseUnit(sh, c);
  return unit > 1 && n % unit == 0 && n / unit > sh.coarse.max_ring &&
         runsInNodeMemory(sh.net, comm::Group::world(0, n), c, sh.platform.ppn);
}

// The call on every k-th rank (hier: every k-th node), scaled (CoarseOptions); the others wait
// for it. Every rank counts the full ring's bytes and messages as its sample twin did (the rank
// of the first node with its local index), sent to its ring successor (hier: a leader to the
// next node's leader, the others, which send nothing, to their leader).
void runCoarse(Shared& sh, int rank, int thread, const CallSpec& c) {
  const int n = sh.net.world(), unit = coarseUnit(sh, c), units = n / unit;
  const int k = (units + sh.coarse.max_ring - 1) / sh.coarse.max_ring;
  const int local = rank % unit;
  const int next = local == 0 ? (rank + unit) % n : rank - local;
  const int node_peer = rank - local + (local == 0 ? 1 : 0);  // as SimNode's
  CoarseCall& cc = sh.coarse_calls[{thread, sh.state[rank].coarse_calls[thread]++}];
  cc.size(unit);
  if (rank / unit % k != 0) {
    cc.done[local]->acquire();
    sh.net.count(rank, next, cc.sent[local], cc.messages[local]);
    if (cc.node_sent[local] > 0) sh.net.count(rank, node_peer, cc.node_sent[local], cc.node_messages[local]);
    return;
  }
  CallSpec s = c;
  for (int u = 0; u < units; u += k)
    for (int j = 0; j < unit; ++j) s.ranks.push_back(u * unit + j);
  const auto m = static_cast<uint64_t>(s.ranks.size() / unit);
  const uint64_t es = comm::dtypeSize(c.dtype);
  if (c.op == "allreduce") {  // the same chunk per ring step
    s.bytes = std::max<uint64_t>(1, c.bytes / es / static_cast<uint64_t>(units)) * m * es;
  } else {
    const uint64_t share = c.rank_bytes.empty() ? c.bytes / static_cast<uint64_t>(n) : c.rank_bytes[0];
    s.rank_bytes.assign(m, share);
    s.bytes = share * m;
  }
  // The call's time is scaled, not the wait for the sample's last rank to arrive (which the full
  // call waits once too): the sample starts together.
  if (!cc.start) cc.start = sg4::Barrier::create(static_cast<unsigned>(s.ranks.size()));
  cc.start->wait();
  const double t0 = sg4::Engine::get_clock();
  const CallBytes b = runGroupCall(sh, rank, thread, s, false);
  const double scale = static_cast<double>(units - 1) / static_cast<double>(m - 1);
  // The ring's steps scale with the ranks; the host's time per call (waited in runCall) does not.
  // hier's node steps ran on a buffer m / units of the real one: they scale by units / m.
  const double per_call = sh.net.callOverhead(c.op + "/" + comm::algoName(c.algo));
  const double took = std::max(0.0, sg4::Engine::get_clock() - t0 - per_call);
  const double node_scale = static_cast<double>(units) / static_cast<double>(m);
  // hier: the leader's time is ring, then node steps (its node_s, waits for its node included); a
  // member's wait for the leader's ring cannot be told from node time, so members end with their
  // leader, as the full call's last node barrier makes them.
  if (local == 0) sg4::this_actor::sleep_for(std::max(0.0, took * (scale - 1) - b.node_s * (scale - node_scale)));
  if (unit > 1) {
    auto& end = cc.ends[rank / unit];
    if (!end) end = sg4::Barrier::create(static_cast<unsigned>(unit));
    end->wait();
  }
  const auto scaled = [scale](uint64_t v) { return static_cast<uint64_t>(static_cast<double>(v) * scale + 0.5); };
  // Node steps move the buffer: their bytes scale with it (their number does not).
  const auto node_sent = static_cast<uint64_t>(static_cast<double>(b.node_sent) * units / static_cast<double>(m) + 0.5);
  sh.net.count(rank, next, scaled(b.sent), scaled(b.messages));
  if (node_sent > 0) sh.net.count(rank, node_peer, node_sent, b.node_messages);
  if (rank < unit) {  // the first node publishes for the ranks outside the sample
    cc.sent[local] = scaled(b.sent), cc.messages[local] = scaled(b.messages);
    cc.node_sent[local] = node_sent, cc.node_messages[local] = b.node_messages;
    if (local == 0) ++sh.coarsened;
    for (int r = local; r < n; r += unit)
      if (r / unit % k != 0) cc.done[local]->release();
  }
}

// rails (comm/algo/allreduce_rails.cpp: reduce-scatter inside the node, a ring per local index j
// across the nodes on the node's j-th share, allgather inside) over more than max_ring nodes, on
// every k-th node: its node steps on the real buffer, its rings with the full rings' chunk per
// step, their time and bytes scaled by the rings' steps (the node steps' not). The others wait
// for the sample and count what their twin (same local index, first node) sent: to their rail
// successor and inside their node.
void runCoarseRails(Shared& sh, int rank, int thread, const CallSpec& c) {
  const int n = sh.net.world(), gs = coarseUnit(sh, c), units = n / gs;
  const int k = (units + sh.coarse.max_ring - 1) / sh.coarse.max_ring;
  const int j = rank % gs, first = rank - j;
  const int rail_next = (rank + gs) % n, local_next = first + (j + 1) % gs;
  CoarseCall& cc = sh.coarse_calls[{thread, sh.state[rank].coarse_calls[thread]++}];
  cc.size(gs);
  if (rank / gs % k != 0) {
    cc.done[j]->acquire();
    sh.net.count(rank, rail_next, cc.sent[j], cc.messages[j]);
    sh.net.count(rank, local_next, cc.node_sent[j], cc.node_messages[j]);
    return;
  }
  CallSpec s = c;  // the sample, for its sequence number
  for (int u = 0; u < units; u += k)
    for (int i = 0; i < gs; ++i) s.ranks.push_back(u * gs + i);
  comm::Group local, rail;
  for (int i = first; i < first + gs; ++i) local.ranks.push_back(i);
  local.me = j;
  for (int u = 0; u < units; u += k) rail.ranks.push_back(u * gs + j);
  rail.me = rank / gs / k;
  const int m = rail.size();
  const size_t es = comm::dtypeSize(c.dtype), count = c.bytes / es;
  const auto off = comm::evenOffsets(count, gs);
  const size_t seg = comm::segmentElems(c.segment_bytes, es, off[1] - off[0]);
  const size_t ring_count = std::max<size_t>(1, (off[j + 1] - off[j]) / static_cast<size_t>(units)) * m;
  if (!cc.start) cc.start = sg4::Barrier::create(static_cast<unsigned>(s.ranks.size()));
  cc.start->wait();  // the sample starts together (as runCoarse)
  if (const double h = sh.net.callOverhead("allreduce/rails"); h > 0) sg4::this_actor::sleep_for(h);
  SimExchange ex(sh.net, rank, nextSeq(sh, rank, thread, s), false);
  char* buf = sh.buf.get();
  comm::ReduceScatterOptions rs;
  rs.buf = buf;
  rs.off = &off;
  rs.dt = c.dtype;
  rs.seg_elems = seg;
  rs.tmp = sh.scratch.get(comm::ringScratchBytes(off, es));
  comm::ringReduceScatter(ex, local, rs);
  ex.waitAll();
  const uint64_t b0 = ex.bytesSent(), m0 = ex.messagesSent();
  const double t0 = sg4::Engine::get_clock();
  comm::AllreduceOptions ar;
  ar.buf = buf;
  ar.count = ring_count;
  ar.dt = c.dtype;
  ar.segment_bytes = c.segment_bytes;
  ar.sub = 2;
  ar.scratch = &sh.scratch;
  comm::allreduceRing(ex, rail, ar);
  ex.waitAll();
  const double scale = static_cast<double>(units - 1) / static_cast<double>(m - 1);
  sg4::this_actor::sleep_for((sg4::Engine::get_clock() - t0) * (scale - 1));
  const uint64_t ring_b = ex.bytesSent() - b0, ring_m = ex.messagesSent() - m0;
  std::vector<size_t> off_bytes(off);
  for (auto& o : off_bytes) o *= es;
  comm::AllgatherOptions ag;
  ag.buf = buf;
  ag.off_bytes = &off_bytes;
  ag.segment_bytes = seg * es;
  ag.sub = 4;
  comm::ringAllgather(ex, local, ag);
  ex.waitAll();
  ++sh.calls;
  const auto scaled = [scale](uint64_t v) { return static_cast<uint64_t>(static_cast<double>(v) * scale + 0.5); };
  const uint64_t node_b = ex.bytesSent() - ring_b, node_m = ex.messagesSent() - ring_m;
  sh.net.count(rank, rail_next, scaled(ring_b), scaled(ring_m));
  sh.net.count(rank, local_next, node_b, node_m);
  if (rank < gs) {  // the first node publishes for the ranks outside the sample
    cc.sent[j] = scaled(ring_b), cc.messages[j] = scaled(ring_m);
    cc.node_sent[j] = node_b, cc.node_messages[j] = node_m;
    if (j == 0) ++sh.coarsened;
    for (int r = j; r < n; r += gs)
      if (r / gs % k != 0) cc.done[j]->release();
  }
}

}  // namespace lowcomm::sim::replay_detail
