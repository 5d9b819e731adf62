#include "gpt_shard_layout.h"

#include <vector>

namespace lowcomm::parallel::gpt_shard {

namespace {

// [3 n, rest...] viewed as [3, T, n / T, rest...].
torch::Tensor qkvView(const torch::Tensor& full, int64_t t) {
  std::vector<int64_t> shape = {3, t, full.size(0) / (3 * t)};
  for (int64_t d = 1; d < full.dim(); ++d) shape.push_back(full.size(d));
  return full.reshape(shape);
}

}  // namespace

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

Layout layoutOf(const std::string& name) {
  if (endsWith(name, "attn.qkv.weight") || endsWith(name, "attn.qkv.bias")) return Layout::qkv_rows;
  if (endsWith(name, "attn.proj.weight") || endsWith(name, "mlp.fc2.weight")) return Layout::cols;
  if (endsWith(name, "mlp.fc1.weight") || endsWith(name, "mlp.fc1.bias") || name == "stem.weight" ||
      name == "head.weight")
    return Layout::rows;
  return Layout::replicated;
}

torch::Tensor shardOf(Layout l, const torch::Tensor& full, int64_t t, int64_t r) {
  switch (l) {
    case Layout::rows: return full.chunk(t, 0)[r];
    case Layout::cols: return full.chunk(t, 1)[r];
    case Layout::qkv_rows: {
      auto s = qkvView(full, t).select(1, r);
      std::vector<int64_t> shape = {full.size(0) / t};
      for (int64_t d = 1; d < full.dim(); ++d) shape.push_back(full.size(d));
      return s.reshape(shape);
    }
    case Layout::replicated: break;
  }
  return full;
}

torch::Tensor gathered(Layout l, const torch::Tensor& shard, const torch::IntArrayRef full_shape, comm::Communicator& tp) {
  if (l == Layout::replicated) return shard.detach().clone();
  const int64_t t = tp.size();
  auto mine = shard.detach().to(torch::kFloat32).contiguous();
  auto all = torch::empty({t * mine.numel()});
  tp.allgather(mine.data_ptr(), all.data_ptr(), static_cast<size_t>(mine.numel()), comm::DType::f32);
  std::vector<int64_t> blocks = {t};
  for (auto s : mine.sizes()) blocks.push_back(s);
  all = all.reshape(blocks);                                           // [T, shard...]
  if (l == Layout::cols) return all.transpose(0, 1).reshape(full_shape);  // [out, T, in/T]
  if (l == Layout::qkv_rows) {
    std::vector<int64_t> parts = {t, 3, mine.size(0) / 3};
    for (int64_t d = 1; d < mine.dim(); ++d) parts.push_back(mine.size(d));
    return all.reshape(parts).transpose(0, 1).reshape(full_shape);    // [3, T, n/T, ...]
  }
  return all.reshape(full_shape);
}

}  // namespace lowcomm::parallel::gpt_shard
