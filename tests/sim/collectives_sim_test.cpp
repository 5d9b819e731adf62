// The simulator runs the communicator's own algorithms: per-rank bytes and messages equal the
// traffic meter's on real Gloo pairs (ranks as threads, worlds 2..6), every algorithm keeps its
// message order at every world size up to 64, the closed forms hold (ring 2(n-1)/n, ...), and on
// an uncontended star the simulated time is the alpha-beta value exactly; the per-rail allreduce
// uses every NIC of a rail-optimised cluster.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "comm/harness.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/algorithms.h"
#include "lowcomm/sim/collectives.h"

using namespace lowcomm;
using namespace lowcomm::sim;

namespace {

PlatformSpec star(int nodes, int ppn, double gbit) {
  PlatformSpec p;
  p.nodes = nodes;
  p.ppn = ppn;
  p.link_Bps = gbit * 1e9 / 8;
  p.reduce_Bps = 1e15;  // reductions free: only the network counts
  p.notice_bytes = 0;   // the closed forms: a sender learns of a posted receive at once
  return p;
}

CollectiveSpec spec(const std::string& op, comm::Algo algo, size_t bytes) {
  CollectiveSpec s;
  s.op = op;
  s.algo = algo;
  s.bytes = bytes;
  return s;
}

// Per-rank bytes and messages sent by the real communicator for the same call.
struct Real {
  std::vector<uint64_t> sent, messages;
};

Real realRun(int n, const CollectiveSpec& s) {
  comm::CommOptions opts;
  opts.shm = comm::ShmMode::off;  // the network algorithms, as on separate nodes
  if (s.node_piece > 0) {         // hier's groups in shared memory (the ranks share this host)
    opts.shm = comm::ShmMode::automatic;
    opts.shm_piece_bytes = s.node_piece;
  }
  opts.allreduce_algo = s.algo;
  opts.segment_bytes = s.segment_bytes;
  opts.group_size = s.group_size;
  auto comms = test::makeComms(n, opts);
  Real out{std::vector<uint64_t>(n), std::vector<uint64_t>(n)};
  const size_t count = s.bytes / 4;
  test::onRanks(n, [&](int r) {
    auto& c = *comms[r];
    c.meter().reset();
    std::vector<float> buf(count, 1.0f), out_buf(count);
    if (s.op == "allreduce") c.allreduce(buf.data(), count, comm::DType::f32, comm::ReduceOp::sum, s.algo);
    else if (s.op == "allgather")
      c.allgather(buf.data() + r * (count / n), buf.data(), count / n, comm::DType::f32, s.algo);
    else if (s.op == "reduce_scatter")
      c.reduceScatter(buf.data(), out_buf.data(), count / n, comm::DType::f32, comm::ReduceOp::sum);
    else if (s.op == "broadcast")  // the simulator runs the chain for Algo::chain, else the tree
      c.broadcast(buf.data(), count, comm::DType::f32, s.root, s.algo == comm::Algo::chain ? s.algo : comm::Algo::tree);
    else if (s.op == "alltoall") c.alltoall(buf.data(), out_buf.data(), count / n, comm::DType::f32);
    const auto snap = c.meter().snapshot();
    out.sent[r] = snap.total.bytes_sent;
    out.messages[r] = snap.total.messages_sent;
  });
  return out;
}

// Simulates `s` on nodes x ppn ranks and checks it sends what the real communicator sends.
CollectiveResult expectSameAsReal(int nodes, int ppn, const CollectiveSpec& s) {
  const auto sim = simulateCollective(star(nodes, ppn, 1), s);
  const auto real = realRun(nodes * ppn, s);
  EXPECT_EQ(sim.bytes_sent, real.sent);
  EXPECT_EQ(sim.messages_sent, real.messages);
  return sim;
}

}  // namespace

