// Predicting at another scale: rank 0's program of a 2-rank DDP timeline, run by the ranks of a
// larger simulated cluster. At the recorded size it replays exactly as the timeline itself; the
// ring's bytes per rank follow 2(n-1)/n of the buffer at every size; a fat-tree's
// oversubscription slows halving-doubling (whose far steps cross the spine) but not the ring
// (whose neighbours share a leaf); the compute/codec split comes from the recorded durations;
// AB-training's group calls map to each rank's own block, fixed or proportional; groups neither
// contiguous nor evenly strided (streamed_replay_test.cpp has the strided ones), and worlds past
// the communicator's limit, are errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "lowcomm/base/error.h"
#include "lowcomm/sim/predict.h"
#include "lowcomm/sim/replay.h"
#include "timeline_fixture.h"

using namespace lowcomm;
using namespace lowcomm::sim;
using namespace lowcomm::sim::fixture;

namespace {

PlatformSpec platform(const std::string& topology, int nodes, double gbit) {
  PlatformSpec p;
  p.topology = topology;
  p.nodes = nodes;
  p.link_Bps = gbit * 1e9 / 8;
  p.link_latency_s = 2e-6;
  p.notice_bytes = 0;
  return p;
}

// Rank 0 of a 2-rank DDP run: 2 steps of 35 ms compute and one bucket of `bytes`, ready at the
// end of backward.
RankProgram recorded(uint64_t bytes, const std::string& name) {
  const auto path = tempPath(name);
  writeTrace(path, ddpSteps(2, bytes, 20.0));
  auto progs = readTimeline(path, {});
  std::remove(path.c_str());
  return progs[0];
}

}  // namespace

TEST(SimPredict, AtTheRecordedSizeItIsTheReplay) {
  const auto path = tempPath("predict_same");
  writeTrace(path, ddpSteps(2, 8 << 20, 12.0));
  const auto progs = readTimeline(path, {});
  std::remove(path.c_str());
  const auto p = platform("star", 2, 1.0);
  const auto direct = replay(p, progs);
  const auto predicted = replay(p, extrapolate(progs[0], 2, p, {"recorded"}));
  EXPECT_DOUBLE_EQ(predicted.predicted_step_s, direct.predicted_step_s);
  EXPECT_EQ(predicted.bytes_sent, direct.bytes_sent);
  EXPECT_EQ(predicted.messages_sent, direct.messages_sent);
}

TEST(SimPredict, TheRingsBytesPerRankFollowItsFormulaAtEverySize) {
  const uint64_t bytes = 16 << 20;
  const auto prog = recorded(bytes, "predict_ring");
  double last = 0;
  for (int n : {2, 4, 8, 16}) {
    const auto p = platform("fat-tree", n, 10.0);
    const auto r = replay(p, extrapolate(prog, 2, p, {"ring"}));
    // 2 steps of 2 (n - 1) chunks of bytes / n each (16 MiB divides by every n here).
    EXPECT_EQ(r.bytes_sent[n - 1], 2 * 2 * (n - 1) * (bytes / n)) << n << " nodes";
    EXPECT_EQ(r.inter_node_sent[0], r.bytes_sent[0]);
    EXPECT_EQ(r.inter_leaf_sent[0], 0u);  // one leaf of 16
    // Compute (35 ms) plus at least the ring's bandwidth term; slower with more ranks.
    const double ring_s = 2.0 * (n - 1) / n * bytes / p.link_Bps;
    EXPECT_GT(r.predicted_step_s, 0.035 + ring_s) << n;
    EXPECT_LT(r.predicted_step_s, 0.035 + 1.5 * ring_s + 0.005) << n;
    EXPECT_GE(r.predicted_step_s, last);
    last = r.predicted_step_s;
  }
}

