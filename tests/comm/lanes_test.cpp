// Lanes (src/comm/lanes.h): large collective messages between sites cut into chunks that the
// connections take as they drain. Two ranks in two sites over real loopback pairs, k streams.
// Results of whole collectives on lanes are compared bit for bit with one stream in stripe_test.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "comm/lanes.h"
#include "comm/two_sites.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/traffic.h"

using namespace lowcomm;
using namespace lowcomm::comm;
using namespace std::chrono;

namespace {

constexpr int kStreams = 3;
constexpr uint32_t kSeq = 5;  // a collective call's sequence: its slots are laned

std::vector<std::unique_ptr<Link>> twoSites(int streams = kStreams) {
  auto links = test::twoSiteLinks("lanes", streams);
  for (auto& l : links) l->setStripeMin(1024);
  return links;
}

std::vector<char> bytesOf(int salt, size_t n) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>(i * 131 + i / 977 + static_cast<size_t>(salt) * 7);
  return v;
}

// Sizes around the chunk: one chunk, one byte more, many chunks not a multiple of it.
const size_t kSizes[] = {kLaneChunkBytes, kLaneChunkBytes + 1, 37 * kLaneChunkBytes + 4099};

}  // namespace

TEST(Lanes, OnlyCollectiveMessagesThatStripeAreLaned) {
  auto links = twoSites();
  const uint64_t coll = makeSlot(kSeq, 0, 0, 0), p2p = makeSlot(Link::kP2PSeq, 0, 0, 0);
  EXPECT_TRUE(links[0]->laned(1, 4096, coll));
  EXPECT_FALSE(links[0]->laned(1, 4096, p2p));  // receives from any rank need the fixed pieces
  EXPECT_FALSE(links[0]->laned(1, 512, coll));  // below stripe_min
  auto one = twoSites(1);
  EXPECT_FALSE(one[0]->laned(1, 1 << 20, coll));  // one stream: nothing to balance
}

// The receiver posts the last of several messages first (its lanes start then: as with any Gloo
// message, a send completes only once the receiver has posted something); the sender sends them
// all and sees every send complete; the receiver then posts the others in reverse order (their
// chunks were kept), then more messages with receives posted first. Everything arrives intact,
// metered as payload bytes.
TEST(Lanes, MessagesArriveIntactInAnyOrderOfPosting) {
  auto links = twoSites();
  TrafficMeter m0, m1;
  const int n = static_cast<int>(std::size(kSizes));
  std::vector<std::vector<char>> got(2 * n);
  for (int i = 0; i < 2 * n; ++i) got[i].resize(kSizes[i % n]);
  std::atomic<bool> posted{false}, sent{false};
  test::onRanks(2, [&](int r) {
    if (r == 1) {
      while (!posted) std::this_thread::sleep_for(milliseconds(1));
      GlooExchange ex(*links[1], m1, "t", "p", seconds(20), kSeq);
      std::vector<std::vector<char>> msgs;
      for (int i = 0; i < 2 * n; ++i) msgs.push_back(bytesOf(i, kSizes[i % n]));
      for (int i = 0; i < n; ++i) ex.isend(0, msgs[i].data(), msgs[i].size(), ex.slot(1, i));
      ex.waitAll();
      sent = true;
      for (int i = n; i < 2 * n; ++i) ex.isend(0, msgs[i].data(), msgs[i].size(), ex.slot(1, i));
      ex.waitAll();
      return;
    }
    GlooExchange ex(*links[0], m0, "t", "p", seconds(20), kSeq);
    const int last = ex.irecv(1, got[n - 1].data(), got[n - 1].size(), ex.slot(1, n - 1));
    posted = true;
    while (!sent) std::this_thread::sleep_for(milliseconds(1));
    ex.wait(last);
    for (int i = n - 2; i >= 0; --i) ex.wait(ex.irecv(1, got[i].data(), got[i].size(), ex.slot(1, i)));
    for (int i = n; i < 2 * n; ++i) ex.irecv(1, got[i].data(), got[i].size(), ex.slot(1, i));
    ex.waitAll();
  });
  size_t total = 0;
  for (int i = 0; i < 2 * n; ++i) {
    EXPECT_TRUE(got[i] == bytesOf(i, kSizes[i % n])) << i;
    total += kSizes[i % n];
  }
  EXPECT_EQ(m1.snapshot().total.bytes_sent, total);
  EXPECT_EQ(m0.snapshot().total.bytes_recv, total);
  EXPECT_EQ(m0.snapshot().by_link.at(kInterSite).bytes_recv, total);
}