TEST(SimCollectives, SameBytesAndMessagesAsTheRealCommunicator) {
  struct Case {
    const char* op;
    comm::Algo algo;
    size_t bytes;
    int group;
  };
  const std::vector<Case> cases = {
      {"allreduce", comm::Algo::ring, 3u << 20, 0},     {"allreduce", comm::Algo::ring, 4000, 0},
      {"allreduce", comm::Algo::halving_doubling, 6000, 0}, {"allreduce", comm::Algo::ordered, 600000, 0},
      {"allgather", comm::Algo::ring, 2u << 20, 0},     {"reduce_scatter", comm::Algo::ring, 3u << 20, 0},
      {"broadcast", comm::Algo::ring, 5u << 20, 0},     {"broadcast", comm::Algo::chain, 5u << 20, 0},
      {"alltoall", comm::Algo::ring, 1u << 20, 0}};
  for (int n : {2, 3, 4, 6}) {
    for (const auto& c : cases) {
      auto s = spec(c.op, c.algo, c.bytes / (4 * n) * (4 * n));
      s.segment_bytes = 256 << 10;
      if (std::string(c.op) == "broadcast") s.root = n - 1;
      SCOPED_TRACE(std::string(c.op) + "/" + comm::algoName(c.algo) + " n=" + std::to_string(n));
      const auto sim = simulateCollective(star(n, 1, 1), s);
      const auto real = realRun(n, s);
      EXPECT_EQ(sim.bytes_sent, real.sent);
      EXPECT_EQ(sim.messages_sent, real.messages);
    }
  }
}

TEST(SimCollectives, HierarchicalMatchesTheRealCommunicatorOnTwoByTwo) {
  auto s = spec("allreduce", comm::Algo::hierarchical, 1u << 20);
  s.group_size = 2;
  const auto sim = simulateCollective(star(2, 2, 1), s);
  const auto real = realRun(4, s);
  EXPECT_EQ(sim.bytes_sent, real.sent);
  EXPECT_EQ(sim.messages_sent, real.messages);
  // Only the group leaders' exchange crosses nodes: less than a flat ring's inter-node bytes.
  const auto flat = simulateCollective(star(2, 2, 1), spec("allreduce", comm::Algo::ring, 1u << 20));
  EXPECT_LT(sim.inter_node_bytes, flat.inter_node_bytes);
}

// With each node's part in shared memory only the leaders send over the network: the same bytes
// and messages per rank as the real communicator (2 x 2 and 3 x 4, uneven pieces), the same
// inter-node bytes as the TCP version, fewer messages, and less time when each message costs
// its host time.
TEST(SimCollectives, HierarchicalInNodeMemoryMatchesTheRealCommunicator) {
  for (const auto& [nodes, ppn] : std::vector<std::pair<int, int>>{{2, 2}, {3, 4}}) {
    SCOPED_TRACE(std::to_string(nodes) + " x " + std::to_string(ppn));
    auto s = spec("allreduce", comm::Algo::hierarchical, (3u << 20) + 4 * 77);
    s.group_size = ppn;
    s.node_piece = 64 << 10;
    const auto node = expectSameAsReal(nodes, ppn, s);
    EXPECT_EQ(node.node_piece, 64u << 10);  // what ran: the node version
    s.node_piece = 0;
    const auto tcp = simulateCollective(star(nodes, ppn, 1), s);
    EXPECT_EQ(tcp.node_piece, 0u);
    EXPECT_EQ(node.inter_node_bytes, tcp.inter_node_bytes);
    const size_t chunks = comm::nodePipelineChunks(s.bytes, s.segment_bytes, nodes);
    EXPECT_EQ(chunks, 3u);
    for (int r = 0; r < nodes * ppn; ++r)
      if (r % ppn != 0) {
        EXPECT_EQ(node.messages_sent[r], chunks) << "rank " << r;  // its node's sum per chunk, no network
      }
  }
  auto p = star(2, 2, 1);
  p.message_overhead_s = 0.001;
  auto s = spec("allreduce", comm::Algo::hierarchical, 1u << 20);
  s.group_size = 2;
  const double tcp = simulateCollective(p, s).time_s;
  s.node_piece = 256 << 10;
  const double node = simulateCollective(p, s).time_s;
  EXPECT_LT(node, tcp);
  // The node's copies at node_memory_Bps: the leader copies in, sums its share and copies out, then
  // copies the result in for the broadcast (4 x 1 MiB), the others copy it out after it (+1 MiB),
  // one after the other; the TCP version has no shared memory.
  const auto with_rate = [&](double bps) {
    auto q = p;
    q.node_memory_Bps = bps;
    return simulateCollective(q, s).time_s;
  };
  EXPECT_NEAR(with_rate(1e9) - with_rate(2e9), 5.0 * (1 << 20) * (1 / 1e9 - 1 / 2e9), 1e-6);
  s.node_piece = 0;
  p.node_memory_Bps = 1e9;
  EXPECT_DOUBLE_EQ(simulateCollective(p, s).time_s, tcp);
  // Groups of 2 on nodes of 3: the middle group spans both nodes, so every group runs over TCP,
  // as the communicator decides it (one answer for all ranks), never a mix.
  auto spans = spec("allreduce", comm::Algo::hierarchical, 1u << 20);
  spans.group_size = 2;
  const auto over_tcp = simulateCollective(star(2, 3, 1), spans);
  spans.node_piece = 64 << 10;
  const auto asked_node = simulateCollective(star(2, 3, 1), spans);
  EXPECT_EQ(asked_node.messages_sent, over_tcp.messages_sent);
  EXPECT_EQ(asked_node.node_piece, 0u);  // asked for, not run
  EXPECT_DOUBLE_EQ(asked_node.time_s, over_tcp.time_s);
}