TEST(SimPredict, OversubscriptionSlowsHalvingDoublingNotTheRing) {
  const auto prog = recorded(32 << 20, "predict_oversub");
  auto run = [&](const std::string& algo, int over) {
    auto p = platform("fat-tree", 32, 10.0);
    p.leaf_size = 16;
    p.oversubscription = over;
    return replay(p, extrapolate(prog, 2, p, {algo}));
  };
  const auto ring1 = run("ring", 1), ring4 = run("ring", 4), hd1 = run("hd", 1), hd4 = run("hd", 4);
  // The ring crosses the spine on 2 of its 32 edges: 4 uplinks per leaf are plenty.
  EXPECT_NEAR(ring4.predicted_step_s / ring1.predicted_step_s, 1.0, 0.02);
  // Halving-doubling's first step pairs rank i with i + 16: all 16 ranks of a leaf cross at once.
  EXPECT_GT(hd4.predicted_step_s, 1.3 * hd1.predicted_step_s);
  EXPECT_GT(hd1.inter_leaf_sent[0], 0u);
  EXPECT_LT(hd1.inter_leaf_sent[0], hd1.inter_node_sent[0]);
  EXPECT_EQ(hd1.bytes_sent, hd4.bytes_sent);
}

TEST(SimPredict, TorusAndStarMoveTheSameBytes) {
  const auto prog = recorded(4 << 20, "predict_torus");
  const auto star = platform("star", 16, 10.0), torus = platform("torus", 16, 10.0);
  const auto a = replay(star, extrapolate(prog, 2, star, {}));
  const auto b = replay(torus, extrapolate(prog, 2, torus, {}));
  EXPECT_EQ(a.bytes_sent, b.bytes_sent);
  EXPECT_GT(b.predicted_step_s, 0.035);
}

TEST(SimPredict, AutoChoosesWhatTheCommunicatorWould) {
  auto small = recorded(4096, "predict_auto");
  const auto p = platform("star", 8, 10.0);
  EXPECT_EQ(extrapolate(small, 2, p, {})[0].calls[0].algo, comm::Algo::halving_doubling);  // <= 16 KiB
  auto big = recorded(1 << 20, "predict_auto_big");
  EXPECT_EQ(extrapolate(big, 2, p, {})[0].calls[0].algo, comm::Algo::ring);
  auto p2 = p;
  p2.ppn = 2;
  const auto node = extrapolate(big, 2, p2, {});
  EXPECT_EQ(node[0].calls[0].algo, comm::Algo::hierarchical);
  // Its node part in shared memory, as the communicator would run it; over TCP with no piece.
  EXPECT_EQ(node[0].calls[0].node_piece, comm::CommOptions{}.shm_piece_bytes);
  PredictOptions tcp;
  tcp.node_piece = 0;
  const auto over_tcp = extrapolate(big, 2, p2, tcp);
  EXPECT_EQ(over_tcp[0].calls[0].node_piece, 0u);
  auto recorded_node = big;  // recorded in shared memory: its piece stays, unless asked for TCP
  for (auto& c : recorded_node.calls) c.node_piece = 64 << 10;
  EXPECT_EQ(extrapolate(recorded_node, 2, p2, {})[0].calls[0].node_piece, 64u << 10);
  EXPECT_EQ(extrapolate(recorded_node, 2, p2, tcp)[0].calls[0].node_piece, 0u);
  auto fast_memory = p2;  // node memory far faster than the loopback: the node version is faster
  fast_memory.node_memory_Bps = 1e12;
  const auto r_node = replay(fast_memory, node), r_tcp = replay(fast_memory, over_tcp);
  EXPECT_EQ(r_node.inter_node_sent, r_tcp.inter_node_sent);  // the leaders' ring alike
  EXPECT_LT(r_node.predicted_step_s, r_tcp.predicted_step_s);
  // An allgatherv: the ring on one rank per node, hierarchical on 2 per node, as recorded if asked.
  for (auto& c : big.calls) c.op = "allgatherv", c.rank_bytes = {c.bytes / 2, c.bytes / 2};
  EXPECT_EQ(extrapolate(big, 2, p, {})[0].calls[0].algo, comm::Algo::ring);
  const auto hier = extrapolate(big, 2, p2, {});
  EXPECT_EQ(hier[0].calls[0].algo, comm::Algo::hierarchical);
  EXPECT_EQ(hier[0].calls[0].group_size, 2);
  EXPECT_EQ(extrapolate(big, 2, p2, {"recorded"})[0].calls[0].algo, comm::Algo::ring);
  EXPECT_GT(replay(p2, hier).predicted_step_s, 0.035);  // the hierarchical program runs
}

