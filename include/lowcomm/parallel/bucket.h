// Gradient buckets and the per-bucket communication hook (like c10d's CommHookInterface over a
// GradBucket): the data-parallel strategy fills buckets, a hook turns each bucket's local
// gradients into the averaged gradient. Compressors are hooks.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "lowcomm/comm/communicator.h"

namespace lowcomm::parallel {

struct GradBucket {
  int index = 0;
  torch::Tensor flat;                 // f32, contiguous: this rank's gradients, then the result
  std::vector<int64_t> offsets;       // element offset of each parameter in `flat`
  std::vector<int> params;            // indices into the strategy's parameter list
  std::vector<std::string> names;     // parameter names, for hooks that treat layers differently
  std::vector<std::vector<int64_t>> shapes;
};

class BucketHook {
 public:
  virtual ~BucketHook() = default;
  virtual std::string name() const = 0;
  // Runs on the communication thread. On return bucket.flat must hold the average over the
  // communicator's ranks (or the hook's approximation of it, e.g. decompressed).
  virtual void run(comm::Communicator& comm, GradBucket& bucket) = 0;
  // Hook state (error-feedback residuals, RNG, ...) for checkpoints; empty by default.
  virtual void saveState(torch::serialize::OutputArchive& ar) const {}
  virtual void loadState(torch::serialize::InputArchive& ar) {}
  // Raw gradient bytes per payload byte this hook sends (1 when it sends gradients as they are).
  virtual double compressionRatio() const { return 1.0; }
};

// Plain allreduce-average of the f32 bucket (the uncompressed baseline).
class AllreduceHook : public BucketHook {
 public:
  std::string name() const override { return "allreduce"; }
  void run(comm::Communicator& comm, GradBucket& bucket) override;
};

}  // namespace lowcomm::parallel
