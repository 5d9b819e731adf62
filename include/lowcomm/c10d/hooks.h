// The compressor behind a lowcomm DDP comm hook (lowcomm.hooks): one codec + error-feedback
// memory, PowerSGD or `auto` (lowcomm/compress/compressor.h), shared between Python (state_dict,
// stats) and the process group's worker thread (the bucket reduce). A mutex serialises the two.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "lowcomm/compress/compressor.h"
#include "lowcomm/c10d/process_group.h"

namespace lowcomm::torchdist {

class HookCompressor {
 public:
  explicit HookCompressor(const compress::CompressConfig& cfg);
  const compress::CompressConfig& config() const { return cfg_; }
  std::string name() const;
  // Queues the reduce of one DDP bucket (f32, contiguous; `segments` cover it in order) on the
  // group's worker thread; the Work's future yields the bucket holding the average over ranks.
  // Checked first (ConfigError naming the bucket and segment): index >= 0, every segment within
  // the bucket, its shape non-negative dimensions whose product is its size.
  c10::intrusive_ptr<c10d::Work> reduce(ProcessGroupLowcomm& pg, const at::Tensor& bucket, int index,
                                        std::vector<compress::Segment> segments);
  compress::StateMap save() const;
  void load(const compress::StateMap& s);
  compress::CompressStats stats() const;
  std::vector<std::string> decisions() const;

 private:
  compress::CompressConfig cfg_;
  std::shared_ptr<std::mutex> mu_ = std::make_shared<std::mutex>();  // queued reduces keep both alive
  std::shared_ptr<compress::Compressor> c_;
};

}  // namespace lowcomm::torchdist