// On a setting of sites the automatic allreduce is `sites`, grouped by site, as the communicator
// over those ranks would choose it (comm::autoAllreduce with the topology's site layout).
TEST(SimPredict, AutoChoosesSitesAcrossSites) {
  auto big = recorded(1 << 20, "predict_auto_sites");
  const auto wan = parseSetting("2s2x1@1gbit/100mbit,50ms");
  const auto progs = extrapolate(big, 2, wan, {});
  EXPECT_EQ(progs[0].calls[0].algo, comm::Algo::sites);
  EXPECT_EQ(progs[0].calls[0].group_size, 2);
  EXPECT_GT(replay(wan, progs).predicted_step_s, 0.035);  // the sites program runs
}

// On a setting of sites the automatic allgatherv is hierarchical grouped by site, as the
// communicator would choose it (comm::autoAllgather): each site's blocks cross the WAN once, in
// one WAN exchange, against the ring's 3 latency-bound steps; a named algorithm keeps the node's
// grouping.
TEST(SimPredict, AutoAllgatherGroupsBySiteAcrossSites) {
  auto big = recorded(1 << 20, "predict_allgather_sites");
  for (auto& c : big.calls) c.op = "allgatherv", c.rank_bytes = {c.bytes / 2, c.bytes / 2};
  const auto wan = parseSetting("2s2x1@1gbit/100mbit,50ms");
  const auto hier = extrapolate(big, 2, wan, {});
  EXPECT_EQ(hier[0].calls[0].algo, comm::Algo::hierarchical);
  EXPECT_EQ(hier[0].calls[0].group_size, 2);
  const auto ring = extrapolate(big, 2, wan, {"ring"});
  EXPECT_EQ(ring[0].calls[0].algo, comm::Algo::ring);
  EXPECT_EQ(ring[0].calls[0].group_size, 1);
  const auto by_site = replay(wan, hier), by_ring = replay(wan, ring);
  uint64_t site_bytes = 0, ring_bytes = 0;
  for (auto b : by_site.inter_site_sent) site_bytes += b;
  for (auto b : by_ring.inter_site_sent) ring_bytes += b;
  // Every block crosses once (4 blocks), against the ring's 6 crossings (two links of its 4 cross).
  EXPECT_GT(site_bytes, 0u);
  EXPECT_EQ(site_bytes * 3, ring_bytes * 2);
  EXPECT_LT(by_site.predicted_step_s, by_ring.predicted_step_s);  // 1 WAN round trip per call, not 3
  const auto lan = parseSetting("4x1@1gbit");  // no sites: the ring, as before
  EXPECT_EQ(extrapolate(big, 2, lan, {})[0].calls[0].algo, comm::Algo::ring);
}

TEST(SimPredict, StepWorkIsTheRecordedComputeAndCodecTime) {
  const auto w = stepWork(recorded(1 << 20, "predict_work"));
  EXPECT_NEAR(w.compute_s, 0.03525, 1e-9);  // forward 10 + backward 20 + optimizer 5 ms, and half the 0.5 ms gap
  EXPECT_NEAR(w.codec_s, 0.0002, 1e-9);   // the bucket's time outside its allreduce
}

