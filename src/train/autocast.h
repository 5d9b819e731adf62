// bf16 autocast on CPU for one scope (private to lowcomm_train), as Python's
// `torch.autocast("cpu", dtype=torch.bfloat16)`: inside it, ops on LibTorch's autocast lists run
// in bf16 (matmul, conv) or f32 (reductions, losses); parameters stay f32 (master weights), and
// backward produces f32 gradients for them. The AB-training reference autocasts forward and loss.
#pragma once

#include <ATen/autocast_mode.h>

#include <fstream>
#include <string>

namespace lowcomm::train {

// Whether this CPU has the AVX-512 that LibTorch's oneDNN needs for bf16 convolutions; without
// it they fall back to slow_conv2d (measured 14x slower than f32 on an AVX2-only EPYC:
// docs/architecture.md, "Machine facts"). Reads /proc/cpuinfo; true where that cannot be read.
inline bool cpuRunsBf16Fast() {
  std::ifstream f("/proc/cpuinfo");
  if (!f) return true;
  for (std::string line; std::getline(f, line);)
    if (line.rfind("flags", 0) == 0) return line.find(" avx512bw") != std::string::npos;
  return true;
}

class AutocastScope {
 public:
  explicit AutocastScope(bool on) : on_(on) {
    if (!on_) return;
    prev_enabled_ = at::autocast::is_cpu_enabled();
    prev_dtype_ = at::autocast::get_autocast_cpu_dtype();
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_cpu_enabled(prev_enabled_);
    at::autocast::set_autocast_cpu_dtype(prev_dtype_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool on_;
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kBFloat16;
};

}  // namespace lowcomm::train
