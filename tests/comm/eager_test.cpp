// Eager messages between sites (src/comm/eager.h): a send completes without the receiver having
// posted anything (its standing receive was there before), messages that arrive before they are
// awaited are kept, malformed or mismatched ones are a PeerError naming the sender, a dead peer
// fails the wait at once, and the sites allreduce gives the same bits and bytes with and without.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "comm/eager.h"
#include "comm/harness.h"
#include "comm/two_sites.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/communicator.h"
#include "lowcomm/comm/traffic.h"
#include "lowcomm/net/store.h"

using namespace lowcomm;
using namespace lowcomm::comm;
using namespace std::chrono;

namespace {

constexpr size_t kMax = 1024;

// Two ranks in two sites over real loopback pairs; with `inbox`, each one's standing receives
// from the other.
std::vector<std::unique_ptr<Link>> twoSites(bool inbox) {
  auto links = test::twoSiteLinks("eager");
  if (inbox)
    for (int r = 0; r < 2; ++r) links[r]->openInbox({1 - r}, kMax);
  return links;
}

std::vector<char> bytesOf(int salt, size_t n) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>(i * 31 + static_cast<size_t>(salt) * 7);
  return v;
}

}  // namespace

// Without standing receives a Gloo send waits for the receiver's notice: the receiver posts only
// after the send completed, so the send times out. The control for the next test.
TEST(Eager, WithoutTheInboxASendWaitsForTheReceiversNotice) {
  auto links = twoSites(false);
  TrafficMeter meter;
  auto msg = bytesOf(1, 100);
  EXPECT_FALSE(links[1]->eager(0, msg.size()));
  GlooExchange ex(*links[1], meter, "t", "p", milliseconds(500), 1);
  EXPECT_THROW(ex.wait(ex.isendEager(0, msg.data(), msg.size(), ex.slot(0, 0))), TimeoutError);
}

// The same order with the inbox: the send completes first, then the receiver takes the message.
TEST(Eager, ASendCompletesBeforeTheReceiverPostsAnything) {
  auto links = twoSites(true);
  ASSERT_TRUE(links[1]->eager(0, kMax));
  EXPECT_FALSE(links[1]->eager(0, kMax + 1));
  EXPECT_FALSE(links[1]->eager(0, 0));
  TrafficMeter m0, m1;
  auto msg = bytesOf(2, kMax);
  std::atomic<bool> sent{false};
  std::vector<char> got(kMax);
  test::onRanks(2, [&](int r) {
    if (r == 1) {
      GlooExchange ex(*links[1], m1, "t", "p", seconds(5), 7);
      ex.wait(ex.isendEager(0, msg.data(), msg.size(), ex.slot(3, 2)));
      sent = true;
      return;
    }
    while (!sent) std::this_thread::sleep_for(milliseconds(1));
    GlooExchange ex(*links[0], m0, "t", "p", seconds(5), 7);
    ex.wait(ex.irecvEager(1, got.data(), got.size(), ex.slot(3, 2)));
  });
  EXPECT_EQ(got, msg);
  EXPECT_EQ(m1.snapshot().total.bytes_sent, kMax);  // payload bytes, as any message
  EXPECT_EQ(m0.snapshot().total.bytes_recv, kMax);
}

// kEagerDepth messages sent before any is awaited, awaited in the reverse order, then more than
// the depth back to back (the sender then waits for receives posted again): all arrive intact.
TEST(Eager, EarlyMessagesAreKeptUntilAwaited) {
  auto links = twoSites(true);
  TrafficMeter m0, m1;
  constexpr int kEarly = kEagerDepth, kMore = 3 * kEagerDepth;
  std::atomic<bool> sent{false};
  std::vector<std::vector<char>> got(kEarly + kMore);
  test::onRanks(2, [&](int r) {
    if (r == 1) {
      GlooExchange ex(*links[1], m1, "t", "p", seconds(5), 9);
      std::vector<std::vector<char>> msgs;
      for (int i = 0; i < kEarly; ++i) msgs.push_back(bytesOf(i, 10 + static_cast<size_t>(i)));
      for (int i = 0; i < kEarly; ++i) ex.wait(ex.isendEager(0, msgs[i].data(), msgs[i].size(), ex.slot(1, i)));
      sent = true;
      for (int i = kEarly; i < kEarly + kMore; ++i) {
        auto m = bytesOf(i, 10 + static_cast<size_t>(i));
        ex.wait(ex.isendEager(0, m.data(), m.size(), ex.slot(1, i)));
      }
      return;
    }
    while (!sent) std::this_thread::sleep_for(milliseconds(1));
    GlooExchange ex(*links[0], m0, "t", "p", seconds(5), 9);
    for (int i = kEarly - 1; i >= 0; --i) {
      got[i].resize(10 + static_cast<size_t>(i));
      ex.wait(ex.irecvEager(1, got[i].data(), got[i].size(), ex.slot(1, i)));
    }
    for (int i = kEarly; i < kEarly + kMore; ++i) {
      got[i].resize(10 + static_cast<size_t>(i));
      ex.wait(ex.irecvEager(1, got[i].data(), got[i].size(), ex.slot(1, i)));
    }
  });
  for (int i = 0; i < kEarly + kMore; ++i) EXPECT_EQ(got[i], bytesOf(i, 10 + static_cast<size_t>(i))) << i;
}

