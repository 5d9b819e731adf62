// Broadcast, allgather(v), reduce-scatter, alltoall, barrier and send/recv over world sizes 1..7.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>

#include "comm/harness.h"
#include "lowcomm/base/error.h"
#include "comm/typed_data.h"

using namespace lowcomm;
using namespace lowcomm::comm;

namespace {

class Collectives : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    CommOptions opts;
    opts.segment_bytes = 1024;
    opts.timeout = std::chrono::seconds(30);
    comms_ = test::makeComms(GetParam(), opts);
  }
  int n() const { return GetParam(); }
  std::vector<test::CommPtr> comms_;
};

const size_t kCounts[] = {0, 1, 7, 20000};

// The binomial tree, the pipelined chain (1 KiB segments here: 20000 elements are many) and the
// automatic choice, from every root.
TEST_P(Collectives, BroadcastFromEveryRoot) {
  for (Algo algo : {Algo::automatic, Algo::tree, Algo::chain})
    for (DType dt : test::kAllTypes)
      for (size_t count : kCounts)
        for (int root = 0; root < n(); ++root) {
          std::vector<std::vector<char>> bufs(n());
          test::onRanks(n(), [&](int r) {
            bufs[r] = r == root ? test::filled(root, count, dt) : std::vector<char>(count * dtypeSize(dt) + 1, 0);
            comms_[r]->broadcast(bufs[r].data(), count, dt, root, algo);
          });
          for (int r = 0; r < n(); ++r)
            for (size_t i = 0; i < count; ++i)
              ASSERT_EQ(test::load(dt, bufs[r].data(), i), test::valueOf(root, i, dt))
                  << algoName(algo) << " root " << root << " rank " << r << " i " << i << " " << dtypeName(dt);
        }
}

TEST_P(Collectives, Allgather) {
  for (DType dt : test::kAllTypes)
    for (size_t count : kCounts) {
      const size_t es = dtypeSize(dt);
      std::vector<std::vector<char>> out(n(), std::vector<char>(n() * count * es + 1));
      test::onRanks(n(), [&](int r) {
        auto in = test::filled(r, count, dt);
        comms_[r]->allgather(in.data(), out[r].data(), count, dt);
      });
      for (int r = 0; r < n(); ++r)
        for (int src = 0; src < n(); ++src)
          for (size_t i = 0; i < count; ++i)
            ASSERT_EQ(test::load(dt, out[r].data(), src * count + i), test::valueOf(src, i, dt));
    }
}

TEST_P(Collectives, AllgathervWithUnevenAndEmptyBlocks) {
  const DType dt = DType::f32;
  std::vector<size_t> counts(n());
  for (int r = 0; r < n(); ++r) counts[r] = (r % 3 == 1) ? 0 : 1000 * r + 3;  // some ranks send nothing
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  std::vector<std::vector<float>> out(n(), std::vector<float>(total + 1));
  test::onRanks(n(), [&](int r) {
    auto in = test::filled(r, counts[r], dt);
    comms_[r]->allgatherv(in.data(), counts[r], out[r].data(), counts, dt);
  });
  for (int r = 0; r < n(); ++r) {
    size_t at = 0;
    for (int src = 0; src < n(); ++src)
      for (size_t i = 0; i < counts[src]; ++i, ++at) ASSERT_EQ(out[r][at], test::valueOf(src, i, dt));
  }
}

