// Replays on a setting of sites: a run's timeline gather is added as the run sent it, and one
// stream's rate under loss is fitted back from a training run's steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "lowcomm/base/error.h"
#include "lowcomm/sim/calibrate.h"
#include "lowcomm/sim/replay.h"
#include "timeline_fixture.h"

using namespace lowcomm;
using namespace lowcomm::sim;
using namespace lowcomm::sim::fixture;

namespace {

// `steps` DDP steps per rank: forward 10 ms, backward 20 ms (the bucket, one ring allreduce of
// `bytes`, ready at its end), a wait of `wait_ms`, optimizer 5 ms.
nlohmann::json ddpWaiting(int ranks, int steps, uint64_t bytes, double wait_ms) {
  nlohmann::json ev = nlohmann::json::array();
  for (int r = 0; r < ranks; ++r) {
    double t = 1000;
    for (int s = 0; s < steps; ++s) {
      const double begin = t;
      ev.push_back(event(r, 0, "forward", "compute", t, 10000));
      ev.push_back(event(r, 0, "backward", "compute", t + 10000, 20000));
      t += 30000;
      ev.push_back(event(r, 1, "bucket 0", "comm", t, wait_ms * 1000, {{"queued_us", "0"}}));
      ev.push_back(event(r, 1, "allreduce", "collective", t, wait_ms * 1000,
                         {{"bytes", std::to_string(bytes)}, {"dtype", "f32"}, {"algo", "ring"}, {"segment", "1048576"}}));
      ev.push_back(event(r, 0, "wait for gradients", "wait", t, wait_ms * 1000));
      t += wait_ms * 1000;
      ev.push_back(event(r, 0, "optimizer", "compute", t, 5000));
      t += 5000;
      ev.push_back(event(r, 2, "ddp", "phase", begin, t - begin));
      t += 500;
    }
  }
  return ev;
}

uint64_t total(const std::vector<uint64_t>& v) {
  uint64_t s = 0;
  for (uint64_t x : v) s += x;
  return s;
}

}  // namespace

// The gather writeTimeline runs after the timeline closed: a broadcast of 8 bytes, a ring
// allgather of 8 bytes per rank and a ring allgatherv of every rank's events (each rank's share
// its events' compact JSON), so every rank sends all shares but its successor's.
TEST(SimWanReplay, TheTimelineGatherIsAddedAsTheRunSentIt) {
  const int n = 4;
  const auto path = tempPath("gather");
  const auto events = ddpWaiting(n, 2, 1 << 20, 50);
  writeTrace(path, events);
  const auto p = parseSetting("2s2x1@1gbit/100mbit,50ms");
  auto programs = readTimeline(path, {});
  const auto before = replay(p, programs);
  appendTimelineGather(programs, path);
  const auto after = replay(p, programs);
  std::vector<uint64_t> share(n, 0);
  for (int r = 0; r < n; ++r) {
    nlohmann::json mine = nlohmann::json::array();
    for (const auto& e : events)
      if (e["pid"] == r) mine.push_back(e);
    share[r] = mine.dump().size();
  }
  for (int r = 0; r < n; ++r) {
    const uint64_t events_sent = total(share) - share[(r + 1) % n];
    const uint64_t broadcast = r == 0 ? 16 : r == 1 ? 8 : 0;  // binomial tree: 0 to 1 and 2, 1 to 3
    EXPECT_EQ(after.bytes_sent[r] - before.bytes_sent[r], events_sent + 8 * (n - 1) + broadcast) << "rank " << r;
  }
  EXPECT_NEAR(after.predicted_step_s, before.predicted_step_s, 1e-9);  // after the last step: no step time
  std::remove(path.c_str());
}

// A run measured on a lossy WAN whose streams went at stream_c = 0.5: fitted from 2, the fit
// finds 0.5 again and replays the run's steps.
TEST(SimWanReplay, FitStreamRateRecoversTheStreamOfARun) {
  const int n = 4;
  const uint64_t bytes = 4 << 20;
  auto p = parseSetting("2s2x1@1gbit/100mbit,50ms,0.1%");
  p.stream_c = 0.5;
  const auto path = tempPath("stream");
  writeTrace(path, ddpWaiting(n, 3, bytes, 100));
  const double step = replay(p, readTimeline(path, {})).predicted_step_s;  // compute + the exposed allreduce
  writeTrace(path, ddpWaiting(n, 3, bytes, (step - 0.035) * 1e3));
  TrainingRuns runs = {readTimeline(path, {})};
  auto start = p;
  start.stream_c = 2.0;
  const auto fit = fitStreamRate(start, runs);
  EXPECT_TRUE(fit.pinned);
  EXPECT_NEAR(fit.platform.stream_c, 0.5, 0.01);
  EXPECT_NEAR(fit.predicted_step_s[0] / fit.measured_step_s[0], 1.0, 0.01);
  EXPECT_DOUBLE_EQ(fit.platform.loss_exponent, p.loss_exponent);
  EXPECT_THROW(fitStreamRate(parseSetting("2s2x1@1gbit/100mbit,50ms"), runs), ConfigError);
  std::remove(path.c_str());
}

// A run on BBR (no loss bound per stream) whose WAN carried 0.6 of its rate: fitted from 1, the
// fit finds 0.6 again; a setting without sites has no WAN to fit.
TEST(SimWanReplay, FitWanRateRecoversTheWansRateOfARun) {
  const int n = 4;
  const uint64_t bytes = 4 << 20;
  auto p = parseSetting("2s2x1@1gbit/100mbit,50ms,0.1%");
  p.stream_c = 1e6;
  p.streams = 16;
  p.wan_factor = 0.6;
  const auto path = tempPath("wan_rate");
  writeTrace(path, ddpWaiting(n, 3, bytes, 100));
  const double step = replay(p, readTimeline(path, {})).predicted_step_s;
  writeTrace(path, ddpWaiting(n, 3, bytes, (step - 0.035) * 1e3));
  TrainingRuns runs = {readTimeline(path, {})};
  auto start = p;
  start.wan_factor = 1.0;
  const auto fit = fitWanRate(start, runs);
  EXPECT_TRUE(fit.pinned);
  EXPECT_NEAR(fit.platform.wan_factor, 0.6, 0.01);
  EXPECT_NEAR(fit.predicted_step_s[0] / fit.measured_step_s[0], 1.0, 0.01);
  EXPECT_THROW(fitWanRate(parseSetting("4x1@1gbit"), runs), ConfigError);
  std::remove(path.c_str());
}
