// A striped message whose peer fails half way: the waiting rank gets PeerError or TimeoutError
// naming the peer within its timeout, never a hang, whichever stream the missing piece is on.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "comm/harness.h"
#include "lowcomm/base/error.h"

using namespace lowcomm;
using namespace lowcomm::comm;
using namespace std::chrono;

namespace {

constexpr size_t kBig = 1 << 20;       // striped: 3 pieces of ~341 KiB
constexpr size_t kSmall = 32 << 10;    // below stripe_min: one piece on stream 0
constexpr size_t kStripeMin = 64 << 10;

std::vector<test::CommPtr> twoSites(milliseconds timeout) {
  return test::makeComms(2, [=](int r) {
    CommOptions o;
    o.site = r;
    o.streams = 3;
    o.stripe_min_bytes = kStripeMin;
    o.timeout = timeout;
    return o;
  });
}

enum class Then { poison, close, stall };

// Rank 1 sends a message that fills only piece 0 of rank 0's striped receive (stream 0), so
// rank 0 then waits for piece 1 on stream 1; rank 1 then fails (an unwaited request poisons its
// communicator), closes its communicator, or stalls (alive, silent).
std::string midTransfer(Then then, milliseconds timeout, milliseconds& took) {
  auto comms = twoSites(timeout);
  std::string error;
  test::onRanks(2, [&](int r) {
    if (r == 0) {
      std::vector<char> buf(kBig);
      const auto t0 = steady_clock::now();
      try {
        comms[0]->recv(buf.data(), kBig, 1, 7);
      } catch (const PeerError& e) {
        error = std::string("PeerError: ") + e.what();
      } catch (const TimeoutError& e) {
        error = std::string("TimeoutError: ") + e.what();
      }
      took = duration_cast<milliseconds>(steady_clock::now() - t0);
      return;
    }
    std::vector<char> small(kSmall, 'x');
    comms[1]->send(small.data(), kSmall, 0, 7);
    if (then == Then::poison) {
      auto req = comms[1]->isend(small.data(), 8, 0, 8);  // destroyed unwaited: poisons
    } else if (then == Then::close) {
      comms[1].reset();
    }
  });
  return error;
}

}  // namespace

TEST(StripeFailure, APeerThatFailsMidTransferFailsUsFast) {
  milliseconds took{0};
  const std::string e = midTransfer(Then::poison, seconds(20), took);
  EXPECT_NE(e.find("PeerError"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 1"), std::string::npos) << e;
  EXPECT_LT(took.count(), 5000) << e;  // the poison closed every stream, not only stream 0
}

TEST(StripeFailure, APeerThatClosesMidTransferIsAPeerError) {
  milliseconds took{0};
  const std::string e = midTransfer(Then::close, seconds(20), took);
  EXPECT_NE(e.find("PeerError"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 1"), std::string::npos) << e;
  EXPECT_LT(took.count(), 5000) << e;
}

TEST(StripeFailure, APeerThatStallsMidTransferTimesOut) {
  milliseconds took{0};
  const std::string e = midTransfer(Then::stall, milliseconds(800), took);
  EXPECT_NE(e.find("TimeoutError"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 1"), std::string::npos) << e;
  EXPECT_LT(took.count(), 5000) << e;
}

// A striped send destroyed unwaited aborts all its pieces (no buffer stays referenced) and
// poisons the communicator; the peer's receive then fails fast.
TEST(StripeFailure, AnUnwaitedStripedSendAbortsEveryPiece) {
  auto comms = twoSites(seconds(20));
  std::string error;
  const auto t0 = steady_clock::now();
  test::onRanks(2, [&](int r) {
    std::vector<char> buf(kBig, 'y');
    if (r == 1) {
      { auto req = comms[1]->isend(buf.data(), kBig, 0, 9); }
      EXPECT_THROW(comms[1]->send(buf.data(), 8, 0, 10), PeerError);  // unusable now
      return;
    }
    try {
      std::this_thread::sleep_for(milliseconds(100));  // the sender gave up before we posted
      comms[0]->recv(buf.data(), kBig, 1, 9);
    } catch (const Error& e) {
      error = e.what();
    }
  });
  EXPECT_FALSE(error.empty());
  EXPECT_LT(steady_clock::now() - t0, seconds(5)) << error;
}