// The hierarchical allgather(v) with every group size that leaves more than one group (the
// last group smaller where it does not divide the world), uneven and empty blocks, 1 KiB segments
// (many per block), forced and as the automatic choice; without a group size it is refused.
TEST_P(Collectives, AllgathervHierarchicalEveryGroupSize) {
  const DType dt = DType::f32;
  for (int gs = 2; gs < n(); ++gs) {
    CommOptions opts;
    opts.segment_bytes = 1024;
    opts.timeout = std::chrono::seconds(30);
    opts.group_size = gs;
    auto comms = test::makeComms(n(), opts);
    for (Algo algo : {Algo::hierarchical, Algo::automatic})
      for (size_t scale : {size_t{0}, size_t{1}, size_t{997}}) {
        std::vector<size_t> counts(n());
        for (int r = 0; r < n(); ++r) counts[r] = (r % 3 == 1) ? 0 : scale * r + 3;
        const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
        std::vector<std::vector<float>> out(n(), std::vector<float>(total + 1, -1.f));
        test::onRanks(n(), [&](int r) {
          auto in = test::filled(r, counts[r], dt);
          comms[r]->allgatherv(in.data(), counts[r], out[r].data(), counts, dt, algo);
        });
        for (int r = 0; r < n(); ++r) {
          size_t at = 0;
          for (int src = 0; src < n(); ++src)
            for (size_t i = 0; i < counts[src]; ++i, ++at)
              ASSERT_EQ(out[r][at], test::valueOf(src, i, dt))
                  << algoName(algo) << " groups of " << gs << " scale " << scale << " rank " << r << " src " << src;
          ASSERT_EQ(out[r][total], -1.f) << "wrote past the end";
        }
      }
  }
  if (n() > 1)
    test::onRanks(n(), [&](int r) {  // the fixture's communicators have no group size
      float x = 0, all[8];
      EXPECT_THROW(comms_[r]->allgather(&x, all, 1, dt, Algo::hierarchical), ConfigError);
    });
}

// Also in place (the result lands in the rank's own block of the input, ZeRO's use).
TEST_P(Collectives, ReduceScatterEveryOp) {
  for (bool in_place : {false, true}) {
    for (DType dt : {DType::f32, DType::bf16, DType::i64})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min})
        for (size_t count : kCounts) {
          const size_t es = dtypeSize(dt);
          std::vector<std::vector<char>> out(n(), std::vector<char>(count * es + 1));
          test::onRanks(n(), [&](int r) {
            auto in = test::filled(r, n() * count, dt);
            if (!in_place) {
              comms_[r]->reduceScatter(in.data(), out[r].data(), count, dt, op);
              return;
            }
            char* block = in.data() + r * count * es;
            comms_[r]->reduceScatter(in.data(), block, count, dt, op);
            std::memcpy(out[r].data(), block, count * es);
          });
          for (int r = 0; r < n(); ++r)
            for (size_t i = 0; i < count; ++i) {
              double sum = 0, mx = -1e9, mn = 1e9;
              for (int s = 0; s < n(); ++s) {
                const double v = test::valueOf(s, r * count + i, dt);
                sum += v, mx = std::max(mx, v), mn = std::min(mn, v);
              }
              const double want = op == ReduceOp::sum ? sum
                                  : op == ReduceOp::avg ? test::averaged(dt, sum, n())
                                  : op == ReduceOp::max ? mx : mn;
              ASSERT_EQ(test::load(dt, out[r].data(), i), want)
                  << "rank " << r << " i " << i << " " << reduceOpName(op) << (in_place ? " in place" : "");
            }
        }
  }
}

TEST_P(Collectives, Alltoall) {
  for (size_t count : kCounts) {
    std::vector<std::vector<int64_t>> out(n(), std::vector<int64_t>(n() * count + 1));
    test::onRanks(n(), [&](int r) {
      std::vector<int64_t> in(n() * count + 1);
      for (int j = 0; j < n(); ++j)
        for (size_t i = 0; i < count; ++i) in[j * count + i] = r * 1000000 + j * 1000 + static_cast<int64_t>(i);
      comms_[r]->alltoall(in.data(), out[r].data(), count, DType::i64);
    });
    for (int r = 0; r < n(); ++r)
      for (int src = 0; src < n(); ++src)
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(out[r][src * count + i], src * 1000000 + r * 1000 + static_cast<int64_t>(i));
  }
}

