// Sites joined by a WAN in the simulator: the settings parse in both spellings, the WAN's round
// trip and rate show in the simulated times, loss caps a stream (Mathis) and striping lifts the
// cap, and calibration recovers the WAN from rows simulated on it and from rows measured on the
// emulated cluster (tests/sim/data/wan_*.json).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "lowcomm/base/error.h"
#include "lowcomm/sim/calibrate.h"
#include "lowcomm/comm/communicator.h"
#include "lowcomm/sim/collectives.h"
#include "lowcomm/sim/tune.h"

using namespace lowcomm;
using namespace lowcomm::sim;

namespace {

double allreduce(const PlatformSpec& p, const std::string& algo, size_t bytes) {
  const MeasuredRow r{"allreduce", algo, bytes, 0};
  return simulateCollective(p, specFor(r, p, 1 << 20)).time_s;
}

}  // namespace

TEST(SimWan, ParsesSettingsOfSitesInBothSpellings) {
  const auto p = parseSetting("2s2x1@1gbit/100mbit,50ms,0.1%");
  EXPECT_EQ(p.sites, 2);
  EXPECT_EQ(p.nodes, 4);
  EXPECT_EQ(p.ppn, 1);
  EXPECT_DOUBLE_EQ(p.link_Bps, 125e6);
  EXPECT_DOUBLE_EQ(p.wan_Bps, 12.5e6);
  EXPECT_DOUBLE_EQ(p.wan_rtt_s, 0.05);
  EXPECT_DOUBLE_EQ(p.wan_loss, 0.001);
  EXPECT_EQ(p.siteOf(1), 0);
  EXPECT_EQ(p.siteOf(2), 1);
  const auto d = parseSetting("2s2x1@1gbit-100mbit,50ms,0.1%");  // bench/e2e's run directory
  EXPECT_EQ(d.nodes, 4);
  EXPECT_DOUBLE_EQ(d.wan_loss, 0.001);
  EXPECT_DOUBLE_EQ(parseSetting("2s2x1@1gbit/100mbit,50ms").wan_loss, 0);
  EXPECT_THROW(parseSetting("1s2x1@1gbit/100mbit,50ms"), ConfigError);
  EXPECT_THROW(parseSetting("2s2x1@1gbit/100mbit,50ms,100%"), ConfigError);
}

// A 4-byte allreduce pays its WAN crossings' round trips; inside one site it costs next to nothing.
TEST(SimWan, SmallMessagesPayTheRoundTrip) {
  const auto wan = parseSetting("2s2x1@1gbit/100mbit,50ms");
  const double t = allreduce(wan, "hd", 4);
  // hd over 4 ranks: 2 exchanges, one across the sites (rendezvous notice, then the data: about one
  // round trip), one inside a site.
  EXPECT_GT(t, 0.05);
  EXPECT_LT(t, 0.12);
  EXPECT_LT(allreduce(parseSetting("4x1@1gbit"), "hd", 4), 1e-3);
}

// The sites allreduce's small WAN messages go eagerly (their receives were posted before the
// call): one way's latency, half the round trip; without eager messages the notice's half
// round trip comes first. Above eager_max_bytes a message waits for its notice again.
TEST(SimWan, EagerMessagesCrossInHalfARoundTrip) {
  auto wan = parseSetting("2s2x1@1gbit/100mbit,50ms");
  const double eager = allreduce(wan, "sites", 4096);
  EXPECT_GT(eager, 0.025);
  EXPECT_LT(eager, 0.035);
  wan.eager_max_bytes = 1024;  // a rank's WAN chunk is 2 KiB
  const double rendezvous = allreduce(wan, "sites", 4096);
  EXPECT_GT(rendezvous, 0.05);
  EXPECT_LT(rendezvous, 0.06);
  wan.eager_max_bytes = 0;
  EXPECT_DOUBLE_EQ(allreduce(wan, "sites", 4096), rendezvous);
}

