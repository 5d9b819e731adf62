#include "arg_checks.h"

#include "lowcomm/base/error.h"

namespace lowcomm::torchdist {

std::string where(const char* op) { return std::string("lowcomm backend, ") + op + ": "; }

void checkTensor(const at::Tensor& t, const char* op) {
  if (!t.defined()) throw ConfigError(where(op) + "undefined tensor");
  if (!t.device().is_cpu())
    throw ConfigError(where(op) + "tensor on " + t.device().str() + "; the lowcomm backend takes CPU tensors");
  if (t.is_sparse()) throw ConfigError(where(op) + "sparse tensors are not supported");
}

void checkTensors(const std::vector<at::Tensor>& ts, const char* op) {
  for (const auto& t : ts) checkTensor(t, op);
}

const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* op) {
  if (ts.size() != 1)
    throw ConfigError(where(op) + "expected one tensor per call, got " + std::to_string(ts.size()) +
                      " (multi-device lists are not supported)");
  checkTensor(ts[0], op);
  return ts[0];
}

void sameShape(const at::Tensor& a, const at::Tensor& b, const char* op, const char* what) {
  if (a.scalar_type() != b.scalar_type() || a.numel() != b.numel())
    throw ConfigError(where(op) + what + ": " + std::string(c10::toString(a.scalar_type())) + "[" +
                      std::to_string(a.numel()) + "] vs " + std::string(c10::toString(b.scalar_type())) + "[" +
                      std::to_string(b.numel()) + "]");
}

void checkRank(int64_t r, int size, const char* op, const char* what) {
  if (r < 0 || r >= size)
    throw ConfigError(where(op) + what + " " + std::to_string(r) + " is not a rank of this group of " +
                      std::to_string(size));
}

void checkTag(int64_t tag, const char* op) {
  if (tag < 0) throw ConfigError(where(op) + "tag " + std::to_string(tag) + " is negative (tags are 0 or more)");
}

std::vector<int64_t> checkSplits(std::vector<int64_t> splits, int64_t rows, int world, const char* arg) {
  const std::string op = where("alltoall_base") + arg;
  if (splits.empty()) {
    if (rows % world)
      throw ConfigError(op + " not given and dim 0 (" + std::to_string(rows) + ") does not divide by the world size " +
                        std::to_string(world));
    return std::vector<int64_t>(world, rows / world);
  }
  if (static_cast<int64_t>(splits.size()) != world)
    throw ConfigError(op + " has " + std::to_string(splits.size()) + " sizes; expected one per rank (" +
                      std::to_string(world) + ")");
  for (size_t p = 0; p < splits.size(); ++p)
    if (splits[p] < 0)
      throw ConfigError(op + "[" + std::to_string(p) + "] = " + std::to_string(splits[p]) + " is negative");
  int64_t left = rows;  // subtracting, so that no sum of sizes can overflow
  for (size_t p = 0; p < splits.size(); ++p) {
    if (splits[p] > left)
      throw ConfigError(op + " add up to more than dim 0 (" + std::to_string(rows) + ")");
    left -= splits[p];
  }
  if (left) throw ConfigError(op + " add up to " + std::to_string(rows - left) + ", not dim 0 (" +
                              std::to_string(rows) + ")");
  return splits;
}

void checkGroupArgs(int rank, int size, int global_rank, int global_size, std::chrono::milliseconds timeout) {
  const std::string op = where("create_process_group");
  if (global_size < 1) throw ConfigError(op + "global size " + std::to_string(global_size) + " is not a world size");
  if (size < 1 || size > global_size)
    throw ConfigError(op + "size " + std::to_string(size) + " is not a group size within a world of " +
                      std::to_string(global_size));
  if (rank < 0 || rank >= size)
    throw ConfigError(op + "rank " + std::to_string(rank) + " is not a rank of a group of " + std::to_string(size));
  if (global_rank < 0 || global_rank >= global_size)
    throw ConfigError(op + "global rank " + std::to_string(global_rank) + " is not a rank of a world of " +
                      std::to_string(global_size));
  if (timeout.count() < 0)
    throw ConfigError(op + "timeout " + std::to_string(timeout.count()) + " ms is negative");
}

}  // namespace lowcomm::torchdist