// Both ranks send to each other at once over the same connections.
TEST(Lanes, BothDirectionsAtOnce) {
  auto links = twoSites();
  const size_t bytes = 64 * kLaneChunkBytes + 3;
  std::vector<std::vector<char>> got(2, std::vector<char>(bytes));
  test::onRanks(2, [&](int r) {
    TrafficMeter m;
    auto mine = bytesOf(r, bytes);
    GlooExchange ex(*links[r], m, "t", "p", seconds(20), kSeq);
    ex.irecv(1 - r, got[r].data(), bytes, ex.slot(2, 0));
    ex.isend(1 - r, mine.data(), bytes, ex.slot(2, 0));
    ex.waitAll();
  });
  EXPECT_TRUE(got[0] == bytesOf(1, bytes));
  EXPECT_TRUE(got[1] == bytesOf(0, bytes));
}

namespace {

// Rank 1 writes `header` (and `payload` bytes) straight onto the lane slot of stream 1, as a
// broken or hostile peer would; rank 0 waits for a 4-chunk message. Returns rank 0's error.
std::string garbage(const LaneHeader& header, size_t payload, std::vector<char>& got, int& named) {
  auto links = twoSites();
  std::string error;
  test::onRanks(2, [&](int r) {
    if (r == 1) {
      std::vector<char> raw(sizeof(header) + payload, 'g');
      std::memcpy(raw.data(), &header, sizeof(header));
      auto buf = links[1]->stream(1).createUnboundBuffer(raw.data(), raw.size());
      buf->send(0, kLaneSlot);
      buf->waitSend(seconds(10));
      return;
    }
    TrafficMeter m;
    GlooExchange ex(*links[0], m, "t", "p", seconds(10), kSeq);
    try {
      ex.wait(ex.irecv(1, got.data(), got.size(), ex.slot(0, 0)));
    } catch (const PeerError& e) {
      named = e.rank();
      error = e.what();
    }
  });
  EXPECT_FALSE(links[0]->broken().empty());  // later calls fail fast
  return error;
}

}  // namespace

TEST(Lanes, AChunkOutsideItsMessageIsAPeerErrorNamingTheSender) {
  const size_t bytes = 4 * kLaneChunkBytes;
  const uint64_t slot = makeSlot(kSeq, 0, 0, 0);
  std::vector<char> got(bytes, 'x');
  int named = -2;
  // A chunk that would end past the message, another claiming more than a chunk, a zero header.
  for (const LaneHeader h : {LaneHeader{slot, bytes - 10, 100, bytes}, LaneHeader{slot, 0, kLaneChunkBytes + 1, bytes},
                             LaneHeader{0, 0, 0, 0}}) {
    named = -2;
    const std::string e = garbage(h, std::min<size_t>(h.bytes, kLaneChunkBytes), got, named);
    EXPECT_EQ(named, 1) << e;
    EXPECT_NE(e.find("malformed chunk from rank 1"), std::string::npos) << e;
    EXPECT_EQ(got, std::vector<char>(bytes, 'x'));
  }
}

TEST(Lanes, AChunkOfAnotherSizedMessageIsAPeerError) {
  const size_t bytes = 4 * kLaneChunkBytes;
  std::vector<char> got(bytes, 'x');
  int named = -2;
  const std::string e = garbage(LaneHeader{makeSlot(kSeq, 0, 0, 0), 0, 100, 2 * bytes}, 100, got, named);
  EXPECT_EQ(named, 1) << e;
  EXPECT_NE(e.find("ranks disagree"), std::string::npos) << e;
  EXPECT_EQ(got, std::vector<char>(bytes, 'x'));
}