// Without loss a large allreduce runs at the WAN's rate; with loss one stream per pair runs at
// the Mathis bound, and 8 streams get most of the link back.
TEST(SimWan, LossCapsAStreamAndStripingLiftsTheCap) {
  const auto clean = parseSetting("2s2x1@1gbit/100mbit,50ms");
  const size_t bytes = 16u << 20;
  const double t0 = allreduce(clean, "ring", bytes);
  // Ring: each uplink carries 2(n-1)/n of the buffer one way; each of the 2(n-1) steps also pays
  // the round trip of its first segment's rendezvous.
  const double ideal = 2.0 * 3 / 4 * bytes / clean.wan_Bps;
  EXPECT_GT(t0, ideal);
  EXPECT_LT(t0, ideal + 2 * 3 * 4 * clean.wan_rtt_s);
  auto lossy = parseSetting("2s2x1@1gbit/100mbit,50ms,0.5%");
  lossy.stream_c = 2.0;
  const double cap = lossy.streamCapBps();
  EXPECT_NEAR(cap, 1448 / 0.05 * 2.0 / std::sqrt(0.005), 1);
  const double t1 = allreduce(lossy, "ring", bytes);
  EXPECT_GT(t1, ideal * lossy.wan_Bps / cap);
  EXPECT_LT(t1, ideal * lossy.wan_Bps / cap + 2 * 3 * 4 * clean.wan_rtt_s);
  lossy.streams = 8;
  const double t8 = allreduce(lossy, "ring", bytes);
  // 8 capped stripes (8 x 6.5 Mbit/s, under the link's 100): 8 times one stream's rate.
  EXPECT_GT(t1 / t8, 6.5);
  EXPECT_LT(t1 / t8, 8.5);
  lossy.streams = 32;  // more than the link carries: the link's rate again
  EXPECT_NEAR(allreduce(lossy, "ring", bytes) / t0, 1.0, 0.1);
}

// Rows simulated on a known WAN give that WAN back from the setting's nominal values.
TEST(SimWan, CalibrateRecoversTheWan) {
  PlatformSpec truth = parseSetting("2s2x1@1gbit/100mbit,50ms");
  truth.wan_factor = 0.92;
  truth.wan_rtt_extra_s = 1.5e-3;
  truth.stream_c = 2.5;
  std::vector<MeasuredRow> rows;
  for (double loss : {0.0, 0.005})
    for (const auto& [algo, bytes] : std::vector<std::pair<std::string, size_t>>{
             {"ring", 4096}, {"hd", 65536}, {"ring", 4u << 20}, {"hd", 16u << 20}}) {
      MeasuredRow r{"allreduce", algo, bytes, 0};
      r.wan_loss = loss;
      if (loss > 0 && bytes < (1u << 20)) continue;
      r.time_s = simulateCollective(rowPlatform(truth, r), specFor(r, truth, 1 << 20)).time_s;
      rows.push_back(r);
    }
  const auto c = calibrateWan(parseSetting("2s2x1@1gbit/100mbit,50ms"), rows, 1 << 20);
  EXPECT_NEAR(c.platform.wan_factor, 0.92, 0.01);
  EXPECT_NEAR(c.platform.wan_rtt_extra_s, 1.5e-3, 0.5e-3);
  EXPECT_NEAR(c.platform.stream_c, 2.5, 0.05);
  EXPECT_DOUBLE_EQ(c.platform.loss_exponent, 0.5);  // one loss: Mathis's exponent stays
  EXPECT_LT(c.max_abs_error, 0.02);
}

// Rows at two losses also give the exponent of the loss in the stream's bound.
TEST(SimWan, CalibrateRecoversTheLossExponent) {
  PlatformSpec truth = parseSetting("2s2x1@1gbit/100mbit,50ms");
  truth.stream_c = 0.6;
  truth.loss_exponent = 0.7;
  std::vector<MeasuredRow> rows;
  for (double loss : {0.001, 0.005})
    for (const auto& algo : {"ring", "hd"}) {
      MeasuredRow r{"allreduce", algo, 4u << 20, 0};
      r.wan_loss = loss;
      r.time_s = simulateCollective(rowPlatform(truth, r), specFor(r, truth, 1 << 20)).time_s;
      rows.push_back(r);
    }
  const auto c = calibrateWan(parseSetting("2s2x1@1gbit/100mbit,50ms"), rows, 1 << 20);
  EXPECT_NEAR(c.platform.loss_exponent, 0.7, 0.02);
  EXPECT_NEAR(c.platform.stream_c, 0.6, 0.06);
  EXPECT_LT(c.max_abs_error, 0.02);
}

