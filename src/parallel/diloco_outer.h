// DiLoCo's outer exchanges (private to the parallel layer): for each fragment, the pseudo-gradient
// Δ = anchor − local of the parameters this member carries goes through the outer hook over the
// cross communicator (one bucket per fragment, bucket index = fragment, so a codec keeps its
// error feedback per fragment), the group then shares what each member brought back, and with
// fragment 0 the float buffers are averaged over every rank. An exchange runs inline (timeline
// lane 1) or on a communication thread of its own (lane 3), whose result the strategy waits for
// when it merges ("outer-wait", lane 0). On the timeline an "outer-sync" span carries its
// "fragment" and "queued_us" (launch to start), an "outer-wait" its "fragment" and "background"
// (1: it waited for a lane-3 exchange): what the simulator's replay needs to rerun the overlap. Fragments' exchanges run in launch order, the same on
// every rank; after one fails the later ones do not run and their land() rethrows its failure.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <vector>

#include "comm_thread.h"
#include "diloco_plan.h"
#include "diloco_scope.h"
#include "lowcomm/base/trace.h"
#include "lowcomm/parallel/bucket.h"

namespace lowcomm::parallel {

class OuterExchanges {
 public:
  // `params`: the model's parameters (the plan's indices); `names` theirs.
  OuterExchanges(const DilocoGroups& groups, const DilocoPlan& plan, const std::vector<torch::Tensor>& params,
                 const std::vector<std::string>& names, std::shared_ptr<BucketHook> hook, Trace* trace);
  ~OuterExchanges();

  // Starts fragment f's exchange of Δ = anchor − params (and of `buffers` for fragment 0, copied
  // now). Background: on the communication thread, while the caller trains on; else before
  // returning. f must not be in flight.
  void launch(int f, const std::vector<torch::Tensor>& anchor, const std::vector<torch::Tensor>& params,
              const std::vector<torch::Tensor>& buffers, bool background);
  bool inFlight(int f) const { return frags_[f].pending; }
  // Blocks until f's exchange has landed (rethrows its failure) and hands over the average of Δ
  // over every group, one view per fragment parameter (the plan's order), and fragment 0's
  // averaged buffers. f is no longer in flight afterwards.
  struct Landed {
    std::vector<torch::Tensor> delta;
    std::vector<torch::Tensor> buffers;
  };
  Landed land(int f);
  // Blocks until every exchange in flight has landed, keeping their results for land(), and
  // rethrows the first failure. The hook's state and ratio are then stable (checkpoints).
  void drain();
  // Fragment f's landed (drained) result as one flat tensor (Δ then buffers), and the reverse
  // for a resume: a fragment restored this way is in flight and lands at once.
  torch::Tensor pendingFlat(int f);
  void restorePending(int f, const torch::Tensor& flat, const std::vector<torch::Tensor>& buffer_shapes);

  BucketHook& hook() { return *hook_; }
  double commSeconds() const;  // inside exchanges, inline or not
  double waitSeconds() const;  // the caller blocked: inline exchanges and land()
  double ratio() const;        // the hook's compression ratio after the last exchange
  // The most bytes this rank sent in one exchange (phase "outer": the hook's payloads, the
  // group's share of the result, fragment 0's buffers).
  int64_t peakSyncBytes() const;

 private:
  struct Fragment {
    GradBucket carried;               // this member's parameters of the fragment (bucket index f)
    std::vector<int> carried_at;      // per carried parameter: its position in the fragment
    std::vector<int64_t> offsets;     // in `full`, per fragment parameter, then the end
    std::vector<std::vector<int64_t>> shapes;
    torch::Tensor full;               // the fragment's averaged Δ
    std::vector<torch::Tensor> buffers;
    std::shared_future<void> done;
    bool pending = false;             // launched, not landed yet
    bool background = false;          // the exchange in flight runs on lane 3 (timeline: its land waits for it)
    std::chrono::steady_clock::time_point launched_at;
  };
  void exchange(Fragment& fr, int lane);
  void addSeconds(double& what, double s);
  std::exception_ptr failure() const;  // the first exchange's failure, if any

  DilocoGroups groups_;
  std::shared_ptr<BucketHook> hook_;
  Trace* trace_;
  std::vector<Fragment> frags_;
  mutable std::mutex stats_mu_;
  double comm_s_ = 0, wait_s_ = 0, ratio_ = 1.0;
  int64_t peak_sync_bytes_ = 0;
  std::exception_ptr failed_;
  std::unique_ptr<CommThread> thread_;  // last: joined before the fragments go
};

// What the trainer sees of the outer hook: its name, its ratio and its state, read only after
// every exchange in flight has landed (the exchanges run the real hook on another thread).
class DrainedHook : public BucketHook {
 public:
  explicit DrainedHook(OuterExchanges& ex) : ex_(ex) {}
  std::string name() const override { return ex_.hook().name(); }
  void run(comm::Communicator& comm, GradBucket& bucket) override { ex_.hook().run(comm, bucket); }
  void saveState(torch::serialize::OutputArchive& ar) const override {
    ex_.drain();
    ex_.hook().saveState(ar);
  }
  void loadState(torch::serialize::InputArchive& ar) override {
    ex_.drain();
    ex_.hook().loadState(ar);
  }
  double compressionRatio() const override { return ex_.ratio(); }

 private:
  OuterExchanges& ex_;
};

}  // namespace lowcomm::parallel
