// Timed checkpoints are agreed steps: rank 0's measured rate decides, every rank follows.
#include <gtest/gtest.h>

#include <thread>

#include "lowcomm/train/checkpoint_schedule.h"

using namespace lowcomm;
using namespace lowcomm::train;

namespace {

// The steps at which each of `n` rank threads finds a checkpoint due; rank r's clock runs
// (r + 1) times slower than rank 0's (0.01 s per step on rank 0).
std::vector<std::vector<int64_t>> dueSteps(int n, int64_t every_steps, double every_minutes, int64_t first,
                                           int64_t total) {
  auto store = std::make_shared<net::MemoryStore>();
  std::vector<std::vector<int64_t>> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      net::TransportOptions t;
      t.address = "127.0.0.1";
      comm::CommOptions co;
      co.timeout = std::chrono::seconds(30);
      auto world = comm::Communicator::create(store, r, n, co, t);
      CheckpointSchedule s(every_steps, every_minutes, first, total);
      for (int64_t step = first + 1; step <= total; ++step)
        if (s.due(*world, step, 0.01 * static_cast<double>(step - first) * (r + 1))) out[r].push_back(step);
    });
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace

TEST(CheckpointSchedule, TimedCheckpointsFollowRankZerosRate) {
  // 0.001 minutes = 0.06 s = 6 steps at rank 0's 100 steps/s; first measured after 20 steps.
  const auto due = dueSteps(2, 0, 0.001, 0, 45);
  EXPECT_EQ(due[0], (std::vector<int64_t>{26, 32, 38, 44}));
  EXPECT_EQ(due[1], due[0]);
}

TEST(CheckpointSchedule, StepsAndMinutesTogetherAndNeverTheFinalStep) {
  // From a resumed step 100: probe at 120, timed checkpoints every 6 steps after it; every 10 steps too.
  const auto due = dueSteps(2, 10, 0.001, 100, 140);
  EXPECT_EQ(due[0], (std::vector<int64_t>{110, 120, 126, 130, 132, 138}));  // 140 is the end: written anyway
  EXPECT_EQ(due[1], due[0]);
}

TEST(CheckpointSchedule, OffMeansOnlyEverySteps) {
  const auto due = dueSteps(1, 7, 0, 0, 30);
  EXPECT_EQ(due[0], (std::vector<int64_t>{7, 14, 21, 28}));
}