// The hierarchical allgather moves what the real communicator moves (2 x 2, 4 x 2, 3 x 4), and
// each node's blocks enter every other node once through the leaders: nodes (nodes - 1) ppn
// blocks cross the node boundary, where the flat ring's nodes crossing hops carry n - 1 blocks
// each (on 2 x 2: 4 blocks instead of 6). With 1 Gbit/s links and memory inside the nodes it is
// faster in proportion.
TEST(SimCollectives, HierarchicalAllgatherMatchesTheRealCommunicatorAndCrossesNodesLess) {
  for (const auto& [nodes, ppn] : {std::pair{2, 2}, std::pair{4, 2}, std::pair{3, 4}}) {
    const int n = nodes * ppn;
    const size_t bytes = (1u << 20) / (4 * n) * (4 * n), block = bytes / n;
    auto s = spec("allgather", comm::Algo::hierarchical, bytes);
    s.group_size = ppn;
    s.segment_bytes = 256 << 10;
    SCOPED_TRACE(std::to_string(nodes) + "x" + std::to_string(ppn));
    const auto sim = expectSameAsReal(nodes, ppn, s);
    auto flat = s;
    flat.algo = comm::Algo::ring;
    const auto ring = simulateCollective(star(nodes, ppn, 1), flat);
    EXPECT_EQ(sim.inter_node_bytes, static_cast<uint64_t>(nodes * (nodes - 1) * ppn) * block);
    EXPECT_EQ(ring.inter_node_bytes, static_cast<uint64_t>(nodes * (n - 1)) * block);
  }
  auto s = spec("allgather", comm::Algo::hierarchical, 16u << 20);
  s.group_size = 2;
  const double hier = simulateCollective(star(2, 2, 1), s).time_s;
  s.algo = comm::Algo::ring;
  const double ring = simulateCollective(star(2, 2, 1), s).time_s;
  EXPECT_LT(hier, ring * 0.8);  // 2 blocks per node link instead of 3, plus the node's memory copies
}

