// A torch.distributed backend driven through c10d's C++ API, over the same rendezvous store (seen
// as a c10d::Store) and interface as our Communicator: PyTorch's Gloo backend
// (c10d::ProcessGroupGloo, the baseline, rows "c10d-gloo") or ours (ProcessGroupLowcomm, what
// `import lowcomm.torch` registers, rows "torch-lowcomm").
#pragma once

#include <memory>
#include <string>

#include "lowcomm/net/store.h"

namespace lowcomm::cli {

class C10dBackend {
 public:
  // kind: "gloo" or "lowcomm".
  C10dBackend(const std::string& kind, std::shared_ptr<net::Store> store, int rank, int size, const std::string& iface,
              const std::string& address, int timeout_s);
  ~C10dBackend();
  // Whether the backend implements `op` (Gloo has no reduce_scatter in LibTorch 1.13).
  bool supports(const std::string& op) const;
  // One call of `op` on `count` f32 elements per rank (nccl-tests layout), blocking.
  // `in` and `out` are plain buffers sized as bench_collectives allocates them.
  void run(const std::string& op, float* in, float* out, size_t count, int size);
  void barrier();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lowcomm::cli
