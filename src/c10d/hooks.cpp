#include "lowcomm/c10d/hooks.h"

#include "lowcomm/base/error.h"

namespace lowcomm::torchdist {

HookCompressor::HookCompressor(const compress::CompressConfig& cfg) : cfg_(cfg), c_(compress::makeCompressor(cfg)) {}

std::string HookCompressor::name() const {
  std::lock_guard<std::mutex> lock(*mu_);
  return c_->name();
}

c10::intrusive_ptr<c10d::Work> HookCompressor::reduce(ProcessGroupLowcomm& pg, const at::Tensor& bucket, int index,
                                                      std::vector<compress::Segment> segments) {
  if (bucket.scalar_type() != at::kFloat || !bucket.is_contiguous() || !bucket.device().is_cpu())
    throw ConfigError("lowcomm.hooks: bucket " + std::to_string(index) + " is " +
                      std::string(c10::toString(bucket.scalar_type())) +
                      "; the compressors take contiguous float32 CPU gradients");
  size_t covered = 0;
  for (const auto& s : segments) {
    if (s.offset != covered) throw ConfigError("lowcomm.hooks: bucket segments must cover it in order");
    covered += s.numel;
  }
  if (covered != static_cast<size_t>(bucket.numel()))
    throw ConfigError("lowcomm.hooks: bucket " + std::to_string(index) + " has " + std::to_string(bucket.numel()) +
                      " values, its parameters " + std::to_string(covered));
  return pg.submit(c10d::OpType::ALLREDUCE, {bucket},
                   [mu = mu_, c = c_, bucket, index, segments = std::move(segments)](comm::Communicator& comm) {
                     compress::BucketView view{index, bucket.data_ptr<float>(), static_cast<size_t>(bucket.numel()),
                                               segments};
                     std::lock_guard<std::mutex> lock(*mu);
                     c->reduce(comm, view);
                   });
}

compress::StateMap HookCompressor::save() const {
  std::lock_guard<std::mutex> lock(*mu_);
  compress::StateMap s;
  c_->save(s);
  return s;
}

void HookCompressor::load(const compress::StateMap& s) {
  std::lock_guard<std::mutex> lock(*mu_);
  c_->load(s);
}

compress::CompressStats HookCompressor::stats() const {
  std::lock_guard<std::mutex> lock(*mu_);
  return c_->stats();
}

std::vector<std::string> HookCompressor::decisions() const {
  std::lock_guard<std::mutex> lock(*mu_);
  return c_->decisions();
}

}  // namespace lowcomm::torchdist