// A sender that fails after the first chunk of a message (it wrote chunk 0, then its link was
// poisoned: every connection closed, as when its process dies): the receiver fails within a
// second or two with PeerError naming it, not at its timeout.
TEST(Lanes, ASenderThatFailsMidMessageFailsTheReceiverFast) {
  auto links = twoSites();
  const size_t bytes = 4 * kLaneChunkBytes;
  std::string error;
  int named = -2;
  const auto t0 = steady_clock::now();
  test::onRanks(2, [&](int r) {
    std::vector<char> buf(bytes, 'y');
    if (r == 1) {
      std::vector<char> raw(sizeof(LaneHeader) + kLaneChunkBytes, 'c');
      const LaneHeader h{makeSlot(kSeq, 0, 0, 0), 0, kLaneChunkBytes, bytes};
      std::memcpy(raw.data(), &h, sizeof(h));
      auto chunk = links[1]->stream(2).createUnboundBuffer(raw.data(), raw.size());
      chunk->send(0, kLaneSlot);
      chunk->waitSend(seconds(10));
      std::this_thread::sleep_for(milliseconds(100));
      links[1]->poison("test: the sender dies");
      return;
    }
    TrafficMeter m;
    GlooExchange ex(*links[0], m, "t", "p", seconds(30), kSeq);
    try {
      ex.wait(ex.irecv(1, buf.data(), bytes, ex.slot(0, 0)));
    } catch (const PeerError& e) {
      named = e.rank();
      error = e.what();
    }
    EXPECT_EQ(std::string(buf.begin(), buf.begin() + 3), "ccc");  // chunk 0 had arrived
  });
  EXPECT_EQ(named, 1) << error;
  EXPECT_LT(steady_clock::now() - t0, seconds(10)) << error;
}

// A laned send abandoned unwaited (its exchange unwound): the link is poisoned, no lane touches
// the buffer afterwards (it is freed right away here), and the peer's receive fails fast.
TEST(Lanes, AnUnwaitedLanedSendPoisonsAndReleasesItsBuffer) {
  auto links = twoSites();
  const size_t bytes = 64 * kLaneChunkBytes;
  std::string error;
  test::onRanks(2, [&](int r) {
    TrafficMeter m;
    if (r == 1) {
      auto buf = std::make_unique<std::vector<char>>(bytes, 'z');
      {
        GlooExchange ex(*links[1], m, "t", "p", seconds(30), kSeq);
        ex.isend(0, buf->data(), bytes, ex.slot(0, 0));
      }
      buf.reset();  // a lane reading it now would be a use after free (ASan, valgrind)
      EXPECT_FALSE(links[1]->broken().empty());
      return;
    }
    std::this_thread::sleep_for(milliseconds(200));
    std::vector<char> got(bytes);
    GlooExchange ex(*links[0], m, "t", "p", seconds(30), kSeq);
    try {
      ex.wait(ex.irecv(1, got.data(), bytes, ex.slot(0, 0)));
    } catch (const Error& e) {
      error = e.what();
    }
  });
  EXPECT_NE(error.find("rank 1"), std::string::npos) << error;
}

// A sender that stays silent: the receive times out at its deadline, naming the peer.
TEST(Lanes, ASilentSenderTimesOutNamingIt) {
  auto links = twoSites();
  std::vector<char> buf(8 * kLaneChunkBytes);
  TrafficMeter m;
  GlooExchange ex(*links[0], m, "t", "p", milliseconds(600), kSeq);
  const auto t0 = steady_clock::now();
  try {
    ex.wait(ex.irecv(1, buf.data(), buf.size(), ex.slot(0, 0)));
    ADD_FAILURE() << "no error";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
  EXPECT_LT(steady_clock::now() - t0, seconds(5));
}
