// In-network aggregation (src/sim/ina.cpp): on a star whose switch sums, an allreduce sends the
// buffer once up and once down each rank's link at the same time, so it takes about bytes / link
// rate at any world size (the ring: 2 (n - 1) / n of that), every rank sends the buffer once, in
// chunks; a training step's calls (one after another on one group, over both threads) all go
// through it. On a fat-tree the leaves sum their members' chunks and the spines the leaves' partial
// sums (oversubscription costs nothing); a node's ranks sum in its memory first and its leader
// streams the sum; only stars and fat-trees sum.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "lowcomm/base/error.h"
#include "lowcomm/sim/collectives.h"
#include "lowcomm/sim/predict.h"
#include "lowcomm/sim/replay.h"
#include "timeline_fixture.h"

using namespace lowcomm;
using namespace lowcomm::sim;

namespace {

PlatformSpec star(int nodes, bool ina) {
  PlatformSpec p;
  p.nodes = nodes;
  p.link_Bps = 10e9 / 8;
  p.link_latency_s = 2e-6;
  p.reduce_Bps = 1e15;  // reductions free: only the network counts
  p.notice_bytes = 0;
  p.in_network_aggregation = ina;
  return p;
}

CollectiveSpec allreduce(size_t bytes) {
  CollectiveSpec s;
  s.bytes = bytes;
  return s;
}

}  // namespace

TEST(SimIna, AnAllreduceTakesTheBufferOverOneLinkAtAnyWorldSize) {
  const size_t bytes = 16 << 20;
  for (int n : {2, 4, 16}) {
    const auto p = star(n, true);
    const auto r = simulateCollective(p, allreduce(bytes));
    const double wire = bytes / p.link_Bps;
    // Up and down overlap; the pipeline fill (a window of 4 chunks of 256 KiB, 1/16 of the
    // buffer) and the latencies come on top.
    EXPECT_GT(r.time_s, wire) << n;
    EXPECT_LT(r.time_s, wire * (1 + 1.0 / 16) + 0.001) << n;
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(r.bytes_sent[i], bytes) << n;
      EXPECT_EQ(r.bytes_recv[i], bytes) << n;
      EXPECT_EQ(r.messages_sent[i], 64u) << n;  // 256 KiB chunks
    }
    EXPECT_EQ(r.inter_node_bytes, n * bytes);
    const auto ring = simulateCollective(star(n, false), allreduce(bytes));
    EXPECT_GT(ring.time_s / r.time_s, 2.0 * (n - 1) / n * 0.9) << n << " nodes: ring " << ring.time_s;
  }
}

TEST(SimIna, BigBuffersGoInAtMost64Chunks) {
  const auto r = simulateCollective(star(4, true), allreduce(64 << 20));
  EXPECT_EQ(r.messages_sent[0], 64u);  // 1 MiB chunks
  EXPECT_EQ(r.bytes_sent[0], 64u << 20);
  const auto small = simulateCollective(star(4, true), allreduce(1000));
  EXPECT_EQ(small.messages_sent[0], 1u);
}

TEST(SimIna, EveryAllreduceOfATrainingStepGoesThroughTheSwitch) {
  // The 2 steps of a 2-rank DDP timeline (a bucket's allreduce each, on the communication
  // thread), predicted on 8 nodes with and without the switch: one group's calls in a row.
  const auto path = fixture::tempPath("ina_ddp");
  fixture::writeTrace(path, fixture::ddpSteps(2, 8 << 20, 10.0));
  const auto progs = readTimeline(path, {});
  std::remove(path.c_str());
  const auto ring = star(8, false), ina = star(8, true);
  const auto r_ring = replay(ring, extrapolate(progs[0], 2, ring, {"ring"}));
  const auto r_ina = replay(ina, extrapolate(progs[0], 2, ina, {"ring"}));
  EXPECT_EQ(r_ina.calls, r_ring.calls);
  // The ring sends 2 (n - 1) / n of each allreduce per rank, the switch's ranks the buffer once.
  EXPECT_NEAR(static_cast<double>(r_ina.bytes_sent[3]) / r_ring.bytes_sent[3], 8.0 / (2 * 7), 0.01);
  // The bucket is ready 10 ms before backward ends: the ring's 8 MiB at 10 Gbit/s over 8 ranks
  // (11.7 ms) sticks out, the switch's (6.7 ms) hides behind the 35 ms of compute.
  EXPECT_GT(r_ring.predicted_step_s, 0.0355);
  EXPECT_NEAR(r_ina.predicted_step_s, 0.035, 1e-4);
}