// The receiver awaits another size than was sent for the slot: PeerError naming the sender,
// nothing written.
TEST(Eager, ASizeMismatchIsAPeerErrorNamingTheSender) {
  auto links = twoSites(true);
  TrafficMeter m0, m1;
  std::vector<char> got(200, 'x');
  int named = -2;
  test::onRanks(2, [&](int r) {
    if (r == 1) {
      auto m = bytesOf(3, 100);
      GlooExchange ex(*links[1], m1, "t", "p", seconds(5), 4);
      ex.wait(ex.isendEager(0, m.data(), m.size(), ex.slot(0, 0)));
      return;
    }
    GlooExchange ex(*links[0], m0, "t", "p", seconds(5), 4);
    try {
      ex.wait(ex.irecvEager(1, got.data(), got.size(), ex.slot(0, 0)));
    } catch (const PeerError& e) {
      named = e.rank();
      EXPECT_NE(std::string(e.what()).find("100 bytes"), std::string::npos) << e.what();
    }
  });
  EXPECT_EQ(named, 1);
  EXPECT_EQ(got, std::vector<char>(200, 'x'));
  EXPECT_FALSE(links[0]->broken().empty());  // the pair's state is unknown: later calls fail fast
}

// A peer that writes a header claiming more than the inbox holds (garbage on the eager slot).
TEST(Eager, AHeaderClaimingTooManyBytesIsAPeerError) {
  auto links = twoSites(true);
  TrafficMeter m0;
  int named = -2;
  test::onRanks(2, [&](int r) {
    if (r == 1) {
      std::vector<char> raw(sizeof(EagerHeader) + 8);
      const EagerHeader h{makeSlot(5, 0, 0, 0), kMax + 1};
      std::memcpy(raw.data(), &h, sizeof(h));
      auto buf = links[1]->context().createUnboundBuffer(raw.data(), raw.size());
      buf->send(0, kEagerSlot);
      buf->waitSend(seconds(5));
      return;
    }
    GlooExchange ex(*links[0], m0, "t", "p", seconds(5), 5);
    std::vector<char> got(8);
    try {
      ex.wait(ex.irecvEager(1, got.data(), got.size(), ex.slot(0, 0)));
    } catch (const PeerError& e) {
      named = e.rank();
      EXPECT_NE(std::string(e.what()).find("claims"), std::string::npos) << e.what();
    }
  });
  EXPECT_EQ(named, 1);
}

// The sender dies (closes its connections) while the receiver waits: a PeerError well before the
// call's timeout, not a hang.
TEST(Eager, APeerClosingMidWaitFailsTheWaitAtOnce) {
  auto links = twoSites(true);
  TrafficMeter m0;
  const auto t0 = steady_clock::now();
  test::onRanks(2, [&](int r) {
    if (r == 1) {
      std::this_thread::sleep_for(milliseconds(200));
      links[1]->poison("test: rank 1 goes away");
      return;
    }
    GlooExchange ex(*links[0], m0, "t", "p", seconds(30), 6);
    std::vector<char> got(16);
    EXPECT_THROW(ex.wait(ex.irecvEager(1, got.data(), got.size(), ex.slot(0, 0))), PeerError);
  });
  EXPECT_LT(steady_clock::now() - t0, seconds(10));
}

// The sites allreduce with eager messages equals the one without bit for bit, at sizes below, at
// and above the eager limit and more calls back to back than the inbox's depth; the meters count
// the same bytes.
TEST(Eager, SitesAllreduceEqualsTheRunWithoutEagerMessages) {
  auto run = [](size_t eager_max, std::vector<std::vector<float>>& out, std::vector<TrafficSnapshot>& traffic) {
    auto comms = test::makeComms(4, [=](int r) {
      CommOptions o;
      o.shm = ShmMode::off;
      o.group_size = 1;
      o.site = r / 2;
      o.streams = 1;
      o.eager_max_bytes = eager_max;
      return o;
    });
    out.assign(4, {});
    traffic.assign(4, {});
    test::onRanks(4, [&](int r) {
      for (size_t count : {size_t{1}, size_t{1000}, size_t{4096}, size_t{4098}, size_t{70000}})
        for (int call = 0; call < 2 * kEagerDepth + 1; ++call) {
          std::mt19937 gen(static_cast<unsigned>(r * 131 + call * 17 + static_cast<int>(count)));
          std::uniform_real_distribution<float> d(-1.f, 1.f);
          std::vector<float> v(count);
          for (auto& x : v) x = d(gen);
          comms[r]->allreduce(v.data(), count, DType::f32, ReduceOp::sum, Algo::sites);
          out[r].insert(out[r].end(), v.begin(), v.end());
        }
      traffic[r] = comms[r]->meter().snapshot();
    });
  };
  std::vector<std::vector<float>> with, without;
  std::vector<TrafficSnapshot> tw, two;
  run(8192, with, tw);  // a rank's WAN chunk is count / 2 floats: 4096 is at the limit, 4098 above
  run(0, without, two);
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(with[r].size(), without[r].size());
    EXPECT_EQ(0, std::memcmp(with[r].data(), without[r].data(), with[r].size() * 4)) << "rank " << r;
    EXPECT_EQ(tw[r].total.bytes_sent, two[r].total.bytes_sent) << "rank " << r;
    EXPECT_EQ(tw[r].by_link.at(kInterSite).bytes_sent, two[r].by_link.at(kInterSite).bytes_sent) << "rank " << r;
  }
}
