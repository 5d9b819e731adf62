#include "lowcomm/c10d/hooks.h"

#include "lowcomm/base/error.h"

namespace lowcomm::torchdist {

namespace {

// A segment from Python: at most `room` values (what is left of the bucket after its offset), and
// a shape of non-negative dimensions whose product is its size (the compressors shape matrices
// from it). Checked without overflow.
void checkSegment(const compress::Segment& s, int index, size_t room) {
  const std::string what = "lowcomm.hooks: bucket " + std::to_string(index) + ", segment '" + s.name + "'";
  if (s.numel > room)
    throw ConfigError(what + " (offset " + std::to_string(s.offset) + ", " + std::to_string(s.numel) +
                      " values) runs past the end of the bucket");
  std::string dims;
  bool empty = false;
  for (int64_t d : s.shape) {
    dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    empty = empty || d == 0;
  }
  bool fits = true;
  size_t product = 1;
  for (int64_t d : s.shape) {
    fits = fits && d >= 0;
    if (!fits || empty) continue;
    fits = product <= s.numel / static_cast<size_t>(d);
    product *= static_cast<size_t>(d);
  }
  if (!fits || (empty ? s.numel != 0 : product != s.numel))
    throw ConfigError(what + ": shape [" + dims + "] does not describe its " + std::to_string(s.numel) + " values");
}

}  // namespace

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
  if (index < 0) throw ConfigError("lowcomm.hooks: bucket index " + std::to_string(index) + " is negative");
  const size_t total = static_cast<size_t>(bucket.numel());
  size_t covered = 0;
  for (const auto& s : segments) {
    if (s.offset != covered) throw ConfigError("lowcomm.hooks: bucket segments must cover it in order");
    checkSegment(s, index, total - covered);
    covered += s.numel;
  }
  if (covered != total)
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
