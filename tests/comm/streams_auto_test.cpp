// The automatic number of streams (src/comm/streams_auto.h): the rule as a pure function of
// round trip, loss and rate, and its use at creation by communicators of ranks in two sites on
// loopback (a round trip far below a WAN's: one stream, as without sites).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "comm/harness.h"
#include "comm/streams_auto.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/communicator.h"

using namespace lowcomm;
using namespace lowcomm::comm;

namespace {

PathSample path(double rtt_s, double loss = -1, double rate_Bps = 0) {
  PathSample p;
  p.rtt_s = rtt_s;
  p.loss = loss;
  p.rate_Bps = rate_Bps;
  return p;
}

}  // namespace

TEST(StreamsAuto, MathisBoundOfOneStream) {
  // The figure: 50 ms, 0.5 % loss, CUBIC measured 3.8 Mbit/s against a bound of ~4.0.
  EXPECT_NEAR(mathisBound(0.05, 0.005, 1448) * 8 / 1e6, 4.01, 0.01);
  EXPECT_NEAR(mathisBound(0.05, 0.001, 1448) * 8 / 1e6, 8.97, 0.01);  // "about 9 Mbit/s at 0.1 %"
  EXPECT_TRUE(std::isinf(mathisBound(0.05, 0, 1448)));
}

TEST(StreamsAuto, OneStreamOnALanLikeRoundTrip) {
  for (double rtt : {0.0, 30e-6, 500e-6, 1.99e-3}) {
    EXPECT_EQ(autoStreams(path(rtt)), 1) << rtt;
    EXPECT_EQ(autoStreams(path(rtt, 0.05, 1.25e8)), 1) << rtt;  // even lossy and fast
  }
  EXPECT_EQ(autoStreams(path(std::nan(""))), 1);
  EXPECT_EQ(autoStreams(path(-1)), 1);
}

TEST(StreamsAuto, EnoughStreamsToFillTheRateAtTheLoss) {
  const double rate = 12.5e6;  // 100 Mbit/s
  // 50 ms: one stream's bound is 1.12 MB/s at 0.1 %; 20 ms at 0.5 %: 1.25 MB/s.
  EXPECT_EQ(autoStreams(path(0.05, 0.001, rate)), 12);
  EXPECT_EQ(autoStreams(path(0.02, 0.005, rate)), 10);
  EXPECT_EQ(autoStreams(path(0.05, 0.005, rate)), kAutoMaxStreams);  // 25 wanted
  EXPECT_EQ(autoStreams(path(0.05, 0, rate)), 1);  // a measured clean path: one stream suffices
  // 10 ms at 1 %: 1.77 MB/s per stream.
  EXPECT_EQ(autoStreams(path(0.01, 0.01, rate)), 8);
  // Never more than the cap, never fewer than one.
  EXPECT_EQ(autoStreams(path(0.15, 0.05, 1.25e8)), kAutoMaxStreams);
  EXPECT_EQ(autoStreams(path(0.05, 1e-9, 1e3)), 1);
}

TEST(StreamsAuto, UnknownLossAndRateTakeTheDesignValues) {
  EXPECT_EQ(autoStreams(path(0.05)), autoStreams(path(0.05, kDesignLoss, kDesignRate)));
  EXPECT_EQ(autoStreams(path(0.01)), 8);                  // 100 Mbit/s at 1 %, 10 ms
  EXPECT_EQ(autoStreams(path(0.05)), kAutoMaxStreams);    // 36 wanted at 50 ms
  EXPECT_EQ(kAutoMaxStreams, 16);
  EXPECT_EQ(autoStreams(path(2e-3)), 2);
}

TEST(StreamsAuto, MonotoneInRoundTripAndLoss) {
  int last = 1;
  for (double rtt = 1e-3; rtt < 0.3; rtt *= 1.3) {
    const int k = autoStreams(path(rtt, 0.002, 12.5e6));
    EXPECT_GE(k, last) << rtt;
    last = k;
  }
  last = 1;
  for (double loss = 1e-5; loss < 0.1; loss *= 1.5) {
    const int k = autoStreams(path(0.03, loss, 12.5e6));
    EXPECT_GE(k, last) << loss;
    last = k;
  }
}

TEST(StreamsAuto, ParsesAutoAndCounts) {
  EXPECT_EQ(parseStreams("auto"), kAutoStreams);
  EXPECT_EQ(parseStreams("1"), 1);
  EXPECT_EQ(parseStreams("64"), kMaxStreams);
  for (const char* bad : {"", "0", "65", "-3", "4x", "Auto", " 2"}) EXPECT_THROW(parseStreams(bad), ConfigError) << bad;
  EXPECT_EQ(CommOptions{}.streams, kAutoStreams);  // the default
}

// Ranks as threads on loopback, half of them declaring another site: auto measures a round trip
// of microseconds, the same on every rank, and keeps one connection per pair.
TEST(StreamsAuto, LoopbackSitesKeepOneStream) {
  for (int n : {2, 3, 4}) {
    auto comms = test::makeComms(n, [=](int r) {
      CommOptions o;
      o.site = r < (n + 1) / 2 ? 0 : 1;
      o.shm = ShmMode::off;
      return o;
    });
    const double rtt = comms[0]->crossSiteRtt();
    EXPECT_GT(rtt, 0) << n;
    EXPECT_LT(rtt, kLanRtt) << n;
    for (const auto& c : comms) {
      EXPECT_EQ(c->streams(), 1) << n;
      EXPECT_EQ(c->crossSiteRtt(), rtt) << n;  // every rank took the same maximum
    }
  }
}

// Without sites (or with one), auto measures nothing: one mesh, as streams = 1.
TEST(StreamsAuto, NoSitesMeasureNothing) {
  for (int site : {-1, 0}) {
    auto comms = test::makeComms(3, [=](int) {
      CommOptions o;
      o.site = site;
      return o;
    });
    for (const auto& c : comms) {
      EXPECT_EQ(c->streams(), 1);
      EXPECT_EQ(c->crossSiteRtt(), 0);
    }
  }
}
