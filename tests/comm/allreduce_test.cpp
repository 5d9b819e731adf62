// Allreduce: every algorithm x dtype x op x count against an exact reference, world sizes 1..7.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "comm/harness.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/algorithms.h"
#include "comm/typed_data.h"

using namespace lowcomm;
using namespace lowcomm::comm;
using lowcomm::test::CommPtr;

namespace {

double expected(int n, size_t i, DType dt, ReduceOp op) { return test::expectedReduce(n, i, dt, op); }

void checkAllreduce(std::vector<CommPtr>& comms, Algo algo, DType dt, ReduceOp op, size_t count) {
  const int n = static_cast<int>(comms.size());
  std::vector<std::vector<char>> bufs(n);
  test::onRanks(n, [&](int r) {
    bufs[r] = test::filled(r, count, dt);
    comms[r]->allreduce(bufs[r].data(), count, dt, op, algo);
  });
  for (int r = 0; r < n; ++r) {
    size_t wrong = 0, first = 0;
    for (size_t i = 0; i < count; ++i)
      if (test::load(dt, bufs[r].data(), i) != expected(n, i, dt, op) && wrong++ == 0) first = i;
    ASSERT_EQ(wrong, 0u) << "rank " << r << " algo " << algoName(algo) << " dtype " << dtypeName(dt) << " op "
                         << reduceOpName(op) << " count " << count << " first wrong index " << first << ": got "
                         << test::load(dt, bufs[r].data(), first) << " want " << expected(n, first, dt, op);
  }
}

class AllreduceWorld : public ::testing::TestWithParam<int> {};

TEST_P(AllreduceWorld, EveryAlgoTypeOpAndCount) {
  const int n = GetParam();
  CommOptions opts;
  opts.segment_bytes = 4096;  // small segments exercise the pipelining on modest counts
  opts.group_size = n >= 4 ? 3 : 2;  // hierarchical, rails: uneven groups when n is not a multiple
  opts.shm_piece_bytes = 4096;       // shared memory: many pieces, both buffers of each
  auto comms = test::makeComms(n, opts);
  for (Algo algo : {Algo::ring, Algo::halving_doubling, Algo::hierarchical, Algo::rails, Algo::sites, Algo::ordered,
                    Algo::shm, Algo::automatic})
    for (DType dt : test::kAllTypes)
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min})
        for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{4099}})
          checkAllreduce(comms, algo, dt, op, count);
}

TEST_P(AllreduceWorld, SeveralMiBEveryAlgo) {
  const int n = GetParam();
  CommOptions opts;
  opts.group_size = 2;
  auto comms = test::makeComms(n, opts);
  const size_t count = (3u << 20) / 4 + 3;  // 3 MiB of f32, odd count
  for (Algo algo : {Algo::ring, Algo::halving_doubling, Algo::hierarchical, Algo::rails, Algo::sites, Algo::ordered,
                    Algo::shm})
    checkAllreduce(comms, algo, DType::f32, ReduceOp::sum, count);
  checkAllreduce(comms, Algo::ring, DType::bf16, ReduceOp::avg, count);
}

INSTANTIATE_TEST_SUITE_P(Worlds, AllreduceWorld, ::testing::Range(1, 8));

// Random floats: the deterministic mode's result equals a rank-ordered sequential sum bit for
// bit, on every rank, and again on a second run, over TCP (ordered) and shared memory.
class AllreduceDeterministic : public ::testing::TestWithParam<ShmMode> {};

