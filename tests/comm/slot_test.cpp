// The message slot layout (lowcomm/comm/exchange.h): every (sub, step, segment) of a call has its
// own slot up to a 4096-rank ring's steps and 16384 segments; a call's sequence number stays in
// the upper half; a chunk longer than 16384 default segments gets longer segments.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>

#include "lowcomm/comm/algorithms.h"
#include "lowcomm/comm/exchange.h"

using namespace lowcomm::comm;

TEST(Slot, EveryStepAndSegmentOfARingOf4096RanksIsDistinct) {
  EXPECT_EQ(kMaxRanks, 4096);
  std::set<uint64_t> seen;
  const uint32_t seq = 0xabcdef01;
  for (uint32_t sub : {0u, 1u, 63u})
    for (uint32_t step : {0u, 1u, 1023u, 1024u, 4094u, kMaxSteps - 1})
      for (uint32_t seg : {0u, 1u, 255u, 256u, kMaxSegments - 1}) {
        const uint64_t s = makeSlot(seq, sub, step, seg);
        EXPECT_TRUE(seen.insert(s).second) << sub << " " << step << " " << seg;
        EXPECT_EQ(static_cast<uint32_t>(s >> 32), seq);
        EXPECT_EQ((s >> 26) & 0x3f, sub);  // where the simulator reads the namespace
      }
}

TEST(Slot, LongChunksGetLongerSegmentsNotMoreThanTheLayoutHolds) {
  const size_t es = 4, seg_bytes = 1 << 20;
  EXPECT_EQ(segmentElems(seg_bytes, es, 1000), seg_bytes / es);  // short chunks: the asked segment
  const size_t huge = static_cast<size_t>(kMaxSegments) * (seg_bytes / es) * 3;  // 48 GiB of floats
  const size_t seg = segmentElems(seg_bytes, es, huge);
  EXPECT_GT(seg, seg_bytes / es);
  EXPECT_LT((huge + seg - 1) / seg, static_cast<size_t>(kMaxSegments));
}