TEST(SimPredict, GroupCallsAndTooManyRanksAreErrors) {
  auto prog = recorded(1 << 20, "predict_bad");
  const auto p = platform("star", 8, 10.0);
  auto grouped = prog;
  grouped.calls[0].ranks = {1};  // rank 1 alone: not rank 0's block (a grid axis would be strided)
  try {
    extrapolate(grouped, 2, p, {});
    FAIL() << "a strided group's call was extrapolated";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("group of 1 of its 2 ranks; only groups of contiguous ranks"), std::string::npos)
        << e.what();
  }
  grouped.calls[0].ranks = {0};
  PredictOptions bad_groups;
  bad_groups.groups = "some";
  EXPECT_THROW(extrapolate(grouped, 2, p, bad_groups), ConfigError);
  EXPECT_THROW(extrapolate(prog, 2, platform("fat-tree", 8192, 10.0), {}), ConfigError);  // > 4096 ranks
  EXPECT_THROW(extrapolate(prog, 2, p, {"bogus"}), ConfigError);
  auto bad = platform("fat-tree", 24, 10.0);  // 24 nodes do not fill leaves of 16
  EXPECT_THROW(extrapolate(prog, 2, bad, {}), ConfigError);
  bad.nodes = 32;
  bad.oversubscription = 3;  // does not divide 16
  EXPECT_THROW(extrapolate(prog, 2, bad, {}), ConfigError);
  auto piped = prog;  // a pipeline stage's send: rank 0's program cannot stand for the other stage
  piped.calls[0] = CallSpec{};
  piped.calls[0].op = "send";
  piped.calls[0].sends = {{1, 1024}};
  try {
    extrapolate(piped, 2, p, {});
    FAIL() << "a point-to-point call was extrapolated";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("point-to-point"), std::string::npos) << e.what();
  }
}

TEST(SimPredict, AComputeSpeedupDividesComputeAndCodecTimeOnly) {
  const auto prog = recorded(1 << 20, "predict_speedup");
  const auto p = platform("star", 4, 10.0);
  PredictOptions fast;
  fast.compute_speedup = 10;
  const auto slow_r = replay(p, extrapolate(prog, 2, p, {}));
  const auto fast_r = replay(p, extrapolate(prog, 2, p, fast));
  // The step loses 9/10 of its 35.2 ms of compute and codec time; the allreduce stays.
  EXPECT_NEAR(slow_r.predicted_step_s - fast_r.predicted_step_s, 0.9 * 0.0352, 1e-6);
  EXPECT_EQ(slow_r.bytes_sent, fast_r.bytes_sent);
  fast.compute_speedup = 0;
  EXPECT_THROW(extrapolate(prog, 2, p, fast), ConfigError);
}

// A ring over more than max_ring ranks runs on a sample and is scaled: on 192 ranks (two fat-tree
// leaves of 96, 4:1) the coarse step time is within 1 % of the exact simulation, with the same
// bytes per rank and the same inter-node and cross-leaf parts; rings at or under the bound are
// exact. So with a host time per call (calibrate --call-overheads), which the sample waits once
// like every rank, not once per scaled step.
TEST(SimPredict, ACoarseRingFollowsTheExactOneWithinOnePercent) {
  for (const std::string algo : {"ring", "allgatherv", "ring+call_overhead"}) {
    auto prog = recorded(6 << 20, "predict_coarse");
    if (algo == "allgatherv") {
      for (auto& c : prog.calls) c.op = "allgatherv", c.rank_bytes = {c.bytes / 8, c.bytes / 8};
    }
    auto p = platform("fat-tree", 192, 10.0);
    p.leaf_size = 96;
    p.oversubscription = 4;
    if (algo == "ring+call_overhead") p.call_overhead_s = {{"allreduce/ring", 5e-3}};
    const auto programs = extrapolate(prog, 2, p, {"ring"});
    const auto exact = replay(p, programs);
    const auto coarse = replay(p, programs, CoarseOptions{48});
    const auto same = replay(p, programs, CoarseOptions{192});
    EXPECT_EQ(exact.coarse_calls, 0u);
    EXPECT_EQ(same.coarse_calls, 0u);
    EXPECT_EQ(coarse.coarse_calls, 2u) << algo;  // one bucket in each of 2 steps
    EXPECT_NEAR(coarse.predicted_step_s / exact.predicted_step_s, 1.0, 0.01) << algo;
    EXPECT_DOUBLE_EQ(same.predicted_step_s, exact.predicted_step_s);
    for (int r : {0, 95, 96, 191}) {
      EXPECT_NEAR(static_cast<double>(coarse.bytes_sent[r]) / exact.bytes_sent[r], 1.0, 1e-3) << algo << " rank " << r;
      EXPECT_EQ(coarse.inter_leaf_sent[r] > 0, exact.inter_leaf_sent[r] > 0) << algo << " rank " << r;
    }
  }
}

