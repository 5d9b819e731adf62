// Data-parallel training with gradient bucketing and overlap (DDP).
//
// Contract:
// - Construction is collective over `world`: parameters (and buffers) are broadcast from rank 0
//   (unless DdpOptions::broadcast_initial is false), after checking that every rank has the same
//   parameter names and shapes (ConfigError naming
//   the first differing parameter otherwise).
// - Trainable parameters are packed, in reverse registration order (the order backward
//   produces their gradients), into f32 buckets of at most `bucket_bytes`. A post-accumulation
//   autograd hook marks a parameter ready; a bucket whose parameters are all ready is handed,
//   in bucket order, to the communication thread, which runs the BucketHook on it while
//   backward continues. finish() waits for every bucket (launching those with unused
//   parameters, whose gradients count as zero) and writes the averaged gradients into .grad.
// - Gradient accumulation: with setSync(false) backward only accumulates into .grad; the
//   backward after setSync(true) syncs the accumulated sum. The global batch is
//   world × micro-batch × accumulation steps; the trainer scales the loss by 1/steps.
// - The strategy communicates on its own communicator (split from `world`), so the caller
//   may use `world` between steps.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "lowcomm/base/trace.h"
#include "lowcomm/comm/communicator.h"
#include "lowcomm/parallel/bucket.h"

namespace lowcomm::parallel {

struct DdpOptions {
  size_t bucket_bytes = 25u << 20;
  bool overlap = true;          // false: all buckets are launched in finish() (for comparison)
  std::string phase = "grad";   // traffic-meter label of gradient communication
  // false: only check that the ranks' parameter names and shapes agree, without broadcasting
  // rank 0's values (for a strategy that rebuilds DDP over parameters it knows to be identical).
  bool broadcast_initial = true;
  // false: communicate on `world` itself instead of a split of it (the caller then must not use
  // `world` while this object lives; saves a rendezvous when DDP is rebuilt often).
  bool split_comm = true;
  // With split_comm = false: label only this object's own collectives with `phase`, so the
  // caller's use of `world` between steps keeps its label (the trainer under --elastic, which
  // rebuilds DDP at every membership epoch and so saves a rendezvous across the WAN each time).
  bool label_own_calls = false;
  // Trainable parameters whose names end with one of these stay local: their gradients are
  // neither bucketed nor averaged (AB-training's `individual` setup trains its factor alone).
  std::vector<std::string> local_suffixes;
  // For a strategy that reduces buckets into its own buffers (ZeRO's reduce-scatter):
  // false: finish() leaves .grad as backward wrote it (the hook's result stays in the bucket).
  bool grads_to_params = true;
  // true: on a synchronised backward each parameter's .grad is released once copied into its
  // bucket, and a bucket's buffer exists only from its first gradient until its hook returned
  // (gradient memory: the buckets in flight instead of every gradient twice).
  bool release_grads = false;
  // Bucket buffers are zero-padded to a multiple of this many elements (reduce-scatter blocks).
  int64_t pad_to = 1;
};

struct DdpStats {
  double comm_s = 0;   // time the communication thread spent in bucket hooks
  double wait_s = 0;   // time finish() blocked the training thread
  int64_t buckets = 0;
};

class CommThread;

class DataParallel {
 public:
  DataParallel(std::shared_ptr<comm::Communicator> world, std::shared_ptr<torch::nn::Module> model,
               DdpOptions opts = {}, std::shared_ptr<BucketHook> hook = nullptr, Trace* trace = nullptr);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  void setSync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }
  // After backward on a sync step: waits for all buckets, leaves averaged gradients in .grad.
  void finish();
  // Averages floating-point buffers (e.g. BatchNorm running statistics) over the ranks.
  void averageBuffers();

  const std::vector<GradBucket>& buckets() const { return buckets_; }
  // Elements of bucket b's buffer (its gradients, then zero padding up to a multiple of pad_to).
  int64_t bucketElems(size_t b) const { return bucket_elems_[b]; }
  // The synchronised parameters, indexed as GradBucket::params.
  std::vector<torch::Tensor> parameters() const;
  // Bytes of the bucket buffers allocated now.
  int64_t bufferBytes() const;
  // The communication thread adds to the stats while the training thread reads them: both lock.
  DdpStats stats() const {
    std::lock_guard<std::mutex> lock(stats_mu_);
    return stats_;
  }
  void resetStats() {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_ = DdpStats{};
  }
  BucketHook& hook() { return *hook_; }
  comm::Communicator& comm() { return *comm_; }

 private:
  struct Param;
  void buildBuckets();
  void installHooks();
  void onGradReady(int param);
  void launchReady(bool force);
  void resetStep();

  std::shared_ptr<comm::Communicator> comm_;
  std::shared_ptr<torch::nn::Module> model_;
  DdpOptions opts_;
  std::shared_ptr<BucketHook> hook_;
  Trace* trace_;
  std::vector<Param> params_;
  std::vector<GradBucket> buckets_;
  std::vector<int64_t> bucket_elems_;
  std::vector<int> pending_;       // per bucket: parameters not ready yet this step
  std::vector<int> bucket_of_;     // per parameter
  std::vector<bool> ready_;        // per parameter
  int next_launch_ = 0;            // buckets launch strictly in order on every rank
  bool sync_ = true;
  bool step_active_ = false;
  std::unique_ptr<CommThread> thread_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keep hooks alive
  std::vector<uintptr_t> hook_keys_;  // this object's hooks on them, removed by the destructor
  mutable std::mutex stats_mu_;
  DdpStats stats_;
};

// Checks that every rank of `comm` holds parameters with the same names and shapes, then makes
// every rank's parameters and buffers rank 0's: when a 64-bit hash of all their bytes is rank 0's
// on every rank (same seed, same build) nothing more is sent, else rank 0 broadcasts them.
// ConfigError names the first difference in names or shapes.
void broadcastModel(comm::Communicator& comm, torch::nn::Module& model);
// Only the check: ConfigError unless every rank has the same parameter names and shapes.
void checkModel(comm::Communicator& comm, torch::nn::Module& model);
// Reduces (sum or avg) float32 tensors over `comm` in place, in one allreduce of their
// concatenation; the same list (shapes, order) on every rank.
void reduceTensors(comm::Communicator& comm, const std::vector<torch::Tensor>& ts, comm::ReduceOp op);

}  // namespace lowcomm::parallel
