// Timeouts, dead peers and mismatched calls turn into clear errors, never hangs.
#include <gtest/gtest.h>

#include <chrono>

#include "comm/harness.h"
#include "lowcomm/base/error.h"

using namespace lowcomm;
using namespace lowcomm::comm;
using namespace std::chrono;

TEST(Failure, StuckPeerTimesOutNamingTheRank) {
  CommOptions opts;
  opts.timeout = milliseconds(400);
  auto comms = test::makeComms(3, opts);
  std::vector<std::string> errors(3);
  const auto t0 = steady_clock::now();
  test::onRanks(3, [&](int r) {
    if (r == 2) return;  // rank 2 never joins the collective
    std::vector<float> x(1000, 1.f);
    try {
      comms[r]->allreduce(x.data(), x.size(), DType::f32, ReduceOp::sum, Algo::ring);
    } catch (const TimeoutError& e) {
      errors[r] = e.what();
    } catch (const PeerError& e) {
      errors[r] = e.what();  // rank 0 closed its connections on its own timeout
    }
  });
  EXPECT_LT(steady_clock::now() - t0, seconds(10));
  // Rank 0 waits on rank 2 (its ring predecessor); rank 1 times out too, or sees rank 0 give up.
  EXPECT_NE(errors[0].find("rank 2"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("timed out"), std::string::npos) << errors[0];
  EXPECT_FALSE(errors[1].empty());
  // The communicator refuses further use instead of computing garbage.
  float y = 0;
  EXPECT_THROW(comms[0]->allreduce(&y, 1, DType::f32, ReduceOp::sum), PeerError);
}

// A parameter server whose workers never send: recvAny times out naming every candidate.
TEST(Failure, RecvAnyTimesOutNamingEveryCandidate) {
  CommOptions opts;
  opts.timeout = milliseconds(300);
  auto comms = test::makeComms(3, opts);
  std::string error;
  const auto t0 = steady_clock::now();
  int32_t x = 0;
  try {
    comms[0]->recvAny(&x, 4, {1, 2}, 5);
  } catch (const TimeoutError& e) {
    error = e.what();
  }
  EXPECT_LT(steady_clock::now() - t0, seconds(10));
  EXPECT_NE(error.find("any of ranks 1, 2"), std::string::npos) << error;
  EXPECT_NE(error.find("timed out"), std::string::npos) << error;
}

TEST(Failure, DeadPeerIsAPeerErrorNamingTheRank) {
  CommOptions opts;
  opts.timeout = seconds(20);
  opts.shm = ShmMode::off;  // the TCP path: a closed connection (shared memory: multiprocess tests)
  auto comms = test::makeComms(2, opts);
  comms[1].reset();  // rank 1 "dies": its sockets close
  std::vector<float> x(1 << 16, 1.f);
  const auto t0 = steady_clock::now();
  try {
    comms[0]->allreduce(x.data(), x.size(), DType::f32, ReduceOp::sum);
    FAIL() << "allreduce with a dead peer returned";
  } catch (const PeerError& e) {
    EXPECT_EQ(e.rank(), 1) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  } catch (const TimeoutError& e) {
    FAIL() << "a closed connection should be seen before the timeout: " << e.what();
  }
  EXPECT_LT(steady_clock::now() - t0, seconds(10));
}

TEST(Failure, MismatchedCallsAreDetectedInDebugMode) {
  CommOptions opts;
  opts.debug_check = true;
  opts.timeout = seconds(20);
  auto comms = test::makeComms(3, opts);
  std::vector<std::string> errors(3);
  test::onRanks(3, [&](int r) {
    std::vector<float> x(16, 1.f);
    try {
      comms[r]->allreduce(x.data(), r == 1 ? 11 : 10, DType::f32, ReduceOp::sum);
    } catch (const MismatchError& e) {
      errors[r] = e.what();
    }
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(errors[r].find("rank 1: allreduce count=11"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("rank 0: allreduce count=10"), std::string::npos) << errors[r];
  }
  // Matching calls pass the check.
  test::onRanks(3, [&](int r) {
    double v = r;
    comms[r]->allreduce(&v, 1, DType::f64, ReduceOp::max);
    EXPECT_EQ(v, 2.0);
  });
}

TEST(Failure, StuckPeerOverSharedMemoryTimesOutNamingTheRank) {
  CommOptions opts;
  opts.timeout = milliseconds(400);
  auto comms = test::makeComms(3, opts);
  // Map the segment first (collective), then let rank 1 stay away.
  test::onRanks(3, [&](int r) {
    float x = 1.f;
    comms[r]->allreduce(&x, 1, DType::f32, ReduceOp::sum, Algo::shm);
  });
  std::vector<std::string> errors(3);
  test::onRanks(3, [&](int r) {
    if (r == 1) return;
    std::vector<float> x(100, 1.f);
    try {
      comms[r]->allreduce(x.data(), x.size(), DType::f32, ReduceOp::sum, Algo::shm);
    } catch (const TimeoutError& e) {
      errors[r] = e.what();
    }
  });
  EXPECT_NE(errors[0].find("rank 1"), std::string::npos) << errors[0];
  EXPECT_NE(errors[2].find("rank 1"), std::string::npos) << errors[2];
}

TEST(Failure, DifferentAlgorithmsAreAMismatchInDebugMode) {
  CommOptions opts;
  opts.debug_check = true;
  opts.timeout = seconds(20);
  auto comms = test::makeComms(2, opts);
  std::vector<int> mismatches(2, 0);
  test::onRanks(2, [&](int r) {
    std::vector<float> x(1000, 1.f);
    try {
      comms[r]->allreduce(x.data(), x.size(), DType::f32, ReduceOp::sum, r == 0 ? Algo::ring : Algo::halving_doubling);
    } catch (const MismatchError&) {
      mismatches[r] = 1;
    }
  });
  EXPECT_EQ(mismatches, (std::vector<int>{1, 1}));
}

// A hier allreduce with its node part in shared memory on one rank and over TCP on another would
// exchange different messages: in debug mode the shm option is part of the call's fingerprint.
TEST(Failure, DifferentShmModesForHierAreAMismatchInDebugMode) {
  CommOptions opts;
  opts.debug_check = true;
  opts.group_size = 2;
  opts.timeout = seconds(20);
  auto comms = test::makeComms(4, opts);
  CommOptions off = opts;
  off.shm = ShmMode::off;
  comms[3]->setOptions(off);
  std::vector<int> mismatches(4, 0);
  std::string error0;
  test::onRanks(4, [&](int r) {
    std::vector<float> x(1000, 1.f);
    try {
      comms[r]->allreduce(x.data(), x.size(), DType::f32, ReduceOp::sum, Algo::hierarchical);
    } catch (const MismatchError& e) {
      mismatches[r] = 1;
      if (r == 0) error0 = e.what();
    }
  });
  EXPECT_EQ(mismatches, (std::vector<int>{1, 1, 1, 1}));
  EXPECT_NE(error0.find("rank 3"), std::string::npos) << error0;
}

// A rank that gives up closes its connections: peers blocked on it fail at once with a
// PeerError naming it, long before their own (much longer) timeout.
TEST(Failure, ARankGivingUpMakesItsPeersFailFast) {
  CommOptions opts;
  opts.timeout = seconds(30);
  auto comms = test::makeComms(3, opts);
  CommOptions quick = opts;
  quick.timeout = milliseconds(300);
  comms[0]->setOptions(quick);
  std::string error1;
  const auto t0 = steady_clock::now();
  test::onRanks(3, [&](int r) {
    if (r == 2) return;  // never joins: rank 0 times out after 300 ms
    std::vector<float> x(1000, 1.f);
    try {
      comms[r]->allreduce(x.data(), x.size(), DType::f32, ReduceOp::sum, Algo::ring);
    } catch (const PeerError& e) {
      if (r == 1) error1 = e.what();
    } catch (const TimeoutError&) {
    }
  });
  EXPECT_LT(steady_clock::now() - t0, seconds(10));
  EXPECT_NE(error1.find("rank 0"), std::string::npos) << error1;
}