TEST_P(Collectives, BarrierHoldsEveryoneUntilTheLastArrives) {
  std::atomic<int> arrived{0};
  std::atomic<int> early{0};
  test::onRanks(n(), [&](int r) {
    if (r == n() - 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    arrived++;
    comms_[r]->barrier();
    if (arrived.load() != n()) early++;
  });
  EXPECT_EQ(early.load(), 0);
}

TEST_P(Collectives, SendRecvRingOfMessagesWithTags) {
  if (n() == 1) GTEST_SKIP() << "send/recv needs two ranks";
  // send() completes once the receiver has posted the matching recv (Gloo's rendezvous), so
  // even ranks send first and odd ranks receive first; tags keep the two messages apart.
  std::vector<std::vector<int32_t>> got(n(), std::vector<int32_t>(2 * 5000));
  test::onRanks(n(), [&](int r) {
    std::vector<int32_t> a(5000, r), b(5000, -r);
    const int next = (r + 1) % n(), prev = (r + n() - 1) % n();
    auto sendBoth = [&] {
      comms_[r]->send(a.data(), a.size() * 4, next, 1);
      comms_[r]->send(b.data(), b.size() * 4, next, 2);
    };
    auto recvBoth = [&] {
      comms_[r]->recv(got[r].data(), 5000 * 4, prev, 1);
      comms_[r]->recv(got[r].data() + 5000, 5000 * 4, prev, 2);
    };
    // With odd n, the last rank (even) and rank 0 (even) would both send first: rank n-1 receives first.
    const bool sender_first = r % 2 == 0 && !(n() % 2 == 1 && r == n() - 1);
    if (sender_first) sendBoth(), recvBoth();
    else recvBoth(), sendBoth();
  });
  for (int r = 0; r < n(); ++r) {
    const int prev = (r + n() - 1) % n();
    EXPECT_EQ(got[r][0], prev);
    EXPECT_EQ(got[r][4999], prev);
    EXPECT_EQ(got[r][5000], -prev);
  }
}

// Non-blocking point-to-point: every rank posts its sends to both neighbours before its
// receives (with blocking send() that order deadlocks), waits them in reverse order, and one
// receive is waited by another thread. Messages with the same (peer, tag) arrive in posting order.
TEST_P(Collectives, IsendIrecvPostedAtOnceWaitedInAnyOrder) {
  if (n() == 1) GTEST_SKIP() << "isend/irecv needs two ranks";
  std::vector<std::vector<int32_t>> first(n(), std::vector<int32_t>(4000)), second(first), back(first);
  test::onRanks(n(), [&](int r) {
    std::vector<int32_t> a(4000, r + 1), b(4000, 100 + r), c(4000, -(r + 1));
    const int next = (r + 1) % n(), prev = (r + n() - 1) % n();
    std::vector<std::unique_ptr<Communicator::Request>> reqs;
    reqs.push_back(comms_[r]->isend(a.data(), a.size() * 4, next, 5));
    reqs.push_back(comms_[r]->isend(b.data(), b.size() * 4, next, 5));
    reqs.push_back(comms_[r]->isend(c.data(), c.size() * 4, prev, 6));
    reqs.push_back(comms_[r]->irecv(first[r].data(), 4000 * 4, prev, 5));
    reqs.push_back(comms_[r]->irecv(second[r].data(), 4000 * 4, prev, 5));
    auto from_next = comms_[r]->irecv(back[r].data(), 4000 * 4, next, 6);
    EXPECT_EQ(from_next->peer(), next);
    std::thread other([&] { from_next->wait(); });
    for (auto it = reqs.rbegin(); it != reqs.rend(); ++it) (*it)->wait();
    other.join();
    for (auto& q : reqs) EXPECT_TRUE(q->done());
    EXPECT_TRUE(from_next->done());
  });
  for (int r = 0; r < n(); ++r) {
    const int next = (r + 1) % n(), prev = (r + n() - 1) % n();
    EXPECT_EQ(first[r][3999], prev + 1);
    EXPECT_EQ(second[r][0], 100 + prev);
    EXPECT_EQ(back[r][0], -(next + 1));
  }
  EXPECT_THROW(comms_[0]->isend(nullptr, 4, 0), ConfigError);
  EXPECT_THROW(comms_[0]->irecv(nullptr, 4, n()), ConfigError);
}

// Every rank sends to both neighbours and receives from both in one call: no ordering needed
// (with two ranks the one neighbour is both). A plain recv() takes a message of exchange() with
// the same tag.
TEST_P(Collectives, ExchangeWithBothNeighboursAtOnce) {
  if (n() == 1) GTEST_SKIP() << "exchange needs two ranks";
  std::vector<std::vector<int32_t>> left(n(), std::vector<int32_t>(3000)), right(left), extra(left);
  test::onRanks(n(), [&](int r) {
    std::vector<int32_t> mine(3000, r + 1), bonus(3000, -(r + 1));
    const int next = (r + 1) % n(), prev = (r + n() - 1) % n();
    const size_t bytes = mine.size() * 4;
    if (n() == 2) comms_[r]->exchange({{next, mine.data(), bytes}}, {{prev, left[r].data(), bytes}}, 7);
    else
      comms_[r]->exchange({{next, mine.data(), bytes}, {prev, mine.data(), bytes}},
                          {{prev, left[r].data(), bytes}, {next, right[r].data(), bytes}}, 7);
    // Mixed with plain calls: even ranks exchange-send, odd ranks receive with recv() first.
    if (r % 2 == 0 && r != n() - 1) comms_[r]->exchange({{next, bonus.data(), bytes}}, {}, 9);
    else if (r % 2 == 1) comms_[r]->recv(extra[r].data(), bytes, prev, 9);
  });
  for (int r = 0; r < n(); ++r) {
    const int next = (r + 1) % n(), prev = (r + n() - 1) % n();
    EXPECT_EQ(left[r][0], prev + 1);
    EXPECT_EQ(left[r][2999], prev + 1);
    if (n() > 2) {
      EXPECT_EQ(right[r][2999], next + 1);
    }
    if (r % 2 == 1) {
      EXPECT_EQ(extra[r][0], -(prev + 1));
    }
  }
}

// A parameter server's receive: rank 0 takes the other ranks' messages in whatever order they
// come, each labelled with its sender; a message with another tag, sent meanwhile, waits for its
// own recv; bad source lists are ConfigErrors.
TEST_P(Collectives, RecvAnyTakesMessagesFromWhoeverSendsFirst) {
  if (n() == 1) GTEST_SKIP() << "recvAny needs two ranks";
  std::vector<int> from;
  std::vector<int32_t> payload_ok(n(), 0);
  int32_t late = 0;
  std::atomic<bool> first_in{false};  // rank 0 has its first message
  test::onRanks(n(), [&](int r) {
    std::vector<int> others;
    for (int q = 1; q < n(); ++q) others.push_back(q);
    if (r == 0) {
      std::vector<int32_t> buf(2000);
      for (int i = 1; i < n(); ++i) {
        const int src = comms_[0]->recvAny(buf.data(), buf.size() * 4, others, 3);
        from.push_back(src);
        payload_ok[src] = buf.front() == 100 + src && buf.back() == 100 + src;
        first_in = true;
      }
      comms_[0]->recv(&late, 4, n() - 1, 4);
      EXPECT_THROW(comms_[0]->recvAny(buf.data(), 4, {}, 3), ConfigError);
      EXPECT_THROW(comms_[0]->recvAny(buf.data(), 4, {0}, 3), ConfigError);
      EXPECT_THROW(comms_[0]->recvAny(buf.data(), 4, {n()}, 3), ConfigError);
    } else {
      // The last rank sends first and alone (the others only once rank 0 has its message, so
      // the order does not depend on thread scheduling), so the order of arrival is not the
      // order of ranks; the rest arrive at staggered times.
      if (r != n() - 1) {
        while (!first_in) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::this_thread::sleep_for(std::chrono::milliseconds(10 * (n() - r)));
      }
      std::vector<int32_t> mine(2000, 100 + r);
      comms_[r]->send(mine.data(), mine.size() * 4, 0, 3);
      // Sent while rank 0 still waits in recvAny for tag 3: only its own recv takes it.
      int32_t tagged = -7;
      if (r == n() - 1) comms_[r]->exchange({{0, &tagged, 4}}, {}, 4);
    }
  });
  std::vector<int> sorted = from;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> want;
  for (int q = 1; q < n(); ++q) want.push_back(q);
  EXPECT_EQ(sorted, want) << "each sender exactly once";
  for (int q = 1; q < n(); ++q) EXPECT_TRUE(payload_ok[q]) << "the payload of rank " << q;
  if (n() > 2) {
    EXPECT_EQ(from.front(), n() - 1) << "the first to send is the first received";
  }
  EXPECT_EQ(late, -7);
}

// Several MiB per call, with the default 1 MiB segments: many segments per block, pipelined.
TEST_P(Collectives, SeveralMiBEveryOp) {
  CommOptions opts;
  opts.timeout = std::chrono::seconds(60);
  auto comms = test::makeComms(n(), opts);
  const size_t big = (3u << 20) / 4 + 1;  // 3 MiB of f32, odd count
  const size_t block = (1u << 20) / 4 + 3;
  std::vector<int64_t> wrong(n(), 0);
  test::onRanks(n(), [&](int r) {
    auto& c = *comms[r];
    std::vector<float> b(big, r == 1 % n() ? 7.f : 0.f);
    c.broadcast(b.data(), big, DType::f32, 1 % n());
    for (float x : b) wrong[r] += x != 7.f;
    std::vector<float> bc(big, r == n() - 1 ? 5.f : 0.f);
    c.broadcast(bc.data(), big, DType::f32, n() - 1, Algo::chain);  // 3 MiB in chainSegmentBytes() pieces
    for (float x : bc) wrong[r] += x != 5.f;
    std::vector<float> mine(block, static_cast<float>(r)), all(n() * block);
    c.allgather(mine.data(), all.data(), block, DType::f32);
    for (size_t i = 0; i < all.size(); ++i) wrong[r] += all[i] != static_cast<float>(i / block);
    std::vector<float> in(n() * block), out(block);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i / block + r);
    c.reduceScatter(in.data(), out.data(), block, DType::f32, ReduceOp::sum);
    const float want = static_cast<float>(n() * r + n() * (n() - 1) / 2);
    for (float x : out) wrong[r] += x != want;
    std::vector<float> a2a(n() * block);
    c.alltoall(in.data(), a2a.data(), block, DType::f32);
    for (size_t i = 0; i < a2a.size(); ++i) wrong[r] += a2a[i] != static_cast<float>(r + i / block);
  });
  for (int r = 0; r < n(); ++r) EXPECT_EQ(wrong[r], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Worlds, Collectives, ::testing::Range(1, 8));

TEST(CollectivesArgs, BadArgumentsAreConfigErrors) {
  auto comms = test::makeComms(2);
  test::onRanks(2, [&](int r) {
    int x = 0;
    EXPECT_THROW(comms[r]->broadcast(&x, 1, DType::i32, 2), ConfigError);
    EXPECT_THROW(comms[r]->broadcast(&x, 1, DType::i32, 0, Algo::ring), ConfigError);  // not a broadcast algorithm
    EXPECT_THROW(comms[r]->allgatherv(&x, 1, &x, {1}, DType::i32), ConfigError);
    EXPECT_THROW(comms[r]->allgather(&x, &x, 1, DType::i32, Algo::tree), ConfigError);  // not an allgather algorithm
    EXPECT_THROW(comms[r]->send(&x, 4, r, 0), ConfigError);
    EXPECT_THROW(comms[r]->exchange({{r, &x, 4}}, {}), ConfigError);
    EXPECT_THROW(comms[r]->exchange({}, {{1 - r, &x, 4}, {1 - r, &x, 4}}), ConfigError);
    EXPECT_THROW(comms[r]->exchange({{5, &x, 4}}, {}), ConfigError);
  });
}

}  // namespace
