// The traffic meter counts exactly the algorithms' known volumes.
#include <gtest/gtest.h>

#include <algorithm>

#include "comm/harness.h"
#include "lowcomm/comm/algorithms.h"
#include "lowcomm/comm/selector.h"

using namespace lowcomm;
using namespace lowcomm::comm;

TEST(Traffic, RingAllreduceSends2NMinus1OverNPerRank) {
  for (int n : {2, 3, 4, 5, 7}) {
    auto comms = test::makeComms(n);
    const size_t count = 7 * 60 * 1024;  // divisible by every n here
    test::onRanks(n, [&](int r) {
      std::vector<float> x(count, 1.f);
      comms[r]->setPhase("grad");
      comms[r]->allreduce(x.data(), count, DType::f32, ReduceOp::sum, Algo::ring);
    });
    for (int r = 0; r < n; ++r) {
      const auto s = comms[r]->meter().snapshot();
      const uint64_t want = 2ull * (n - 1) * count * 4 / n;
      EXPECT_EQ(s.total.bytes_sent, want) << "n " << n;
      EXPECT_EQ(s.total.bytes_recv, want) << "n " << n;
      EXPECT_EQ(s.by_op.at("allreduce").bytes_sent, want);
      EXPECT_EQ(s.by_phase.at("grad").bytes_sent, want);
      // Threads of one process share the host key: every byte is intra-node.
      EXPECT_EQ(s.by_link.at(kIntraNode).bytes_sent, want);
      EXPECT_EQ(s.by_link.count(kInterNode), 0u);
      EXPECT_EQ(s.by_phase_link.at("grad").at(kIntraNode).bytes_recv, want);
      EXPECT_EQ(comms[r]->nodeOf(), std::vector<int>(n, 0));
    }
  }
}

// The link class is counted per message: a meter fed by hand splits intra and inter exactly.
TEST(Traffic, LinkClassesAreCountedPerMessage) {
  TrafficMeter m;
  m.recordSend("allreduce", "ab", 100, true);
  m.recordSend("allreduce", "sync", 40, false);
  m.recordRecv("allreduce", "sync", 30, false);
  m.recordSend("allreduce", "sync", 5, true);
  const auto s = m.snapshot();
  EXPECT_EQ(s.total.bytes_sent, 145u);
  EXPECT_EQ(s.by_link.at(kIntraNode).bytes_sent, 105u);
  EXPECT_EQ(s.by_link.at(kInterNode).bytes_sent, 40u);
  EXPECT_EQ(s.by_link.at(kInterNode).bytes_recv, 30u);
  EXPECT_EQ(s.by_phase_link.at("ab").count(kInterNode), 0u);
  EXPECT_EQ(s.by_phase_link.at("sync").at(kIntraNode).bytes_sent, 5u);
  EXPECT_EQ(s.by_phase_link.at("sync").at(kInterNode).bytes_sent, 40u);
}

// Shared memory counts what crosses process boundaries: the part of our slot the other ranks
// reduce plus our result share that n-1 ranks copy out, the same 2(n-1)/n of the buffer as a ring.
TEST(Traffic, SharedMemoryAllreduceCountsLikeARing) {
  for (int n : {2, 3, 4}) {
    CommOptions o;
    o.shm = ShmMode::on;
    o.shm_piece_bytes = 64 << 10;
    auto comms = test::makeComms(n, o);
    const size_t count = 12 * 4096;  // divisible by every n here; three pieces
    test::onRanks(n, [&](int r) {
      std::vector<float> x(count, 1.f);
      comms[r]->allreduce(x.data(), 1, DType::f32, ReduceOp::sum, Algo::shm);  // first use sets up the segment
      comms[r]->barrier();
      comms[r]->meter().reset();
      comms[r]->allreduce(x.data(), count, DType::f32, ReduceOp::sum, Algo::shm);
    });
    // Shares of a piece differ by at most one value between ranks; the total is exact.
    uint64_t total = 0;
    for (int r = 0; r < n; ++r) {
      const uint64_t s = comms[r]->meter().snapshot().total.bytes_sent;
      total += s;
      EXPECT_NEAR(double(s), 2.0 * (n - 1) * count * 4 / n, 3.0 * (n - 2) * 4) << "n " << n;
    }
    EXPECT_EQ(total, 2ull * (n - 1) * count * 4) << "n " << n;
  }
}

