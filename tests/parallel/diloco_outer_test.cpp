// DiLoCo's background outer exchanges when one fails: the failure surfaces where the trainer
// waits (land, drain, the checkpoint's pendingFlat), never as a result; the exchanges queued
// behind it do not run and report the same failure; a peer that dies mid-exchange is an error
// within the communicator's timeout, not a hang.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>

#include "lowcomm/base/error.h"
#include "parallel/diloco_outer.h"
#include "parallel/diloco_plan.h"
#include "parallel/diloco_scope.h"
#include "train/rank_threads.h"

using namespace lowcomm;
using namespace lowcomm::parallel;

namespace {

// Plain allreduce, or a failure on the calls numbered >= fail_from (counted from 0).
class CountingHook : public BucketHook {
 public:
  explicit CountingHook(int fail_from) : fail_from_(fail_from) {}
  std::string name() const override { return "counting"; }
  void run(comm::Communicator& comm, GradBucket& bucket) override {
    if (calls++ >= fail_from_) throw Error("injected failure in the exchange of fragment " + std::to_string(bucket.index));
    AllreduceHook().run(comm, bucket);
  }
  std::atomic<int> calls{0};

 private:
  int fail_from_;
};

struct Model {
  std::vector<torch::Tensor> params = {torch::full({4}, 1.0f), torch::full({6}, 2.0f)};
  std::vector<torch::Tensor> anchor = {torch::zeros({4}), torch::zeros({6})};
  std::vector<std::string> names = {"a", "b"};
  DilocoPlan plan = planFragments({4, 6}, 2, 1);
};

// Runs fn(rank, exchanges, hook) on 2 ranks (scope "world", two fragments).
std::vector<std::string> onTwoRanks(int fail_from, int timeout_s,
                                    const std::function<void(int, OuterExchanges&, CountingHook&)>& fn) {
  return test::onRankThreads(
      2,
      [&](int rank, std::shared_ptr<comm::Communicator> world) {
        const auto groups = makeDilocoGroups(*world, "world");
        Model m;
        auto hook = std::make_shared<CountingHook>(fail_from);
        OuterExchanges ex(groups, m.plan, m.params, m.names, hook, nullptr);
        fn(rank, ex, *hook);
      },
      timeout_s);
}

void launchBoth(OuterExchanges& ex) {
  Model m;
  ex.launch(0, m.anchor, m.params, {}, true);
  ex.launch(1, m.anchor, m.params, {}, true);
}

std::string messageOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(DilocoOuter, BackgroundExchangesLandTheAverage) {
  const auto errors = onTwoRanks(1000, 30, [](int, OuterExchanges& ex, CountingHook& hook) {
    launchBoth(ex);
    ex.drain();
    EXPECT_EQ(hook.calls.load(), 2);
    const auto landed = ex.land(1);
    ASSERT_EQ(landed.delta.size(), 1u);
    EXPECT_TRUE(torch::equal(landed.delta[0], torch::full({6}, -2.0f)));
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(DilocoOuter, AFailedExchangeIsNeverSavedAndTheQueueBehindItReportsIt) {
  // Every rank's hook fails on its first call: fragment 0 fails, fragment 1 must not run.
  const auto errors = onTwoRanks(0, 30, [](int, OuterExchanges& ex, CountingHook& hook) {
    launchBoth(ex);
    const std::string drained = messageOf([&] { ex.drain(); });
    EXPECT_NE(drained.find("injected failure in the exchange of fragment 0"), std::string::npos)
        << "drain() let a failed exchange through: '" << drained << "'";
    EXPECT_NE(messageOf([&] { ex.pendingFlat(0); }).find("fragment 0"), std::string::npos)
        << "a checkpoint could save fragment 0's failed exchange as a result";
    EXPECT_NE(messageOf([&] { ex.land(0); }).find("injected failure"), std::string::npos);
    const std::string second = messageOf([&] { ex.land(1); });
    EXPECT_NE(second.find("injected failure in the exchange of fragment 0"), std::string::npos)
        << "the exchange queued behind the failure says: '" << second << "'";
    EXPECT_EQ(hook.calls.load(), 1) << "an exchange ran on a communicator that had already failed";
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(DilocoOuter, APeerDeadMidExchangeIsAnErrorWithinTheTimeout) {
  // Rank 1 leaves (its communicator closes) while rank 0's two exchanges are queued.
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = onTwoRanks(1000, 5, [](int rank, OuterExchanges& ex, CountingHook&) {
    if (rank == 1) return;
    launchBoth(ex);
    EXPECT_NE(messageOf([&] { ex.drain(); }), "");
    EXPECT_NE(messageOf([&] { ex.land(0); }), "");
    EXPECT_NE(messageOf([&] { ex.land(1); }), "");
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_LT(s, 20.0) << "a dead peer hung the exchange past its 5 s timeout";
}
