// DiLoCo's outer exchanges behind the compute (timeline lane 3): read into background programs
// with their launch and wait points, replayed on a third actor so that an exchange shorter than
// the compute between its launch and its wait costs nothing and a longer one costs its excess;
// predicted at other sizes with the cross-site groups (every s-th rank) mapped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "lowcomm/base/error.h"
#include "lowcomm/sim/collectives.h"
#include "lowcomm/sim/predict.h"
#include "lowcomm/sim/replay.h"
#include "timeline_fixture.h"

using namespace lowcomm;
using namespace lowcomm::sim;
using namespace lowcomm::sim::fixture;

namespace {

constexpr double kComputeMs = 20, kOptimizerMs = 1;

// Three steps of `ranks` ranks: forward kComputeMs, optimizer kOptimizerMs; at the end of step
// 0's forward an outer exchange (one allreduce of `bytes` over `members`, or the world) is
// queued on lane 3 `queued_ms` before it starts; step 2 begins by waiting for it.
nlohmann::json streamedSteps(int ranks, uint64_t bytes, double queued_ms = 0, const std::string& members = "") {
  nlohmann::json ev = nlohmann::json::array();
  const double step_us = (kComputeMs + kOptimizerMs) * 1000;
  for (int r = 0; r < ranks; ++r) {
    for (int s = 0; s < 3; ++s) {
      const double t = 1000 + s * step_us;
      ev.push_back(event(r, 0, "forward", "compute", t, kComputeMs * 1000));
      ev.push_back(event(r, 0, "optimizer", "compute", t + kComputeMs * 1000, kOptimizerMs * 1000));
      ev.push_back(event(r, 2, "local", "phase", t, step_us));
    }
    const double start = 1000 + kComputeMs * 1000 + queued_ms * 1000;
    ev.push_back(event(r, 3, "outer-sync", "comm", start, 1500,
                       {{"fragment", "0"}, {"queued_us", std::to_string(queued_ms * 1000)}}));
    nlohmann::json args = {{"bytes", std::to_string(bytes)}, {"dtype", "f32"}, {"algo", "ring"}, {"segment", "1048576"}};
    if (!members.empty()) args["ranks"] = members;
    ev.push_back(event(r, 3, "allreduce", "collective", start, 1500, args));
    ev.push_back(event(r, 0, "outer-wait", "comm", 1000 + 2 * step_us, 0, {{"fragment", "0"}, {"background", "1"}}));
  }
  return ev;
}

PlatformSpec star(int nodes, double gbit) {
  PlatformSpec p;
  p.nodes = nodes;
  p.link_Bps = gbit * 1e9 / 8;
  p.reduce_Bps = 1e15;
  p.notice_bytes = 0;
  return p;
}

std::vector<RankProgram> readBack(const nlohmann::json& events, const std::string& name) {
  const auto path = tempPath(name);
  writeTrace(path, events);
  auto progs = readTimeline(path, {});
  std::remove(path.c_str());
  return progs;
}

}  // namespace

TEST(SimStreamed, ReadsAnExchangeIntoALaunchAWaitAndABackgroundProgram) {
  const auto progs = readBack(streamedSteps(2, 1 << 20, 4.0), "streamed_read");
  const auto& p = progs[0];
  ASSERT_EQ(p.background.size(), 1u);
  ASSERT_EQ(p.background[0].size(), 1u);  // the span is the call
  EXPECT_EQ(p.background[0][0].kind, ReplayItem::call);
  EXPECT_EQ(p.calls[p.background[0][0].index].op, "allreduce");
  EXPECT_TRUE(p.buckets.empty());
  EXPECT_EQ(p.unsupported_calls, 0);
  std::vector<ReplayItem::Kind> kinds;
  double launched_at = -1, t = 0;
  for (const auto& it : p.main) {
    if (it.kind == ReplayItem::sleep) t += it.seconds;
    else kinds.push_back(it.kind);
    if (it.kind == ReplayItem::launch_bg) launched_at = t;
    if (it.kind == ReplayItem::wait_bg) {
      EXPECT_EQ(it.index, 0);
    }
  }
  const std::vector<ReplayItem::Kind> want = {ReplayItem::step_begin, ReplayItem::launch_bg, ReplayItem::step_end,
                                              ReplayItem::step_begin, ReplayItem::step_end,  ReplayItem::step_begin,
                                              ReplayItem::wait_bg,    ReplayItem::step_end};
  EXPECT_EQ(kinds, want);
  // Launched when queued (the end of the forward), not when the exchange started 4 ms later.
  EXPECT_NEAR(launched_at, kComputeMs * 1e-3, 1e-9);
}

