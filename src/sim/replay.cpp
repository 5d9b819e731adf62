// replay (lowcomm/sim/replay.h): every rank's compute thread and communication thread as two
// SimGrid actors on the rank's host.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <numeric>
#include <utility>

#include "engine.h"
#include "ina.h"
#include "isolated.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/algorithms.h"
#include "lowcomm/comm/dtype.h"
#include "lowcomm/sim/replay.h"
#include "run_call.h"
#include "run_p2p.h"
#include "sim_exchange.h"

namespace lowcomm::sim {

namespace sg4 = simgrid::s4u;

namespace {

// A coarsened call (CoarseOptions): each rank of the sample's first node publishes what the
// ranks of its local index then count.
struct CoarseCall {
  std::vector<sg4::SemaphorePtr> done;          // per local index
  sg4::BarrierPtr start;                        // the sample's ranks, before they time the call
  std::map<int, sg4::BarrierPtr> ends;          // per sampled node (hier): its ranks end together
  // Per local index, per rank, scaled to the full call: over the network, in node memory.
  std::vector<uint64_t> sent, messages, node_sent, node_messages;
  void size(int unit) {
    if (static_cast<int>(done.size()) >= unit) return;
    for (int j = static_cast<int>(done.size()); j < unit; ++j) done.push_back(sg4::Semaphore::create(0));
    sent.resize(unit), messages.resize(unit), node_sent.resize(unit), node_messages.resize(unit);
  }
};

struct RankState {
  sg4::SemaphorePtr launched = sg4::Semaphore::create(0);
  sg4::SemaphorePtr finished = sg4::Semaphore::create(0);
  int launches = 0, done = 0;
  std::map<std::string, uint32_t> calls_in_group;  // the next call's number, per group
  int coarse_calls[2] = {0, 0};  // per thread (0: compute, 1: communication)
  std::vector<double> step_s;
  double step_start = 0, first_begin = -1, last_end = 0;
};

struct Shared {
  const PlatformSpec& platform;
  const std::vector<RankProgram>& programs;
  SimNetwork& net;
  std::vector<RankState> state;
  std::unique_ptr<char[]> buf, out;
  comm::Scratch scratch;
  std::map<std::string, uint32_t> group_ids;
  CoarseOptions coarse;
  // By thread and the call's number among that thread's coarsened ones: every rank's thread
  // issues the same sequence, whatever the two threads' interleaving.
  std::map<std::pair<int, int>, CoarseCall> coarse_calls;
  std::string error;
  uint64_t calls = 0, coarsened = 0;
  std::vector<P2PRank> p2p;  // per rank
  P2PChannels channels;
};

std::string groupKey(const CallSpec& c) {
  std::string k;
  for (int r : c.ranks) k += std::to_string(r) + ",";
  return k;
}

// The ranks a coarsened call samples together: hier's and rails' node groups, else single ranks.
int coarseUnit(const Shared& sh, const CallSpec& c) {
  const bool nodes = c.algo == comm::Algo::hierarchical || c.algo == comm::Algo::rails;
  return nodes ? (c.group_size > 0 ? c.group_size : sh.platform.ppn) : 1;
}

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

// What a call sent: over the network, and in node memory (hier's node steps).
struct CallBytes {
  uint64_t sent = 0, messages = 0, node_sent = 0, node_messages = 0;
  double node_s = 0;  // time in node-memory steps
};

// The sequence number of `rank`'s next call of c's group: calls of different groups must not
// share slots, so the group's number goes into it.
uint32_t nextSeq(Shared& sh, int rank, const CallSpec& c) {
  const std::string key = groupKey(c);
  auto gid = sh.group_ids.emplace(key, static_cast<uint32_t>(sh.group_ids.size())).first;
  return (gid->second << 20) | (sh.state[rank].calls_in_group[key]++ & 0xfffff);
}

// Runs `c` on `rank` (its group's or the world's) and returns the bytes and messages it sent;
// `count`: whether they go into the network's counters.
CallBytes runGroupCall(Shared& sh, int rank, const CallSpec& c, bool count = true) {
  comm::Group g;
  if (c.ranks.empty()) {
    g = comm::Group::world(rank, sh.net.world());
  } else {
    g.ranks = c.ranks;
    auto it = std::find(c.ranks.begin(), c.ranks.end(), rank);
    if (it == c.ranks.end())
      throw Error("rank " + std::to_string(rank) + " replays a " + c.op + " of a group it is not in");
    g.me = static_cast<int>(it - c.ranks.begin());
  }
  SimExchange ex(sh.net, rank, nextSeq(sh, rank, c), count);
  runCall(ex, g, c, sh.platform.ppn, sh.buf.get(), sh.out.get(), sh.scratch);
  ++sh.calls;
  return {ex.bytesSent(), ex.messagesSent(), ex.nodeBytesSent(), ex.nodeMessagesSent(), ex.nodeTime()};
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
  const CallBytes b = runGroupCall(sh, rank, s, false);
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
  SimExchange ex(sh.net, rank, nextSeq(sh, rank, s), false);
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

void runOne(Shared& sh, int rank, int thread, const CallSpec& c) {
  if (c.p2p()) {
    sh.p2p[rank].run(sh.net, sh.channels, c);
    ++sh.calls;
  } else if (coarsens(sh, c) && c.algo == comm::Algo::rails) {
    runCoarseRails(sh, rank, thread, c);
  } else if (coarsens(sh, c)) runCoarse(sh, rank, thread, c);
  else runGroupCall(sh, rank, c);
}

// `thread`: 0 the rank's compute thread, 1 its communication thread.
void runItems(Shared& sh, int rank, int thread, const std::vector<ReplayItem>& items) {
  const RankProgram& prog = sh.programs[rank];
  RankState& st = sh.state[rank];
  for (const auto& it : items) {
    switch (it.kind) {
      case ReplayItem::sleep:
        if (it.seconds > 0) sg4::this_actor::sleep_for(it.seconds);
        break;
      case ReplayItem::call: runOne(sh, rank, thread, prog.calls[it.index]); break;
      case ReplayItem::launch:
        ++st.launches;
        st.launched->release();
        break;
      case ReplayItem::wait_buckets:
        while (st.done < st.launches) st.finished->acquire();  // stale releases only loop once more
        break;
      case ReplayItem::step_begin:
        st.step_start = sg4::Engine::get_clock();
        if (st.first_begin < 0) st.first_begin = st.step_start;
        break;
      case ReplayItem::step_end:
        st.last_end = sg4::Engine::get_clock();
        st.step_s.push_back(st.last_end - st.step_start);
        break;
    }
  }
}

void commThread(Shared& sh, int rank) {
  RankState& st = sh.state[rank];
  for (const auto& bucket : sh.programs[rank].buckets) {
    st.launched->acquire();
    runItems(sh, rank, 1, bucket);
    ++st.done;
    st.finished->release();
  }
}

uint64_t maxBytes(const std::vector<RankProgram>& programs) {
  uint64_t m = 1;
  for (const auto& p : programs)
    for (const auto& c : p.calls) m = std::max(m, c.bytes);
  return m;
}

nlohmann::json runReplay(const PlatformSpec& p, const std::vector<RankProgram>& programs, const CoarseOptions& coarse) {
  SimPlatform plat = buildPlatform(p);
  const int n = p.world();
  std::vector<int> node_of(n);
  std::vector<sg4::Host*> host_of(n);
  for (int r = 0; r < n; ++r) {
    node_of[r] = p.nodeOf(r);
    host_of[r] = plat.hosts[r];
  }
  SimNetwork net(host_of, node_of, p);
  std::unique_ptr<InaFabric> ina;
  if (p.in_network_aggregation) net.ina = (ina = std::make_unique<InaFabric>(net, plat.ina, p)).get();
  Shared sh{p, programs, net, std::vector<RankState>(n), nullptr, nullptr, {}, {}, coarse, {}, {}, 0, 0, {}, {}};
  for (int r = 0; r < n; ++r) sh.p2p.emplace_back(r);
  // Never read or written (no data moves), so the kernel never backs them with memory.
  const uint64_t bytes = maxBytes(programs);
  sh.buf.reset(new char[bytes]);
  sh.out.reset(new char[bytes]);
  int finished = 0;  // actors that ran to their end
  auto guarded = [&sh, &finished](int r, const char* what, auto&& f) {
    try {
      f();
      ++finished;
    } catch (const std::exception& e) {
      if (sh.error.empty()) sh.error = "rank " + std::to_string(r) + " (" + what + "): " + e.what();
    }
  };
  for (int r = 0; r < n; ++r) {
    sg4::Actor::create("main" + std::to_string(r), host_of[r],
                       [&, r] { guarded(r, "compute thread", [&] { runItems(sh, r, 0, programs[r].main); }); });
    sg4::Actor::create("comm" + std::to_string(r), host_of[r],
                       [&, r] { guarded(r, "communication thread", [&] { commThread(sh, r); }); });
  }
  plat.engine->run();
  if (!sh.error.empty()) throw Error("simulate replay: " + sh.error);
  if (finished != 2 * n)
    throw Error("simulate replay: the simulation stopped with " + std::to_string(2 * n - finished) +
                " of the ranks' threads waiting for messages that never come (a deadlock)");
  nlohmann::json steps = nlohmann::json::array();
  nlohmann::json cycles = nlohmann::json::array();
  for (const auto& st : sh.state) {
    steps.push_back(st.step_s);
    cycles.push_back(st.step_s.empty() ? 0.0 : (st.last_end - st.first_begin) / static_cast<double>(st.step_s.size()));
  }
  return {{"steps", steps},          {"bytes_sent", net.sent},        {"inter_node_sent", net.inter_node_sent}, {"inter_leaf_sent", net.inter_leaf_sent},
          {"messages", net.messages}, {"calls", sh.calls}, {"coarse_calls", sh.coarsened}, {"cycles", cycles}};
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

}  // namespace

ReplayResult replay(const PlatformSpec& platform, const std::vector<RankProgram>& programs, const CoarseOptions& coarse) {
  validate(platform);
  if (static_cast<int>(programs.size()) != platform.world())
    throw ConfigError("simulate replay: the timeline has " + std::to_string(programs.size()) +
                      " ranks but the platform " + std::to_string(platform.world()) + " (nodes x ppn)");
  const auto t0 = std::chrono::steady_clock::now();
  const auto j = nlohmann::json::parse(runIsolated([&] { return runReplay(platform, programs, coarse).dump(); }));
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ReplayResult r;
  r.ranks = platform.world();
  r.steps = static_cast<int>(programs[0].measured_step_s.size());
  double measured = 0, predicted = 0;
  for (int k = 0; k < r.ranks; ++k) {
    const auto sim = j["steps"][k].get<std::vector<double>>();
    r.measured_step_by_rank.push_back(mean(programs[k].measured_step_s));
    r.predicted_step_by_rank.push_back(mean(sim));
    measured += r.measured_step_by_rank.back();
    predicted += r.predicted_step_by_rank.back();
    r.unsupported_calls += programs[k].unsupported_calls;
  }
  r.measured_step_s = measured / r.ranks;
  r.predicted_step_s = predicted / r.ranks;
  for (double c : j["cycles"].get<std::vector<double>>()) r.predicted_cycle_s += c / r.ranks;
  r.bytes_sent = j["bytes_sent"].get<std::vector<uint64_t>>();
  r.inter_node_sent = j["inter_node_sent"].get<std::vector<uint64_t>>();
  r.inter_leaf_sent = j["inter_leaf_sent"].get<std::vector<uint64_t>>();
  r.wall_s = wall_s;
  r.messages_sent = j["messages"].get<std::vector<uint64_t>>();
  r.calls = j["calls"];
  r.coarse_calls = j["coarse_calls"];
  return r;
}

}  // namespace lowcomm::sim
