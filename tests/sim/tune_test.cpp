// simulate tune: every candidate simulated at every size, the fastest kept, turned into rules
// that give each tuned size its winner; hier and rails only where nodes hold several ranks; a
// latency-bound small buffer goes to halving-doubling's log2(n) steps, a large one on 2 x 2 to a
// two-level algorithm; a margin keeps the fixed table's choice unless another is clearly faster;
// bad candidates are errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "lowcomm/base/error.h"
#include "lowcomm/sim/tune.h"

using namespace lowcomm;
using namespace lowcomm::sim;
using comm::Algo;

namespace {

PlatformSpec star(int nodes, int ppn) {
  PlatformSpec p;
  p.nodes = nodes;
  p.ppn = ppn;
  p.link_Bps = 1e9 / 8;
  p.link_latency_s = 500e-6;
  return p;
}

const std::vector<Algo> kAll = {Algo::ring, Algo::halving_doubling, Algo::hierarchical, Algo::rails};

}  // namespace

TEST(SimTune, EveryTunedSizeGetsItsFastestAlgorithm) {
  const std::vector<size_t> sizes = {4096, 65536, 1 << 20, 16 << 20};
  for (const auto& [nodes, ppn] : {std::pair{4, 1}, std::pair{2, 2}}) {
    SCOPED_TRACE(std::to_string(nodes) + "x" + std::to_string(ppn));
    const auto r = tune(star(nodes, ppn), sizes, kAll, 1 << 20);
    const bool grouped = ppn > 1;
    EXPECT_EQ(r.candidates.size(), grouped ? 4u : 2u);  // hier, rails need nodes of several ranks
    ASSERT_EQ(r.rows.size(), sizes.size());
    for (const auto& row : r.rows) {
      ASSERT_EQ(row.time_s.size(), r.candidates.size());
      const size_t k = std::min_element(row.time_s.begin(), row.time_s.end()) - row.time_s.begin();
      EXPECT_EQ(row.best, r.candidates[k]) << row.bytes;
      EXPECT_EQ(r.table.choose(row.bytes, nodes * ppn, ppn), row.best) << row.bytes;
      for (double t : row.time_s) EXPECT_GT(t, 0);
    }
    EXPECT_EQ(r.table.choose(SIZE_MAX, nodes * ppn, ppn), r.rows.back().best);
    EXPECT_EQ(r.table.choose(4096, nodes * ppn + 1, ppn), Algo::automatic);  // only its own shape
    // Between two sizes with different winners the boundary is their geometric mean.
    for (size_t i = 0; i + 1 < r.rows.size(); ++i)
      if (r.rows[i].best != r.rows[i + 1].best) {
        const auto mid = static_cast<size_t>(std::sqrt(static_cast<double>(r.rows[i].bytes) * r.rows[i + 1].bytes));
        EXPECT_EQ(r.table.choose(mid, nodes * ppn, ppn), r.rows[i].best);
        EXPECT_EQ(r.table.choose(mid + 1, nodes * ppn, ppn), r.rows[i + 1].best);
      }
  }
  // 500 us per link: 4 KiB is latency-bound, halving-doubling's 2 steps beat the ring's 6.
  EXPECT_EQ(tune(star(4, 1), {4096}, kAll, 1 << 20).rows[0].best, Algo::halving_doubling);
  // 16 MiB on 2 x 2: the flat algorithms cross each node's link with 1.5 buffers, the two-level
  // ones with one or less.
  const auto big = tune(star(2, 2), {16 << 20}, kAll, 1 << 20).rows[0].best;
  EXPECT_TRUE(big == Algo::hierarchical || big == Algo::rails) << comm::algoName(big);
}

TEST(SimTune, BadCandidatesAndSizesAreConfigErrors) {
  EXPECT_THROW(tune(star(4, 1), {4096}, {Algo::tree}, 1 << 20), ConfigError);
  EXPECT_THROW(tune(star(4, 1), {4096}, {Algo::shm}, 1 << 20), ConfigError);
  EXPECT_THROW(tune(star(4, 1), {}, kAll, 1 << 20), ConfigError);
  EXPECT_THROW(tune(star(4, 1), {4096}, kAll, 1 << 20, -0.1), ConfigError);
  // hier cannot run on 4 x 1; the fixed table's choice is always simulated.
  EXPECT_EQ(tune(star(4, 1), {4096}, {Algo::hierarchical}, 1 << 20).candidates,
            std::vector<Algo>{Algo::halving_doubling});
}

// The margin keeps the fixed table's choice unless another is predicted that much faster: with
// a huge one every size keeps it (hier on 2 x 2), with none the fastest wins.
TEST(SimTune, AMarginKeepsTheFixedChoiceUnlessAnotherIsClearlyFaster) {
  const std::vector<size_t> sizes = {4096, 16 << 20};
  const auto keep = tune(star(2, 2), sizes, kAll, 1 << 20, 100.0);
  for (const auto& row : keep.rows) {
    EXPECT_EQ(row.fixed, Algo::hierarchical);
    EXPECT_EQ(row.best, Algo::hierarchical) << row.bytes;
  }
  ASSERT_EQ(keep.table.rules().size(), 1u);
  const auto none = tune(star(2, 2), sizes, kAll, 1 << 20, 0.0);
  for (const auto& row : none.rows) EXPECT_EQ(row.best, row.fastest) << row.bytes;
  EXPECT_EQ(none.rows[0].best, Algo::halving_doubling);  // 500 us links: 2 steps beat hier's 4 hops
}

// A calibrated per-call floor (PlatformSpec::call_overhead_s) moves the choice: with halving-
// doubling's calls 20 ms dearer than the ring's, a 4 KiB buffer on 4 x 1 goes to the ring, where
// the fixed table (and the same platform without the floor) takes halving-doubling.
TEST(SimTune, AHostTimePerCallMovesTheChoice) {
  PlatformSpec p = star(4, 1);
  const auto plain = tune(p, {4096}, kAll, 1 << 20, 0.15);
  ASSERT_EQ(plain.rows.size(), 1u);
  EXPECT_EQ(plain.rows[0].best, Algo::halving_doubling);
  p.call_overhead_s["allreduce/hd"] = 20e-3;
  try {  // the ring has no host time: it would compete for free
    tune(p, {4096}, kAll, 1 << 20, 0.15);
    ADD_FAILURE() << "a candidate without a host time per call was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("allreduce/ring"), std::string::npos) << e.what();
  }
  p.call_overhead_s["allreduce/ring"] = 0;
  const auto floored = tune(p, {4096}, kAll, 1 << 20, 0.15);
  EXPECT_EQ(floored.rows[0].fixed, Algo::halving_doubling);
  EXPECT_EQ(floored.rows[0].best, Algo::ring);
  EXPECT_NEAR(floored.rows[0].time_s[1] - plain.rows[0].time_s[1], 20e-3, 1e-6);  // hd: exactly the floor more
  EXPECT_DOUBLE_EQ(floored.rows[0].time_s[0], plain.rows[0].time_s[0]);        // ring: unchanged
}