namespace {

PlatformSpec fatTree(int nodes, int leaf, int oversubscription, bool ina) {
  PlatformSpec p = star(nodes, ina);
  p.topology = "fat-tree";
  p.leaf_size = leaf;
  p.oversubscription = oversubscription;
  return p;
}

}  // namespace

TEST(SimIna, AFatTreeOfSummingSwitchesTakesTheBufferOverOneLinkWhateverItsOversubscription) {
  // 32 nodes under 4 leaves of 8: 8 spines at 1:1, 2 at 4:1. Each leaf's uplinks carry its partial
  // sums once up and the totals once down (1/spines of the buffer each), so 4:1 costs nothing;
  // the ring crosses the spine on 2 uplinks per leaf and sends 2 (n - 1) / n of the buffer.
  const size_t bytes = 16 << 20;
  const auto full = simulateCollective(fatTree(32, 8, 1, true), allreduce(bytes));
  const auto over = simulateCollective(fatTree(32, 8, 4, true), allreduce(bytes));
  const double wire = bytes / star(32, true).link_Bps;
  for (const auto* r : {&full, &over}) {
    // A chunk crosses 4 links on its way to its sum and back (the star's: 2): the pipeline's
    // fill and drain are 3 chunks longer (3/64 of the buffer).
    EXPECT_GT(r->time_s, wire);
    EXPECT_LT(r->time_s, wire * (1 + 4.0 / 64) + 0.001);
    for (int i = 0; i < 32; ++i) {
      EXPECT_EQ(r->bytes_sent[i], bytes) << i;
      EXPECT_EQ(r->bytes_recv[i], bytes) << i;
      EXPECT_EQ(r->messages_sent[i], 64u) << i;
    }
    EXPECT_EQ(r->inter_node_bytes, 32 * bytes);
  }
  EXPECT_NEAR(over.time_s / full.time_s, 1.0, 0.01);
  const auto ring = simulateCollective(fatTree(32, 8, 4, false), allreduce(bytes));
  EXPECT_GT(ring.time_s / over.time_s, 2.0 * 31 / 32 * 0.9) << "ring " << ring.time_s;
  // The star's switch: one hop less each way.
  const auto flat = simulateCollective(star(32, true), allreduce(bytes));
  EXPECT_LT(flat.time_s, over.time_s);
  EXPECT_GT(flat.time_s / over.time_s, 0.9);
}

TEST(SimIna, OnAFatTreeALeafsPartialSumsCrossTheSpineOnce) {
  // 2 steps of a 2-rank DDP timeline on 8 nodes under leaves of 4: every rank sends its buffer
  // once to its leaf, each leaf its partial sum once over its uplinks (counted as cross-leaf
  // bytes of its 4 members, a quarter each).
  const auto path = fixture::tempPath("ina_fat_tree");
  fixture::writeTrace(path, fixture::ddpSteps(2, 8 << 20, 10.0));
  const auto progs = readTimeline(path, {});
  std::remove(path.c_str());
  const auto ina = fatTree(8, 4, 2, true);
  const auto whole = replay(ina, extrapolate(progs[0], 2, ina, {"ring"}));
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(whole.inter_leaf_sent[r], whole.bytes_sent[r] / 4) << r;  // a leaf's partial sums, over its 4 members
    EXPECT_EQ(whole.inter_node_sent[r], whole.bytes_sent[r]) << r;
  }
  const auto ring = replay(fatTree(8, 4, 2, false), extrapolate(progs[0], 2, fatTree(8, 4, 2, false), {"ring"}));
  EXPECT_NEAR(static_cast<double>(whole.bytes_sent[3]) / ring.bytes_sent[3], 8.0 / (2 * 7), 0.01);
  // As in the star's test: the switches' 8 MiB (6.7 ms and the longer pipeline) hide behind
  // the compute, the ring's (11.7 ms) does not.
  EXPECT_NEAR(whole.predicted_step_s, 0.035, 1e-4);
  EXPECT_GT(ring.predicted_step_s, 0.0355);
}