TEST(Traffic, HalvingDoublingPowerOfTwoMatchesRingVolume) {
  const int n = 4;
  auto comms = test::makeComms(n);
  const size_t count = 1 << 16;
  test::onRanks(n, [&](int r) {
    std::vector<float> x(count, 1.f);
    comms[r]->allreduce(x.data(), count, DType::f32, ReduceOp::sum, Algo::halving_doubling);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(comms[r]->meter().snapshot().total.bytes_sent, 2ull * 3 * count * 4 / 4);
}

// The pipelined chain from root 1 over 4 ranks: 1 -> 2 -> 3 -> 0, every link carries the buffer
// once (the tree's root would send it twice), in chainSegmentBytes() messages.
TEST(Traffic, ChainBroadcastSendsTheBufferOncePerLink) {
  const int n = 4;
  auto comms = test::makeComms(n);
  const size_t count = 1 << 20;  // 4 MiB of f32
  const size_t bytes = count * 4, seg = chainSegmentBytes(bytes, n, comms[0]->options().segment_bytes);
  ASSERT_EQ(autoBroadcast(bytes, n, comms[0]->options().segment_bytes), Algo::chain);
  test::onRanks(n, [&](int r) {
    std::vector<float> x(count, r == 1 ? 3.f : 0.f);
    comms[r]->broadcast(x.data(), count, DType::f32, 1);
    EXPECT_TRUE(std::all_of(x.begin(), x.end(), [](float v) { return v == 3.f; })) << "rank " << r;
  });
  for (int r = 0; r < n; ++r) {
    const auto t = comms[r]->meter().snapshot().by_op.at("broadcast");
    EXPECT_EQ(t.bytes_sent, r == 0 ? 0u : bytes) << "rank " << r;  // rank 0 ends the chain
    EXPECT_EQ(t.bytes_recv, r == 1 ? 0u : bytes) << "rank " << r;
  }
  EXPECT_EQ(seg, bytes / 30);  // ~10 segments per hop: 30 for 3 hops
}

TEST(Autobroadcast, ChainForBandwidthBoundSizesTreeOtherwise) {
  EXPECT_EQ(autoBroadcast(4 << 20, 4, 1 << 20), Algo::chain);
  EXPECT_EQ(autoBroadcast(64 << 20, 64, 1 << 20), Algo::chain);
  EXPECT_EQ(autoBroadcast(4 << 10, 4, 1 << 20), Algo::tree);     // one segment: latency-bound
  EXPECT_EQ(autoBroadcast(64 << 20, 2, 1 << 20), Algo::tree);    // 2 ranks: the same message either way
  EXPECT_EQ(autoBroadcast(1 << 20, 4096, 1 << 20), Algo::tree);  // 16 segments for 4095 hops
  EXPECT_EQ(chainSegmentBytes(64 << 20, 4, 1 << 20), size_t{1} << 20);  // capped at the segment option
  EXPECT_EQ(chainSegmentBytes(16 << 10, 4, 1 << 20), kChainMinSegment);
  const size_t huge = size_t{1} << 36;  // segments never outgrow the slot's 14 bits
  EXPECT_LT(huge / chainSegmentBytes(huge, 4, 1024), size_t{kMaxSegments});
}

TEST(Traffic, PhasesOpsAndReset) {
  const int n = 3;
  auto comms = test::makeComms(n);
  test::onRanks(n, [&](int r) {
    std::vector<int32_t> x(300, r), all(900);
    comms[r]->setPhase("sync");
    comms[r]->allgather(x.data(), all.data(), 300, DType::i32);
    comms[r]->setPhase("bcast");
    comms[r]->broadcast(x.data(), 300, DType::i32, 0);
  });
  // Allgather: every rank receives the other two blocks (and sends n-1 blocks around the ring).
  for (int r = 0; r < n; ++r) {
    auto s = comms[r]->meter().snapshot();
    EXPECT_EQ(s.by_phase.at("sync").bytes_recv, 2u * 300 * 4);
    EXPECT_EQ(s.by_phase.at("sync").bytes_sent, 2u * 300 * 4);
    EXPECT_EQ(s.by_op.at("allgather").bytes_recv, 2u * 300 * 4);
    // Binomial tree from rank 0 with 3 ranks: 0 sends to 1 and 2.
    EXPECT_EQ(s.by_phase.at("bcast").bytes_recv, r == 0 ? 0u : 1200u);
    EXPECT_EQ(s.by_phase.at("bcast").bytes_sent, r == 0 ? 2400u : 0u);
    comms[r]->meter().reset();
    EXPECT_EQ(comms[r]->meter().snapshot().total.bytes_sent, 0u);
  }
}
