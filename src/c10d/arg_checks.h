// Checks of what Python hands the lowcomm backend (tensors, ranks, tags, split sizes, group
// arguments), run on the calling thread before anything is queued, so a bad argument is a
// ConfigError (Python ValueError) naming the op and the argument, on the calling rank only, and
// never reaches a buffer. Private to src/c10d.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

namespace lowcomm::torchdist {

// "lowcomm backend, <op>: "
std::string where(const char* op);

// Defined, CPU, dense.
void checkTensor(const at::Tensor& t, const char* op);
// Every tensor of a list passed to `op`.
void checkTensors(const std::vector<at::Tensor>& ts, const char* op);
// The one tensor of a single-device list.
const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* op);
// Same dtype and element count.
void sameShape(const at::Tensor& a, const at::Tensor& b, const char* op, const char* what);
// 0 <= r < size; `what` names the argument ("root", "destination", ...).
void checkRank(int64_t r, int size, const char* op, const char* what);
// A point-to-point tag: 0 <= tag (they travel as unsigned 32-bit values).
void checkTag(int64_t tag, const char* op);

// all_to_all_single's split sizes for `rows` rows along dim 0 over `world` ranks: empty (even
// split; rows must divide) or one non-negative size per rank adding up to `rows`, checked
// without overflow. `arg` is the Python argument's name (input_split_sizes, ...).
std::vector<int64_t> checkSplits(std::vector<int64_t> splits, int64_t rows, int world, const char* arg);

// A group's arguments from torch.distributed's creator call: 1 <= size <= global_size,
// 0 <= rank < size, 0 <= global_rank < global_size, timeout >= 0.
void checkGroupArgs(int rank, int size, int global_rank, int global_size, std::chrono::milliseconds timeout);

}  // namespace lowcomm::torchdist