// Every algorithm's message order holds at every world size (a mismatch throws), and the
// per-rank bytes follow the closed forms.
TEST(SimCollectives, ClosedFormsUpTo64Ranks) {
  for (int n : {1, 2, 3, 5, 7, 8, 9, 16, 33, 64}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const size_t S = static_cast<size_t>(n) * 4 * 1024;  // divides evenly
    auto ring = simulateCollective(star(n, 1, 1), spec("allreduce", comm::Algo::ring, S));
    auto ag = simulateCollective(star(n, 1, 1), spec("allgather", comm::Algo::ring, S));
    auto rs = simulateCollective(star(n, 1, 1), spec("reduce_scatter", comm::Algo::ring, S));
    auto a2a = simulateCollective(star(n, 1, 1), spec("alltoall", comm::Algo::ring, S));
    auto bc = simulateCollective(star(n, 1, 1), spec("broadcast", comm::Algo::ring, S));
    auto chain = simulateCollective(star(n, 1, 1), spec("broadcast", comm::Algo::chain, S));
    auto hd = simulateCollective(star(n, 1, 1), spec("allreduce", comm::Algo::halving_doubling, S));
    auto bar = simulateCollective(star(n, 1, 1), spec("barrier", comm::Algo::ring, 0));
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(ring.bytes_sent[r], 2 * (n - 1) * S / n) << r;
      EXPECT_EQ(ag.bytes_sent[r], (n - 1) * S / n) << r;
      EXPECT_EQ(rs.bytes_sent[r], (n - 1) * S / n) << r;
      EXPECT_EQ(a2a.bytes_sent[r], (n - 1) * S / n) << r;
    }
    // A broadcast delivers S to every rank but the root, whatever the tree; in the chain every
    // rank but the last (rank n - 1 from root 0) sends it once.
    EXPECT_EQ(std::accumulate(bc.bytes_recv.begin(), bc.bytes_recv.end(), uint64_t{0}), (n - 1) * S);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(chain.bytes_recv[r], r == 0 ? 0 : S) << r;
      EXPECT_EQ(chain.bytes_sent[r], r == n - 1 ? 0 : S) << r;
    }
    // Halving-doubling moves at least the ring's bytes in total (equal for powers of two).
    const auto total = [](const std::vector<uint64_t>& v) { return std::accumulate(v.begin(), v.end(), uint64_t{0}); };
    EXPECT_GE(total(hd.bytes_sent), total(ring.bytes_sent));
    if ((n & (n - 1)) == 0) {
      EXPECT_EQ(total(hd.bytes_sent), total(ring.bytes_sent));
    }
    EXPECT_EQ(total(bar.bytes_sent) > 0, n > 1);
  }
}

// One segment per chunk, free reductions, no contention: each of the 2(n-1) ring steps moves S/n
// over two links (host to switch to host) with their latency.
TEST(SimCollectives, RingTimeIsTheAlphaBetaValueOnAStar) {
  for (int n : {2, 4, 8}) {
    for (double gbit : {0.1, 1.0}) {
      const size_t S = 16u << 20;
      auto s = spec("allreduce", comm::Algo::ring, S);
      s.segment_bytes = S;
      const auto p = star(n, 1, gbit);
      const auto r = simulateCollective(p, s);
      const double expect = 2.0 * (n - 1) * (static_cast<double>(S) / n / p.link_Bps + 2 * p.link_latency_s);
      EXPECT_NEAR(r.time_s / expect, 1.0, 1e-6) << "n=" << n << " " << gbit << " Gbit/s";
    }
  }
}

// Gloo's rendezvous: data leaves once the receiver's notice has crossed the route (2 links of
// latency L, plus the notice's own bytes), so a round whose receive is posted as its send starts
// takes that much longer; the 2-rank ring has two rounds.
TEST(SimCollectives, ReceiverNoticesDelayEachRound) {
  auto p = star(2, 1, 1);
  p.link_latency_s = 50e-6;
  auto s = spec("allreduce", comm::Algo::ring, 1 << 20);
  s.segment_bytes = 1 << 20;
  const double without = simulateCollective(p, s).time_s;
  p.notice_bytes = 114;
  const double with = simulateCollective(p, s).time_s;
  const double notice = 2 * p.link_latency_s + p.notice_bytes / p.link_Bps;
  EXPECT_GT(with - without, notice * 0.99);
  EXPECT_LT(with - without, 2 * notice * 1.01);
}

// Halving the bandwidth factor doubles a bandwidth-bound collective's time.
TEST(SimCollectives, BandwidthFactorScalesTime) {
  auto p = star(4, 1, 1);
  p.link_latency_s = 0;
  const auto s = spec("allgather", comm::Algo::ring, 8u << 20);
  const double full = simulateCollective(p, s).time_s;
  p.bandwidth_factor = 0.5;
  EXPECT_NEAR(simulateCollective(p, s).time_s / full, 2.0, 1e-6);
}

