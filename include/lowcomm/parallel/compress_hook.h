// Runs a compress::Compressor as the data-parallel strategy's bucket hook: each GradBucket is
// handed over as a BucketView (one Segment per parameter), and the compressor's state is stored
// in checkpoints as numbered uint8 tensors plus a tensor of their names.
#pragma once

#include <memory>

#include "lowcomm/compress/compressor.h"
#include "lowcomm/parallel/bucket.h"

namespace lowcomm::parallel {

class CompressHook : public BucketHook {
 public:
  explicit CompressHook(std::shared_ptr<compress::Compressor> c);
  std::string name() const override { return c_->name(); }
  void run(comm::Communicator& comm, GradBucket& bucket) override;
  void saveState(torch::serialize::OutputArchive& ar) const override;
  void loadState(torch::serialize::InputArchive& ar) override;
  double compressionRatio() const override { return c_->stats().ratio(); }
  compress::Compressor& compressor() { return *c_; }

 private:
  std::shared_ptr<compress::Compressor> c_;
};

}  // namespace lowcomm::parallel