// The hierarchical allreduce (node parts in node memory) over more than max_ring nodes runs on
// every k-th node and is scaled: on 96 nodes × 2 (two leaves of 48, 4:1) and 24 nodes × 8 the
// coarse step of every rank is within 1 % of the exact one, with each rank's bytes and the
// inter-node and cross-leaf parts as the exact run's (the leaders send, the others do not);
// over TCP (node_piece 0) it is not coarsened.
TEST(SimPredict, ACoarseHierarchicalAllreduceFollowsTheExactOneWithinOnePercent) {
  struct Shape {
    int nodes, ppn, max_ring;
    size_t piece;
  };
  for (const Shape sh : {Shape{96, 2, 24, size_t{256} << 10}, Shape{24, 8, 6, size_t{256} << 10}, Shape{96, 2, 24, 0}}) {
    const size_t piece = sh.piece;
    auto prog = recorded(12 << 20, "predict_coarse_hier");
    auto p = platform("fat-tree", sh.nodes, 10.0);
    p.ppn = sh.ppn;
    p.leaf_size = sh.nodes / 2;
    p.oversubscription = 4;
    PredictOptions o;
    o.algo = "hier";
    o.node_piece = piece;
    const auto programs = extrapolate(prog, 2, p, o);
    const auto exact = replay(p, programs);
    const auto coarse = replay(p, programs, CoarseOptions{sh.max_ring});
    const auto same = replay(p, programs, CoarseOptions{sh.nodes});
    EXPECT_EQ(exact.coarse_calls, 0u);
    EXPECT_EQ(same.coarse_calls, 0u);
    EXPECT_DOUBLE_EQ(same.predicted_step_s, exact.predicted_step_s);
    if (piece == 0) {
      EXPECT_EQ(coarse.coarse_calls, 0u);
      EXPECT_DOUBLE_EQ(coarse.predicted_step_s, exact.predicted_step_s);
      continue;
    }
    EXPECT_EQ(coarse.coarse_calls, 2u);  // one bucket in each of 2 steps
    const int n = sh.nodes * sh.ppn;
    for (int r = 0; r < n; ++r) {
      EXPECT_NEAR(coarse.predicted_step_by_rank[r] / exact.predicted_step_by_rank[r], 1.0, 0.01) << "rank " << r;
      EXPECT_NEAR(static_cast<double>(coarse.bytes_sent[r]), static_cast<double>(exact.bytes_sent[r]),
                  1e-3 * static_cast<double>(exact.bytes_sent[0]))
          << "rank " << r;
      EXPECT_EQ(coarse.inter_node_sent[r] > 0, r % sh.ppn == 0) << "rank " << r;
      EXPECT_EQ(coarse.inter_leaf_sent[r] > 0, exact.inter_leaf_sent[r] > 0) << "rank " << r;
    }
  }
}