// The rows measured on the emulated WAN (tools/cluster --sites 2 --nodes 4 --wan-rate 100mbit
// --wan-delay 25ms [--wan-loss 0.5], bench collectives --algos ring,hd; tests/sim/data): the fit
// finds the round trip netprobe measured (51.0 ms) within 5 %, a WAN rate below one netprobe
// stream's 0.93 (Gloo's hd has two streams per uplink, which lose to each other in its queue) and a
// Mathis constant near the 3.8 Mbit/s of one CUBIC stream at 0.5 % loss (C = 1.17).
// What the model leaves: 1 MiB calls (TCP's slow start after idle, not modelled: up to 25 %) and
// hd under loss (a lost segment of a short message costs a retransmission timeout).
TEST(SimWan, CalibrateFitsTheEmulatedWan) {
  const std::string data = std::string(LC_SOURCE_DIR) + "/tests/sim/data/wan_2s2x1_100mbit_50ms_loss";
  std::vector<MeasuredRow> rows = readMeasured(data + "0.json");
  for (auto r : readMeasured(data + "0.5.json")) {
    r.wan_loss = 0.005;
    rows.push_back(r);
  }
  ASSERT_EQ(rows.size(), 16u);
  const auto c = calibrateWan(parseSetting("2s2x1@1gbit/100mbit,50ms"), rows, 1 << 20);
  EXPECT_NEAR(c.platform.wanRtt(), 0.051, 0.05 * 0.051);
  EXPECT_GT(c.platform.wan_factor, 0.6);
  EXPECT_LT(c.platform.wan_factor, 0.85);
  EXPECT_GT(c.platform.stream_c, 0.8);
  EXPECT_LT(c.platform.stream_c, 1.4);
  double clean_sum = 0;
  int clean = 0;
  for (const auto& r : c.rows) {
    const bool lossy = r.measured.wan_loss > 0;
    SCOPED_TRACE(r.measured.algo + " " + std::to_string(r.measured.bytes) + (lossy ? " at 0.5 %" : " at 0 %"));
    if (!lossy) {
      clean_sum += std::abs(r.error), ++clean;
      EXPECT_LT(std::abs(r.error), r.measured.bytes == (1u << 20) ? 0.25 : 0.12);
    } else if (r.measured.algo == "ring" && r.measured.bytes >= (1u << 20)) {
      EXPECT_LT(std::abs(r.error), 0.15);
    }
  }
  EXPECT_LT(clean_sum / clean, 0.10);
}

namespace {

// The selector's site layout on a setting of sites: a site's ranks for the sites algorithm and
// for comm::autoAllreduce, nothing without sites; tune's fixed choice is `sites` at every size
// (the communicator's automatic choice there), `sites` is a candidate grouped by site, and the
// table has no rules.
TEST(SimWan, TheSelectorSeesTheSites) {
  const auto wan = parseSetting("2s2x2@1gbit/100mbit,50ms");
  EXPECT_EQ(siteBlock(wan, wan.world()), 4);
  EXPECT_EQ(siteBlock(wan, 4), 0);  // rank 0's group of one site
  EXPECT_EQ(defaultGroupSize(wan, comm::Algo::sites), 4);
  EXPECT_EQ(defaultGroupSize(wan, comm::Algo::hierarchical), 2);
  const auto lan = parseSetting("4x2@1gbit");
  EXPECT_EQ(siteBlock(lan, lan.world()), 0);
  EXPECT_EQ(defaultGroupSize(lan, comm::Algo::sites), 2);

  const auto p = parseSetting("2s2x1@1gbit/100mbit,50ms");
  const auto r = tune(p, {4096, 4 << 20}, {comm::Algo::ring, comm::Algo::sites}, 1 << 20);
  ASSERT_EQ(r.candidates, (std::vector<comm::Algo>{comm::Algo::ring, comm::Algo::sites}));
  for (const auto& row : r.rows) {
    EXPECT_EQ(row.fixed, comm::Algo::sites) << row.bytes;
    EXPECT_LT(row.time_s[1], row.time_s[0]) << row.bytes;  // one WAN exchange against the ring's 2(n-1) steps
  }
  EXPECT_TRUE(r.table.rules().empty());  // the communicator consults no table across sites
}

}  // namespace