// Reductions cost time on the host's cores: a slow reduction makes the ring slower.
TEST(SimCollectives, ReductionsCostTime) {
  auto p = star(4, 1, 1);
  const auto s = spec("allreduce", comm::Algo::ring, 8u << 20);
  const double fast = simulateCollective(p, s).time_s;
  p.reduce_Bps = 1e8;
  EXPECT_GT(simulateCollective(p, s).time_s, fast * 1.2);
}

// Read from the algorithm table; the lists as they were written by hand before it.
TEST(SimCollectives, SimulatedAlgorithmsComeFromTheTable) {
  using V = std::vector<std::string>;
  EXPECT_EQ(simulatedAlgorithms("allreduce"), (V{"ring", "hd", "hier", "rails", "sites", "ordered"}));
  EXPECT_EQ(simulatedAlgorithms("allgather"), (V{"ring", "hier"}));
  EXPECT_EQ(simulatedAlgorithms("reduce_scatter"), (V{"ring"}));
  EXPECT_EQ(simulatedAlgorithms("broadcast"), (V{"tree", "chain"}));
  EXPECT_EQ(simulatedAlgorithms("alltoall"), (V{"pairwise"}));
  EXPECT_EQ(simulatedAlgorithms("barrier"), (V{"dissemination"}));
  EXPECT_THROW(simulatedAlgorithms("gather"), ConfigError);
}