// rails over more than max_ring nodes runs on every k-th node (its node steps whole, its rings
// with the full rings' chunk per step) and is scaled: on 32 nodes x 8 (the rail topology, and a
// 4:1 fat-tree of two leaves with Gloo's notices) every rank's coarse step is within 1 % of the
// exact one, with its bytes, and the same inter-node and cross-leaf parts.
TEST(SimPredict, ACoarseRailsAllreduceFollowsTheExactOneWithinOnePercent) {
  for (const std::string topology : {"rail", "fat-tree"}) {
    auto prog = recorded(12 << 20, "predict_coarse_rails");
    auto p = platform(topology, 32, 10.0);
    p.ppn = 8;
    if (topology == "fat-tree") p.leaf_size = 16, p.oversubscription = 4, p.notice_bytes = 114;
    PredictOptions o;
    o.algo = "rails";
    const auto programs = extrapolate(prog, 2, p, o);
    const auto exact = replay(p, programs);
    EXPECT_EQ(exact.coarse_calls, 0u);
    for (int max_ring : {16, 8}) {
      const auto coarse = replay(p, programs, CoarseOptions{max_ring});
      EXPECT_EQ(coarse.coarse_calls, 2u) << topology;  // one bucket in each of 2 steps
      for (int r = 0; r < 256; ++r) {
        const std::string what = topology + ", 1 node in " + std::to_string(32 / max_ring) + ", rank " + std::to_string(r);
        // Within 1 % of the step's communication (the step less its 35 ms of compute), not only of the step.
        EXPECT_NEAR((coarse.predicted_step_by_rank[r] - exact.predicted_step_by_rank[r]) /
                        (exact.predicted_step_by_rank[r] - 0.035), 0.0, 0.01) << what;
        EXPECT_NEAR(static_cast<double>(coarse.bytes_sent[r]), static_cast<double>(exact.bytes_sent[r]),
                    1e-3 * static_cast<double>(exact.bytes_sent[r])) << what;
        EXPECT_NEAR(static_cast<double>(coarse.inter_node_sent[r]), static_cast<double>(exact.inter_node_sent[r]),
                    1e-3 * static_cast<double>(exact.inter_node_sent[r])) << what;
        EXPECT_EQ(coarse.inter_leaf_sent[r] > 0, exact.inter_leaf_sent[r] > 0) << what;
      }
    }
  }
  // A call whose rails' shares leave some node of their rings without an element runs exact.
  auto p = platform("rail", 32, 10.0);
  p.ppn = 8;
  PredictOptions o;
  o.algo = "rails";
  const auto small = extrapolate(recorded(512, "predict_coarse_rails_small"), 2, p, o);  // 16 floats per rail, 32 nodes
  const auto exact = replay(p, small), coarse = replay(p, small, CoarseOptions{8});
  EXPECT_EQ(coarse.coarse_calls, 0u);
  EXPECT_EQ(coarse.bytes_sent, exact.bytes_sent);
  EXPECT_DOUBLE_EQ(coarse.predicted_step_s, exact.predicted_step_s);
}

// Rank 0 of 4 recorded ranks ran its group's allreduce over ranks {0, 1}: on 8 ranks each rank
// runs it over its own block, of 2 ranks ("fixed") or 4 ("proportional"), and sends the group
// ring's 2 (g - 1) / g of the buffer per call; world calls stay over all 8.
TEST(SimPredict, GroupCallsRunOverEachRanksOwnBlock) {
  auto prog = recorded(1 << 20, "predict_groups");
  prog.calls[0].ranks = {0, 1};  // step 1's bucket: a group call; step 2's stays a world call
  const auto p = platform("star", 8, 10.0);
  for (const std::string mode : {"fixed", "proportional"}) {
    PredictOptions o;
    o.groups = mode;
    o.algo = "ring";
    const auto progs = extrapolate(prog, 4, p, o);
    const int g = mode == "fixed" ? 2 : 4;
    for (int r : {0, 5, 7}) {
      std::vector<int> want;
      for (int k = 0; k < g; ++k) want.push_back(r / g * g + k);
      EXPECT_EQ(progs[r].calls[0].ranks, want) << mode << " rank " << r;
      EXPECT_TRUE(progs[r].calls[1].ranks.empty());
    }
    const auto res = replay(p, progs);
    const uint64_t group_bytes = 2 * (g - 1) * ((1 << 20) / g), world_bytes = 2 * 7 * ((1 << 20) / 8);
    EXPECT_EQ(res.bytes_sent[5], group_bytes + world_bytes) << mode;
  }
  prog.calls[0].ranks = {0, 1, 2};  // 3 does not split 4
  EXPECT_THROW(extrapolate(prog, 4, p, {}), ConfigError);
}

// The step time a prediction reports runs from one step's start to the next: work between the
// step spans (AB-training's syncs happen before a step begins) counts.
TEST(SimPredict, TheCycleCountsWhatRunsBetweenTheSteps) {
  const auto path = tempPath("predict_cycle");
  writeTrace(path, ddpSteps(2, 1 << 20, 20.0));
  const auto progs = readTimeline(path, {});
  std::remove(path.c_str());
  const auto r = replay(platform("star", 2, 10.0), progs);
  EXPECT_NEAR(r.predicted_cycle_s, r.predicted_step_s + 0.0005 / 2, 1e-9);  // one 0.5 ms gap over 2 steps
}
