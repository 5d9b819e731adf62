// Streaming DiLoCo's plan: fragments are contiguous runs of about equal size covering every
// parameter once, carriers share each fragment evenly inside a group, and the staggered schedule
// syncs each fragment once per period, fragment 0 at the multiples of the period.
#include <gtest/gtest.h>

#include <numeric>

#include "lowcomm/base/error.h"
#include "parallel/diloco_plan.h"

using namespace lowcomm;
using namespace lowcomm::parallel;

TEST(DilocoPlan, FragmentsAreContiguousBalancedAndCoverEveryParameter) {
  // A gpt-like list: embedding, 4 blocks of (big, small, big, small), head.
  std::vector<int64_t> n = {32768};
  for (int b = 0; b < 4; ++b) n.insert(n.end(), {49152, 128, 65536, 128});
  n.push_back(32768);
  const int64_t total = std::accumulate(n.begin(), n.end(), int64_t{0});
  for (int P : {1, 2, 3, 4, 18}) {
    const auto plan = planFragments(n, P, 1);
    ASSERT_EQ(plan.fragments.size(), static_cast<size_t>(P));
    int next = 0;
    for (const auto& fr : plan.fragments) {
      ASSERT_FALSE(fr.empty()) << "P=" << P;
      for (int p : fr) EXPECT_EQ(p, next++) << "P=" << P;
      int64_t size = 0;
      for (int p : fr) size += n[p];
      if (P <= 4) {
        EXPECT_LE(size, total / P + 65536) << "P=" << P;  // within one tensor of an equal share
      }
    }
    EXPECT_EQ(next, static_cast<int>(n.size()));
  }
}

TEST(DilocoPlan, CarriersShareEachFragmentInsideTheGroup) {
  const std::vector<int64_t> n = {100, 100, 100, 100, 50, 50};
  const auto plan = planFragments(n, 1, 2);
  std::vector<int64_t> load(2, 0);
  for (size_t p = 0; p < n.size(); ++p) {
    ASSERT_GE(plan.carrier[p], 0);
    ASSERT_LT(plan.carrier[p], 2);
    load[plan.carrier[p]] += n[p];
  }
  EXPECT_EQ(load[0], 250);
  EXPECT_EQ(load[1], 250);
  // A group larger than a fragment's tensors leaves members without a share, never a tensor unsent.
  const auto wide = planFragments({10, 20}, 1, 4);
  EXPECT_NE(wide.carrier[0], wide.carrier[1]);
}

TEST(DilocoPlan, TooManyFragmentsNamesTheKey) {
  try {
    planFragments({1, 2, 3}, 4, 1);
    FAIL() << "4 fragments of 3 tensors were accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("diloco.fragments"), std::string::npos) << e.what();
  }
}

TEST(DilocoPlan, TheScheduleStaggersTheFragments) {
  // One fragment: every period, as DiLoCo.
  for (int64_t s = 1; s <= 40; ++s) EXPECT_EQ(fragmentDue(s, 0, 1, 8), s % 8 == 0) << s;
  // Four fragments over period 8: offsets 0, 2, 4, 6, one fragment every 2 steps.
  EXPECT_EQ(fragmentOffset(3, 4, 8), 6);
  for (int64_t s = 1; s <= 40; ++s) {
    int due = 0;
    for (int f = 0; f < 4; ++f) due += fragmentDue(s, f, 4, 8);
    EXPECT_EQ(due, s % 2 == 0 ? 1 : 0) << s;
  }
  EXPECT_TRUE(fragmentDue(2, 1, 4, 8));
  EXPECT_TRUE(fragmentDue(10, 1, 4, 8));
  EXPECT_FALSE(fragmentDue(0, 0, 4, 8));
  // Three fragments over period 7: offsets 0, 2, 4; each once per period.
  for (int f = 0; f < 3; ++f) {
    int due = 0;
    for (int64_t s = 1; s <= 70; ++s) due += fragmentDue(s, f, 3, 7);
    EXPECT_EQ(due, 10) << f;
  }
}
