// Multi-stream transport (src/comm/stripe.h): ranks in two sites, messages between the sites
// striped over k connections. Every result must equal the one-stream run bit for bit, and the
// traffic meter must count the same bytes, with those that crossed sites as "inter-site".
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>

#include "comm/harness.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/communicator.h"

using namespace lowcomm;
using namespace lowcomm::comm;
using lowcomm::test::CommPtr;

namespace {

constexpr size_t kStripeMin = 64;  // bytes: every message of 16+ floats stripes

// Ranks 0 .. ceil(n/2)-1 in site 0, the others in site 1.
CommOptions sited(int r, int n, int streams) {
  CommOptions o;
  o.site = r < (n + 1) / 2 ? 0 : 1;
  o.streams = streams;
  o.stripe_min_bytes = kStripeMin;
  o.segment_bytes = 4096;
  o.group_size = 2;
  o.shm = ShmMode::off;  // ranks are threads of one host: keep every algorithm on TCP
  return o;
}

std::vector<CommPtr> sitedComms(int n, int streams) {
  return test::makeComms(n, [=](int r) { return sited(r, n, streams); });
}

// Floats that are not small integers, so any change of summation order shows in the bits.
std::vector<float> data(int rank, size_t count, int salt) {
  std::mt19937 gen(static_cast<unsigned>(rank * 7919 + salt * 104729 + static_cast<int>(count)));
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(count + 1);
  for (auto& x : v) x = d(gen);
  return v;
}

void append(std::vector<char>& out, const void* p, size_t bytes) {
  out.insert(out.end(), static_cast<const char*>(p), static_cast<const char*>(p) + bytes);
}

const size_t kCounts[] = {0, 1, 7, 4099};

// Every collective once per count, on every rank; the results as bytes per rank.
void collectives(Communicator& c, int r, std::vector<char>& out) {
  const int n = c.size();
  for (size_t count : kCounts) {
    for (const auto& spec : algorithmTable()) {
      if (!spec.runsOp(Op::allreduce) || spec.needs == Needs::one_host ||
          !shapeFits(spec.algo, n, c.options().group_size))
        continue;
      auto b = data(r, count, static_cast<int>(spec.algo));
      c.allreduce(b.data(), count, DType::f32, ReduceOp::sum, spec.algo);
      append(out, b.data(), count * 4);
    }
    for (Algo a : {Algo::tree, Algo::chain}) {
      auto b = data(r, count, 50 + static_cast<int>(a));
      c.broadcast(b.data(), count, DType::f32, n - 1, a);
      append(out, b.data(), count * 4);
    }
    for (Algo a : {Algo::ring, Algo::hierarchical}) {
      if (!shapeFits(a, n, c.options().group_size)) continue;
      auto in = data(r, count, 60);
      std::vector<float> all(n * count + 1);
      c.allgather(in.data(), all.data(), count, DType::f32, a);
      append(out, all.data(), n * count * 4);
      std::vector<size_t> counts(n);
      for (int i = 0; i < n; ++i) counts[i] = (count + static_cast<size_t>(i)) % (count + 2);  // uneven, some empty
      std::vector<float> v(n * (count + 2) + 1);
      c.allgatherv(in.data(), counts[r], v.data(), counts, DType::f32, a);
      append(out, v.data(), v.size() * 4);
    }
    auto in = data(r, n * count, 70);
    std::vector<float> block(count + 1);
    c.reduceScatter(in.data(), block.data(), count, DType::f32, ReduceOp::sum);
    append(out, block.data(), count * 4);
  }
}

// Point-to-point across and inside the sites: exchange with both ring neighbours, a blocking
// send/recv from the last rank to rank 0, and rank 0 receiving from any other rank.
void pointToPoint(Communicator& c, int r, std::vector<char>& out) {
  const int n = c.size();
  if (n < 2) return;
  const size_t count = 4099;
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  auto a = data(r, count, 80), b = data(r, count, 81);
  std::vector<float> from_prev(count), from_next(count);
  std::vector<Communicator::P2P> sends = {{next, a.data(), count * 4}}, recvs = {{prev, from_prev.data(), count * 4}};
  if (n > 2) sends.push_back({prev, b.data(), count * 4}), recvs.push_back({next, from_next.data(), count * 4});
  c.exchange(sends, recvs, 3);
  append(out, from_prev.data(), count * 4);
  append(out, from_next.data(), count * 4);
  if (r == n - 1) c.send(b.data(), 13 * 4, 0, 4);
  if (r == 0) {
    std::vector<float> got(13);
    c.recv(got.data(), 13 * 4, n - 1, 4);
    append(out, got.data(), got.size() * 4);
    std::vector<int> srcs;
    for (int s = 1; s < n; ++s) srcs.push_back(s);
    std::map<int, std::vector<float>> by_peer;  // arrival order is timing: compare by sender
    for (int i = 1; i < n; ++i) {
      std::vector<float> m(count);
      const int from = c.recvAny(m.data(), count * 4, srcs, 5);
      by_peer[from] = m;
    }
    for (auto& [from, m] : by_peer) append(out, &from, sizeof(from)), append(out, m.data(), count * 4);
  } else {
    c.send(a.data(), count * 4, 0, 5);
  }
}

struct Outcome {
  std::vector<std::vector<char>> bytes;  // per rank
  std::vector<TrafficSnapshot> traffic;  // per rank
};

Outcome runAll(std::vector<CommPtr>& comms) {
  const int n = static_cast<int>(comms.size());
  Outcome o{std::vector<std::vector<char>>(n), std::vector<TrafficSnapshot>(n)};
  test::onRanks(n, [&](int r) {
    collectives(*comms[r], r, o.bytes[r]);
    pointToPoint(*comms[r], r, o.bytes[r]);
    o.traffic[r] = comms[r]->meter().snapshot();
  });
  return o;
}

void expectSameTraffic(const TrafficSnapshot& a, const TrafficSnapshot& b, const std::string& what) {
  EXPECT_EQ(a.total.bytes_sent, b.total.bytes_sent) << what;
  EXPECT_EQ(a.total.bytes_recv, b.total.bytes_recv) << what;
  EXPECT_EQ(a.total.messages_sent, b.total.messages_sent) << what;
  ASSERT_EQ(a.by_link.size(), b.by_link.size()) << what;
  for (const auto& [link, c] : a.by_link) {
    EXPECT_EQ(c.bytes_sent, b.by_link.at(link).bytes_sent) << what << " " << link;
    EXPECT_EQ(c.bytes_recv, b.by_link.at(link).bytes_recv) << what << " " << link;
  }
}

class StripeWorld : public ::testing::TestWithParam<int> {};

TEST_P(StripeWorld, EveryOperationEqualsOneStreamBitForBit) {
  const int n = GetParam();
  auto one = sitedComms(n, 1);
  const Outcome want = runAll(one);
  for (int k : {3, 4}) {
    auto comms = sitedComms(n, k);
    EXPECT_EQ(comms[0]->streams(), k);
    const Outcome got = runAll(comms);
    for (int r = 0; r < n; ++r) {
      const std::string what = "streams " + std::to_string(k) + " rank " + std::to_string(r);
      ASSERT_EQ(got.bytes[r].size(), want.bytes[r].size()) << what;
      EXPECT_TRUE(std::memcmp(got.bytes[r].data(), want.bytes[r].data(), want.bytes[r].size()) == 0) << what;
      expectSameTraffic(got.traffic[r], want.traffic[r], what);
      EXPECT_GT(got.traffic[r].by_link.at(kInterSite).bytes_sent, 0u) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, StripeWorld, ::testing::Values(2, 3, 4, 5));

}  // namespace

// Streams connect only when the ranks span sites; pairs inside a site, and communicators
// without site information, keep one connection.
TEST(Stripe, StreamsOnlyWhenTheRanksSpanSites) {
  auto unknown = test::makeComms(3, [](int) {
    CommOptions o;
    o.streams = 4;
    return o;
  });
  EXPECT_EQ(unknown[0]->streams(), 1);
  EXPECT_EQ(unknown[0]->topology().site_of, (std::vector<int>{-1, -1, -1}));
  auto one_site = test::makeComms(3, [](int) {
    CommOptions o;
    o.streams = 4;
    o.site = 2;
    return o;
  });
  EXPECT_EQ(one_site[1]->streams(), 1);
  auto two = sitedComms(4, 3);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(two[r]->streams(), 3);
    EXPECT_EQ(two[r]->topology().site_of, (std::vector<int>{0, 0, 1, 1}));
    EXPECT_EQ(two[r]->topology().node_of, (std::vector<int>{0, 0, 0, 0}));
  }
}

// The meter's "inter-site" class is exactly what crossed sites, once per message whatever k.
TEST(Stripe, InterSiteBytesAreTheBytesThatCrossedSites) {
  for (int k : {1, 3}) {
    auto comms = sitedComms(4, k);  // sites 0, 0, 1, 1
    test::onRanks(4, [&](int r) {
      std::vector<char> buf(1000);
      if (r == 0) comms[0]->send(buf.data(), 1000, 2), comms[0]->send(buf.data(), 500, 1);
      if (r == 2) comms[2]->recv(buf.data(), 1000, 0);
      if (r == 1) comms[1]->recv(buf.data(), 500, 0);
    });
    const auto s = comms[0]->meter().snapshot();
    EXPECT_EQ(s.by_link.at(kInterSite).bytes_sent, 1000u);
    EXPECT_EQ(s.by_link.at(kInterSite).messages_sent, 1u);
    EXPECT_EQ(s.by_link.at(kIntraNode).bytes_sent, 500u);  // threads of one host
    EXPECT_EQ(comms[2]->meter().snapshot().by_link.at(kInterSite).bytes_recv, 1000u);
    EXPECT_EQ(comms[1]->meter().snapshot().by_link.count(kInterSite), 0u);

    // A ring allreduce of 4096 floats over ranks 0..3: the two ring edges between the sites
    // each carry 2 (n - 1) blocks of 1024 floats.
    for (auto& c : comms) c->meter().reset();
    test::onRanks(4, [&](int r) {
      std::vector<float> x(4096, 1.f);
      comms[r]->allreduce(x.data(), x.size(), DType::f32, ReduceOp::sum, Algo::ring);
    });
    uint64_t crossed = 0;
    int senders = 0;
    for (auto& c : comms) {
      const auto t = c->meter().snapshot();
      const auto it = t.by_link.find(kInterSite);
      if (it == t.by_link.end() || it->second.bytes_sent == 0) continue;
      EXPECT_EQ(it->second.bytes_sent, 2u * 3 * 1024 * 4) << "k " << k;
      crossed += it->second.bytes_sent;
      senders += it->second.bytes_sent > 0;
    }
    EXPECT_EQ(senders, 2);
    EXPECT_EQ(crossed, 2u * 2 * 3 * 1024 * 4);
  }
}

// Split communicators carry their members' sites and stripe their cross-site pairs (the
// hierarchical algorithms' leaders); a split inside one site does not.
TEST(Stripe, SplitCommunicatorsStripeTheirCrossSitePairs) {
  std::vector<float> want;
  for (int k : {1, 3}) {
    auto comms = sitedComms(4, k);  // sites 0, 0, 1, 1
    std::vector<CommPtr> leaders(4), site(4);
    std::vector<std::vector<float>> got(4);
    test::onRanks(4, [&](int r) {
      leaders[r] = comms[r]->split(r % 2, r);         // {0, 2} and {1, 3}: one rank per site
      site[r] = comms[r]->split(comms[r]->options().site, r);  // {0, 1} and {2, 3}
      got[r] = data(r, 4099, 9);
      leaders[r]->allreduce(got[r].data(), 4099, DType::f32, ReduceOp::sum, Algo::ring);
    });
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(leaders[r]->streams(), k);
      EXPECT_EQ(leaders[r]->topology().site_of, (std::vector<int>{0, 1}));
      EXPECT_EQ(site[r]->streams(), 1);
    }
    if (want.empty()) want = got[0];
    EXPECT_EQ(std::memcmp(got[0].data(), want.data(), 4099 * 4), 0) << "k " << k;
  }
}

TEST(Stripe, BadStreamCountsAreConfigErrors) {
  auto store = std::make_shared<net::MemoryStore>();
  for (int k : {-1, 65}) {  // 0 is kAutoStreams
    CommOptions o;
    o.streams = k;
    EXPECT_THROW(Communicator::create(store, 0, 1, o), ConfigError);
  }
}