TEST(SimStreamed, AnExchangeCostsOnlyWhatTheComputeDoesNotHide) {
  const auto p = star(2, 1.0);
  const double between_s = (kComputeMs + 2 * kOptimizerMs) * 1e-3;  // launch to wait
  const double step_s = (kComputeMs + kOptimizerMs) * 1e-3;
  for (const uint64_t bytes : {uint64_t{256} << 10, uint64_t{8} << 20}) {
    CollectiveSpec s;
    s.bytes = bytes;
    const double allreduce_s = simulateCollective(p, s).time_s;
    const auto r = replay(p, readBack(streamedSteps(2, bytes), "streamed_cost"));
    const double exposed = std::max(0.0, allreduce_s - between_s);
    EXPECT_NEAR(r.predicted_step_s, step_s + exposed / 3, 1e-6) << bytes << " bytes, allreduce " << allreduce_s;
    EXPECT_EQ(r.bytes_sent[0], bytes);  // 2 ranks: the ring sends half the buffer twice
  }
  // The small one hides, the large one does not: both sides of the bound are exercised.
  CollectiveSpec small, large;
  small.bytes = 256 << 10;
  large.bytes = 8 << 20;
  EXPECT_LT(simulateCollective(p, small).time_s, between_s);
  EXPECT_GT(simulateCollective(p, large).time_s, between_s);
}

TEST(SimStreamed, CrossSiteGroupsMapToEveryRankAtItsPositionInTheSites) {
  // 4 recorded ranks, 2 sites of 2: the exchange ran over ranks 0 and 2 (rank 0's position in
  // each site). Predicted on 2 sites of 4 nodes: rank 5 (site 1, position 1) runs it with rank 1.
  const auto progs = readBack(streamedSteps(4, 1 << 20, 0, "0,2"), "streamed_cross");
  auto p = star(8, 10.0);
  p.sites = 2;
  PredictOptions o;
  o.groups = "site";
  o.algo = "ring";
  const auto out = extrapolate(progs[0], 4, p, o);
  const int call = out[5].background[0][0].index;
  EXPECT_EQ(out[5].calls[call].ranks, (std::vector<int>{1, 5}));
  EXPECT_EQ(out[0].calls[call].ranks, (std::vector<int>{0, 4}));
  o.groups = "fixed";  // blocks of 2 stay: 4 of them, so rank 5 runs it with 1, 3 and 7, whole
  EXPECT_EQ(extrapolate(progs[0], 4, p, o)[5].calls[call].ranks, (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(extrapolate(progs[0], 4, p, o)[5].calls[call].bytes, uint64_t{1} << 20);
  const auto r = replay(p, out);
  // Sites of 4 instead of 2: each rank carries half the share it carried when recorded, so its
  // ring of 2 over the WAN sends half the recorded buffer.
  EXPECT_EQ(out[5].calls[call].bytes, uint64_t{1} << 19);
  EXPECT_EQ(r.bytes_sent[5], uint64_t{1} << 19);
  EXPECT_EQ(r.inter_site_sent[5], uint64_t{1} << 19);
  o.groups = "site";
  EXPECT_THROW(extrapolate(progs[0], 4, star(8, 10.0), o), ConfigError);  // no sites
}

TEST(SimStreamed, AnExchangeRunningPastTheLastReplayedStepIsTakenWholeOnEveryRank) {
  // Replaying step 0 alone: the exchange queued in it ends inside it on rank 0 and after it on
  // rank 1. Taking its call on rank 0 only left rank 0 waiting for rank 1 (a deadlock).
  auto events = streamedSteps(2, 1 << 20);
  for (auto& e : events)
    if (e["pid"] == 0 && e["tid"] == 3) e["dur"] = 500;
  const auto path = tempPath("streamed_window");
  writeTrace(path, events);
  ReplayOptions one;
  one.steps = 1;
  const auto progs = readTimeline(path, one);
  std::remove(path.c_str());
  for (const auto& p : progs) {
    ASSERT_EQ(p.background.size(), 1u);
    EXPECT_TRUE(std::any_of(p.background[0].begin(), p.background[0].end(),
                            [](const ReplayItem& it) { return it.kind == ReplayItem::call; }));
    EXPECT_EQ(p.unsupported_calls, 0);
  }
  EXPECT_NO_THROW(replay(star(2, 1.0), progs));
}

TEST(SimStreamed, AnExchangeQueuedAtAStepsEndBelongsToThatStepOnEveryRank) {
  // A 1 ms gap after step 0; the exchange is queued at step 0's end: 0.2 ms before it on rank
  // 0's clock, 0.2 ms after it (in the gap) on rank 1's. Replaying step 0 alone, both must take
  // it (rank 0 alone did: a deadlock).
  auto events = streamedSteps(2, 1 << 20);
  const double end0 = 1000 + (kComputeMs + kOptimizerMs) * 1000;
  for (auto& e : events) {
    if (e["ts"].get<double>() >= end0) e["ts"] = e["ts"].get<double>() + 1000;
    if (e["tid"] == 3) e["ts"] = end0 + (e["pid"] == 0 ? -200 : 200);
    if (e["tid"] == 3 && e["name"] == "outer-sync") e["args"]["queued_us"] = "0";
  }
  const auto path = tempPath("streamed_boundary");
  writeTrace(path, events);
  ReplayOptions one;
  one.steps = 1;
  const auto progs = readTimeline(path, one);
  std::remove(path.c_str());
  for (const auto& p : progs) EXPECT_EQ(p.background.size(), 1u);
  EXPECT_NO_THROW(replay(star(2, 1.0), progs));
}