TEST_P(AllreduceDeterministic, RankOrderedSumBitExact) {
  const int n = 5;
  CommOptions opts;
  opts.deterministic = true;
  opts.shm = GetParam();
  opts.shm_piece_bytes = 64 << 10;
  auto comms = test::makeComms(n, opts);
  EXPECT_EQ(comms[0]->chooseAllreduce(1 << 20), GetParam() == ShmMode::off ? Algo::ordered : Algo::shm);
  const size_t count = 100003;
  std::vector<std::vector<float>> in(n, std::vector<float>(count));
  std::mt19937 gen(7);
  std::normal_distribution<float> d(0.f, 1e3f);
  for (auto& v : in)
    for (auto& x : v) x = d(gen);
  std::vector<float> want(count);
  for (size_t i = 0; i < count; ++i) {
    float acc = in[0][i];
    for (int r = 1; r < n; ++r) acc += in[r][i];
    want[i] = acc;
  }
  for (int run = 0; run < 2; ++run) {
    auto bufs = in;
    test::onRanks(n, [&](int r) { comms[r]->allreduce(bufs[r].data(), count, DType::f32, ReduceOp::sum); });
    for (int r = 0; r < n; ++r) ASSERT_EQ(0, std::memcmp(bufs[r].data(), want.data(), count * 4)) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, AllreduceDeterministic, ::testing::Values(ShmMode::off, ShmMode::on));

// Non-deterministic algorithms still give every rank the same bits.
TEST(AllreduceConsistency, AllRanksGetIdenticalBits) {
  const int n = 6;
  auto comms = test::makeComms(n);
  const size_t count = 65537;
  for (Algo algo : {Algo::ring, Algo::halving_doubling}) {
    std::vector<std::vector<float>> bufs(n, std::vector<float>(count));
    std::mt19937 gen(11);
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    for (auto& v : bufs)
      for (auto& x : v) x = d(gen);
    test::onRanks(n, [&](int r) { comms[r]->allreduce(bufs[r].data(), count, DType::f32, ReduceOp::sum, algo); });
    for (int r = 1; r < n; ++r) ASSERT_EQ(0, std::memcmp(bufs[r].data(), bufs[0].data(), count * 4)) << algoName(algo);
  }
}

TEST(AllreduceSelector, ForcedAndDeterministicChoices) {
  CommOptions off;
  off.shm = ShmMode::off;
  auto comms = test::makeComms(1, off);
  auto& c = *comms[0];
  EXPECT_EQ(c.chooseAllreduce(1 << 20, Algo::halving_doubling), Algo::halving_doubling);
  CommOptions o;
  o.deterministic = true;
  o.shm = ShmMode::off;
  c.setOptions(o);
  EXPECT_EQ(c.chooseAllreduce(1 << 20, Algo::ring), Algo::ordered);
  o = CommOptions{};
  o.shm = ShmMode::off;
  c.setOptions(o);
  EXPECT_THROW(c.chooseAllreduce(64, Algo::tree), ConfigError);
  // The automatic choice: latency-bound sizes go to halving-doubling, large ones to the ring,
  // and a configured node size to the hierarchical algorithm.
  EXPECT_EQ(c.chooseAllreduce(4), Algo::halving_doubling);
  EXPECT_EQ(c.chooseAllreduce(64 << 20), Algo::ring);
}

TEST(AllreduceSelector, SharedMemoryWhenAllRanksAreLocal) {
  auto comms = test::makeComms(3);
  EXPECT_TRUE(comms[0]->allLocal());
  EXPECT_EQ(comms[0]->chooseAllreduce(4), Algo::shm);
  EXPECT_EQ(comms[0]->chooseAllreduce(64 << 20), Algo::shm);
  EXPECT_EQ(comms[0]->chooseAllreduce(64 << 20, Algo::ring), Algo::ring);
  CommOptions o;
  o.shm = ShmMode::off;
  comms[0]->setOptions(o);
  EXPECT_THROW(comms[0]->chooseAllreduce(64, Algo::shm), ConfigError);
}

TEST(AllreduceSelector, GroupSizeSelectsHierarchical) {
  CommOptions o;
  o.shm = ShmMode::off;
  o.group_size = 2;
  auto comms = test::makeComms(4, o);
  EXPECT_EQ(comms[0]->chooseAllreduce(64 << 20), Algo::hierarchical);
  o.group_size = 4;  // one group spanning the world: nothing to gain
  comms[0]->setOptions(o);
  EXPECT_EQ(comms[0]->chooseAllreduce(64 << 20), Algo::ring);
}

}  // namespace

namespace {
// 8 and 16 ranks: power-of-two halving-doubling with counts below and around n (a halving
// slice per step, some empty), and the other algorithms at that size.
TEST(AllreduceLargeWorlds, TinyAndOddCountsEveryAlgo) {
  for (int n : {8, 16}) {
    CommOptions opts;
    opts.group_size = 3;
    opts.shm_piece_bytes = 4096;
    auto comms = test::makeComms(n, opts);
    for (Algo algo : {Algo::halving_doubling, Algo::ring, Algo::hierarchical, Algo::rails, Algo::ordered, Algo::shm})
      for (size_t count : {1, 2, 3, 5, 9, 17, 1000})
        checkAllreduce(comms, algo, DType::f32, ReduceOp::sum, count);
  }
  // Rails on equal groups (uneven ones above run the hierarchical algorithm): 2 x 4 and 4 x 4.
  for (int n : {8, 16}) {
    CommOptions opts;
    opts.group_size = 4;
    opts.segment_bytes = 4096;
    auto comms = test::makeComms(n, opts);
    for (size_t count : {1, 2, 3, 5, 9, 17, 1000, 70001})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max})
        checkAllreduce(comms, Algo::rails, DType::f32, op, count);
  }
}
}  // namespace

// The hierarchical allreduce runs each group's part in shared memory when the group's ranks share
// a host: the same (exact) result as the TCP version, and only the group leaders send messages
// (a non-leader records one shared-memory sum per pipelined chunk on the meter; over TCP it sends every
// segment of the in-group reduce-scatter and gather).
TEST(AllreduceHierarchical, GroupsOnOneHostUseSharedMemoryOnlyLeadersSend) {
  const int n = 4;
  const size_t count = (1u << 20) / 4 + 7;
  const size_t opts_segment = 64 << 10;
  std::vector<uint64_t> messages[2];
  for (ShmMode shm : {ShmMode::automatic, ShmMode::off}) {
    CommOptions opts;
    opts.group_size = 2;
    opts.shm = shm;
    opts.shm_piece_bytes = 64 << 10;
    opts.segment_bytes = opts_segment;
    auto comms = test::makeComms(n, opts);
    checkAllreduce(comms, Algo::hierarchical, DType::f32, ReduceOp::sum, count);
    for (int r = 0; r < n; ++r) {
      const auto s = comms[r]->meter().snapshot().by_op["allreduce"];
      messages[shm == ShmMode::off].push_back(s.messages_sent);
      EXPECT_GT(s.bytes_sent, 0u) << "rank " << r;
    }
  }
  const auto& shm = messages[0];
  const auto& tcp = messages[1];
  // Pipelined: one record of the node's sum per chunk (16 chunks of a 64 KiB segment), nothing more.
  const size_t chunks = nodePipelineChunks(count * 4, opts_segment, 2);
  ASSERT_EQ(chunks, 16u);
  for (int r : {1, 3}) {
    EXPECT_EQ(shm[r], chunks) << "non-leader " << r << " sent over TCP";
    EXPECT_GT(tcp[r], 2u) << "non-leader " << r;
  }
  for (int r : {0, 2}) EXPECT_GT(shm[r], 2u) << "leader " << r << ": the ring between the groups";
}
