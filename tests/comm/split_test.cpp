// split(): sub-communicators by color, ordered by key; nested splits; independence.
#include <gtest/gtest.h>

#include "comm/harness.h"

using namespace lowcomm;
using namespace lowcomm::comm;

TEST(Split, ColorsFormGroupsOrderedByKey) {
  for (int n : {1, 2, 5, 7}) {
    auto comms = test::makeComms(n);
    std::vector<std::shared_ptr<Communicator>> subs(n);
    std::vector<int> sums(n);
    test::onRanks(n, [&](int r) {
      // Reverse order inside each color via the key; rank 3 opts out.
      subs[r] = comms[r]->split(r == 3 ? -1 : r % 2, -r);
      if (!subs[r]) return;
      int x = r;
      subs[r]->allreduce(&x, 1, DType::i32, ReduceOp::sum);
      sums[r] = x;
    });
    for (int r = 0; r < n; ++r) {
      if (r == 3) {
        EXPECT_EQ(subs[r], nullptr);
        continue;
      }
      int want = 0, size = 0, rank_in = 0;
      for (int q = 0; q < n; ++q)
        if (q != 3 && q % 2 == r % 2) {
          want += q;
          ++size;
          if (q > r) ++rank_in;  // key -q: larger global ranks come first
        }
      ASSERT_NE(subs[r], nullptr);
      EXPECT_EQ(subs[r]->size(), size) << "n " << n << " rank " << r;
      EXPECT_EQ(subs[r]->rank(), rank_in) << "n " << n << " rank " << r;
      EXPECT_EQ(sums[r], want) << "n " << n << " rank " << r;
    }
  }
}

TEST(Split, NestedSplitAndParentStillWorks) {
  const int n = 6;
  auto comms = test::makeComms(n);
  std::vector<int> inner(n), outer(n);
  test::onRanks(n, [&](int r) {
    auto half = comms[r]->split(r / 3, r);        // {0,1,2} {3,4,5}
    auto pair = half->split(half->rank() / 2, 0);  // {0,1} {2} in each half
    int x = r;
    pair->allreduce(&x, 1, DType::i32, ReduceOp::sum);
    inner[r] = x;
    int y = 1;
    comms[r]->allreduce(&y, 1, DType::i32, ReduceOp::sum);
    outer[r] = y;
    EXPECT_EQ(&pair->meter(), &comms[r]->meter()) << "children share the parent's traffic meter";
  });
  const int want[] = {1, 1, 2, 7, 7, 5};
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(inner[r], want[r]) << "rank " << r;
    EXPECT_EQ(outer[r], n);
  }
}