TEST(SimCollectives, BadInputIsAConfigErrorNamingIt) {
  const auto p = star(4, 1, 1);
  auto expectError = [&](const CollectiveSpec& s, const std::string& needle) {
    try {
      simulateCollective(p, s);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expectError(spec("gather", comm::Algo::ring, 64), "gather");
  expectError(spec("allreduce", comm::Algo::tree, 64), "tree");
  expectError(spec("allreduce", comm::Algo::ring, 66), "66 bytes");
  expectError(spec("allreduce", comm::Algo::hierarchical, 64), "hier");
  auto b = spec("broadcast", comm::Algo::ring, 64);
  b.root = 9;
  expectError(b, "root 9");
  EXPECT_THROW(parseSetting("4x1"), ConfigError);
  EXPECT_THROW(parseSetting("4x1@100mbps"), ConfigError);
  EXPECT_THROW(parseSetting("0x1@1gbit"), ConfigError);
  const auto q = parseSetting("2x2@100mbit");
  EXPECT_EQ(q.world(), 4);
  EXPECT_DOUBLE_EQ(q.link_Bps, 100e6 / 8);
}

// A pair of ranks shares one connection (messages one at a time), so a segmented binomial
// broadcast streams: on 4 ranks the root sends the buffer twice, 2 S / B in all, not the 3 S / B
// that all segments sharing the root's link at once would take.
TEST(SimCollectives, SegmentedBroadcastStreamsThroughTheTree) {
  auto p = star(4, 1, 1);
  p.link_latency_s = 0;
  auto s = spec("broadcast", comm::Algo::ring, 16u << 20);
  s.segment_bytes = 256 << 10;
  const double t = simulateCollective(p, s).time_s;
  const double two = 2.0 * static_cast<double>(s.bytes) / p.link_Bps;
  EXPECT_GT(t, two);
  EXPECT_LT(t, two * 1.05);
}

// The pipelined chain sends the buffer once per link: on 4 ranks with k segments it takes
// (k + 2) segment times, k / (k + 2) of the link rate; 4 MiB (30 segments) reaches >= 0.9 of it
// where the tree's root, sending twice, cannot pass 0.5.
TEST(SimCollectives, ChainBroadcastReachesTheLinkRate) {
  auto p = star(4, 1, 1);
  p.link_latency_s = 0;
  for (size_t bytes : {size_t{4} << 20, size_t{64} << 20}) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    auto s = spec("broadcast", comm::Algo::chain, bytes);
    const double t = simulateCollective(p, s).time_s;
    const double once = static_cast<double>(bytes) / p.link_Bps;
    const size_t seg = comm::chainSegmentBytes(bytes, 4, s.segment_bytes);
    const double k = std::ceil(static_cast<double>(bytes) / static_cast<double>(seg));
    EXPECT_GT(t, once);
    EXPECT_LT(t, once * (k + 2) / k * 1.02);
    EXPECT_GT(once / t, 0.9);
    auto tree = spec("broadcast", comm::Algo::tree, bytes);
    EXPECT_GT(simulateCollective(p, tree).time_s, 1.8 * t);
  }
}

// Ranks of one node talk through its loopback, not its network link: on 2 nodes x 2 the ring
// (two of its four hops inside a node) takes no longer than on 4 nodes x 1, and the
// hierarchical allreduce, which sends less between the nodes, is faster than both.
TEST(SimCollectives, TrafficInsideANodeStaysOffItsLink) {
  auto s = spec("allreduce", comm::Algo::ring, 16u << 20);
  const double flat4 = simulateCollective(star(4, 1, 1), s).time_s;
  const double ring22 = simulateCollective(star(2, 2, 1), s).time_s;
  EXPECT_LT(ring22, flat4 * 1.01);
  s.algo = comm::Algo::hierarchical;
  EXPECT_LT(simulateCollective(star(2, 2, 1), s).time_s, ring22 * 0.9);
}

// The per-rail allreduce moves what the real communicator moves (2 x 2 and 3 x 4 ranks).
TEST(SimCollectives, RailsMatchesTheRealCommunicator) {
  for (const auto& [nodes, ppn] : {std::pair{2, 2}, std::pair{3, 4}}) {
    const int n = nodes * ppn;
    auto s = spec("allreduce", comm::Algo::rails, (1u << 20) / (4 * n) * (4 * n));
    s.group_size = ppn;
    s.segment_bytes = 256 << 10;
    SCOPED_TRACE(std::to_string(nodes) + "x" + std::to_string(ppn));
    expectSameAsReal(nodes, ppn, s);
  }
}

// The sites allreduce moves what the real communicator moves (2 x 2 in several pieces, 3 x 2),
// and between the sites each rank sends its 1/ppn of the buffer to every other site.
TEST(SimCollectives, SitesMatchesTheRealCommunicator) {
  for (const auto& [nodes, ppn] : {std::pair{2, 2}, std::pair{3, 2}}) {
    const int n = nodes * ppn;
    auto s = spec("allreduce", comm::Algo::sites, (3u << 20) / (4 * n) * (4 * n));
    s.group_size = ppn;
    s.segment_bytes = 256 << 10;
    SCOPED_TRACE(std::to_string(nodes) + "x" + std::to_string(ppn));
    const auto sim = expectSameAsReal(nodes, ppn, s);
    EXPECT_EQ(sim.inter_node_bytes, static_cast<uint64_t>(n) * (nodes - 1) * s.bytes / ppn);
  }
}

// A rail-optimised cluster gives every local rank a NIC of its own: the per-rail allreduce sends
// the same bytes between nodes as the hierarchical one (whose node leaders all sit on rail 0)
// but over 4 NICs per node instead of 1, so it is more than 2.5x faster on 4 x 4 ranks with
// fast node memory (with the default 4 GB/s the node's memory, not its NICs, limits both). Ranks of
// one node reach each other through memory, never a NIC (1 Mbit/s NICs: a ring inside one node
// still takes milliseconds, not seconds).
TEST(SimCollectives, OnRailsEveryLocalRankUsesItsOwnNic) {
  PlatformSpec p = star(4, 4, 10);
  p.topology = "rail";
  p.loopback_Bps = 100e9;  // an accelerator node's (NVLink-class): the network is what limits
  auto hier = spec("allreduce", comm::Algo::hierarchical, 64u << 20);
  hier.group_size = 4;
  auto rails = hier;
  rails.algo = comm::Algo::rails;
  const auto h = simulateCollective(p, hier), r = simulateCollective(p, rails);
  EXPECT_EQ(r.inter_node_bytes, h.inter_node_bytes);
  EXPECT_LT(r.time_s, h.time_s / 2.5) << "rails " << r.time_s << " s, hier " << h.time_s << " s";
  PlatformSpec one = star(1, 4, 0.001);
  one.topology = "rail";
  one.loopback_Bps = 4e9;
  const auto inside = simulateCollective(one, spec("allreduce", comm::Algo::ring, 1u << 20));
  EXPECT_EQ(inside.inter_node_bytes, 0u);
  EXPECT_LT(inside.time_s, 0.05);
}
