// The sites allreduce (src/comm/algo/allreduce_sites.cpp) on worlds 2..7 with group sizes that
// do and do not divide the world, every dtype and op, counts 0, 1, odd and several pieces:
// - exact test data (typed_data.h): the result equals the exact reference, as the ring's does;
// - random floats: every rank gets the same bits (site-ordered sums), and the result differs from
//   the ring's only by summation order: |sites - ring| <= 1e-5 * sum of |inputs| per element.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "comm/harness.h"
#include "comm/typed_data.h"
#include "lowcomm/comm/algorithms.h"

using namespace lowcomm;
using namespace lowcomm::comm;
using lowcomm::test::CommPtr;

namespace {

double expected(int n, size_t i, DType dt, ReduceOp op) { return test::expectedReduce(n, i, dt, op); }

void checkExact(std::vector<CommPtr>& comms, DType dt, ReduceOp op, size_t count) {
  const int n = static_cast<int>(comms.size());
  std::vector<std::vector<char>> bufs(n);
  test::onRanks(n, [&](int r) {
    bufs[r] = test::filled(r, count, dt);
    comms[r]->allreduce(bufs[r].data(), count, dt, op, Algo::sites);
  });
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(test::load(dt, bufs[r].data(), i), expected(n, i, dt, op))
          << "rank " << r << " dtype " << dtypeName(dt) << " op " << reduceOpName(op) << " count " << count
          << " index " << i;
}

std::vector<CommPtr> comms(int n, int group_size, size_t segment_bytes) {
  CommOptions o;
  o.shm = ShmMode::off;
  o.group_size = group_size;
  o.segment_bytes = segment_bytes;
  return test::makeComms(n, o);
}

class SitesWorld : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(SitesWorld, EveryTypeOpAndCountExact) {
  const auto [n, gs] = GetParam();
  auto c = comms(n, gs, 4096);
  for (DType dt : test::kAllTypes)
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min})
      for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{4099}}) checkExact(c, dt, op, count);
}

// Several pieces (sitesPieces), with reduce-scatter segments inside each.
TEST_P(SitesWorld, ManyPiecesExact) {
  const auto [n, gs] = GetParam();
  auto c = comms(n, gs, 64 << 10);
  const size_t count = 3 * kSitesMinPieceBytes / 4 + 3;  // f32: 3 pieces; f64: 6
  ASSERT_EQ(sitesPieces(count * 4), 3u);
  checkExact(c, DType::f32, ReduceOp::sum, count);
  checkExact(c, DType::f64, ReduceOp::max, count);
}

// Random floats: identical bits on every rank, the ring's sum up to the order of summation.
TEST_P(SitesWorld, RandomFloatsMatchTheRing) {
  const auto [n, gs] = GetParam();
  auto c = comms(n, gs, 16 << 10);
  const size_t count = 2 * kSitesMinPieceBytes / 4 + 77;
  std::vector<std::vector<float>> in(n, std::vector<float>(count));
  std::mt19937 gen(11 + n * 8 + gs);
  std::normal_distribution<float> d(0.f, 1e3f);
  for (auto& v : in)
    for (auto& x : v) x = d(gen);
  auto sites = in, ring = in;
  test::onRanks(n, [&](int r) {
    c[r]->allreduce(sites[r].data(), count, DType::f32, ReduceOp::sum, Algo::sites);
    c[r]->allreduce(ring[r].data(), count, DType::f32, ReduceOp::sum, Algo::ring);
  });
  for (int r = 1; r < n; ++r) ASSERT_EQ(0, std::memcmp(sites[r].data(), sites[0].data(), count * 4)) << "rank " << r;
  for (size_t i = 0; i < count; ++i) {
    double mag = 0;
    for (int r = 0; r < n; ++r) mag += std::fabs(in[r][i]);
    ASSERT_NEAR(sites[0][i], ring[0][i], 1e-5 * mag) << "index " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SitesWorld,
                         ::testing::Values(std::tuple{2, 1}, std::tuple{3, 2}, std::tuple{4, 2}, std::tuple{5, 2},
                                           std::tuple{5, 3}, std::tuple{6, 2}, std::tuple{6, 3}, std::tuple{6, 4},
                                           std::tuple{7, 3}, std::tuple{7, 5}, std::tuple{3, 3}));

TEST(SitesPieces, GrowWithTheBufferUpToTheCap) {
  EXPECT_EQ(sitesPieces(0), 1u);
  EXPECT_EQ(sitesPieces(4096), 1u);
  EXPECT_EQ(sitesPieces(2 * kSitesMinPieceBytes), 2u);
  EXPECT_EQ(sitesPieces(size_t{64} << 20), kSitesMaxPieces);
}

}  // namespace