TEST(SimIna, ANodesRanksSumInItsMemoryAndItsLeaderStreamsTheSum) {
  // 4 nodes x 4 ranks, node memory free: the leaders' streams take what one rank per node takes,
  // and only they cross the network, the buffer once each.
  const size_t bytes = 16 << 20;
  auto p = star(4, true);
  p.ppn = 4;
  p.node_memory_Bps = 1e15;
  const auto r = simulateCollective(p, allreduce(bytes));
  const auto one = simulateCollective(star(4, true), allreduce(bytes));
  EXPECT_NEAR(r.time_s / one.time_s, 1.0, 0.01) << r.time_s << " vs " << one.time_s;
  EXPECT_EQ(r.inter_node_bytes, 4 * bytes);
  for (int i = 0; i < 16; ++i) {
    if (i % 4 == 0)
      EXPECT_GE(r.messages_sent[i], 64u) << i;  // the leader's 64 chunks (and its node-memory records)
    else
      EXPECT_LT(r.messages_sent[i], 8u) << i;  // node-memory records only
  }
  // The node's part costs its memory's time: a 2 GB/s node memory adds several passes over 16 MiB.
  p.node_memory_Bps = 2e9;
  const auto slow = simulateCollective(p, allreduce(bytes));
  EXPECT_GT(slow.time_s, r.time_s + 3 * bytes / 2e9) << slow.time_s;
  EXPECT_EQ(slow.inter_node_bytes, 4 * bytes);
  // A fat-tree's leaves sum the leaders' streams the same way.
  auto ft = fatTree(8, 4, 2, true);
  ft.ppn = 2;
  ft.node_memory_Bps = 1e15;
  const auto f = simulateCollective(ft, allreduce(bytes));
  EXPECT_EQ(f.inter_node_bytes, 8 * bytes);
  EXPECT_NEAR(f.time_s / simulateCollective(fatTree(8, 4, 2, true), allreduce(bytes)).time_s, 1.0, 0.01);
}

TEST(SimIna, ASubgroupsShareOfEachNodeSumsInItsMemory) {
  // 4 nodes x 4 ranks; the even and the odd ranks each run an allreduce of their own (as
  // AB-training's groups): a node holds 2 members of each group, which sum in its memory, so
  // 2 leaders per node (one per group) put the buffer on the network, not 4 ranks.
  const uint64_t bytes = 4 << 20;
  nlohmann::json ev = nlohmann::json::array();
  for (int r = 0; r < 16; ++r) {
    std::string ranks;
    for (int m = r % 2; m < 16; m += 2) ranks += (ranks.empty() ? "" : ",") + std::to_string(m);
    ev.push_back(fixture::event(r, 0, "allreduce", "collective", 1000, 100,
                                {{"bytes", std::to_string(bytes)}, {"dtype", "f32"}, {"algo", "ring"}, {"ranks", ranks}}));
    ev.push_back(fixture::event(r, 2, "ab", "phase", 900, 300));
  }
  const auto path = fixture::tempPath("ina_subgroups");
  fixture::writeTrace(path, ev);
  const auto progs = readTimeline(path, {});
  std::remove(path.c_str());
  auto p = star(4, true);
  p.ppn = 4;
  p.node_memory_Bps = 1e15;
  const auto r = replay(p, progs);
  uint64_t network = 0;
  for (int i = 0; i < 16; ++i) {
    network += r.inter_node_sent[i];
    EXPECT_EQ(r.inter_node_sent[i], i % 4 < 2 ? bytes : 0) << "rank " << i;  // ranks 0 and 1 of each node lead
  }
  EXPECT_EQ(network, 8 * bytes);
}

TEST(SimIna, EveryFatTreeShapeSums) {
  // Fewer chunks than spines (one 4 KiB chunk, 4 spines), hosts alone under their leaf (leaf_size
  // 1: 4 leaves, 1 spine), fewer nodes than a leaf holds (one leaf, no spine), an empty buffer.
  struct Shape {
    int nodes, leaf, oversubscription;
    size_t bytes;
  };
  for (const Shape& t : {Shape{8, 4, 1, 4096}, Shape{4, 1, 1, 1 << 20}, Shape{4, 16, 1, 1 << 20}, Shape{8, 4, 2, 0}}) {
    const auto r = simulateCollective(fatTree(t.nodes, t.leaf, t.oversubscription, true), allreduce(t.bytes));
    const std::string what = std::to_string(t.nodes) + " nodes, leaves of " + std::to_string(t.leaf);
    EXPECT_EQ(r.inter_node_bytes, t.nodes * t.bytes) << what;
    for (int i = 0; i < t.nodes; ++i) EXPECT_EQ(r.bytes_recv[i], t.bytes) << what << ", rank " << i;
    if (t.bytes > 0) {
      EXPECT_GT(r.time_s, t.bytes / star(4, true).link_Bps) << what;
    }
  }
}

TEST(SimIna, OnlyAStarOrAFatTreeSums) {
  auto p = star(4, true);
  p.topology = "torus";
  try {
    validate(p);
    ADD_FAILURE() << "a torus with in-network aggregation was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("in_network_aggregation"), std::string::npos) << e.what();
  }
  p.topology = "rail";
  EXPECT_THROW(validate(p), ConfigError);
  EXPECT_NO_THROW(validate(fatTree(8, 4, 2, true)));
  p = star(4, true);
  p.ina_window = 0;
  EXPECT_THROW(validate(p), ConfigError);
}
