// The PyTorch Gloo backend (c10d::ProcessGroupGloo from LibTorch) as the benchmark baseline,
// run over the same rendezvous store (seen as a c10d::Store) and interface as our Communicator.
#pragma once

#include <memory>
#include <string>

#include "lowcomm/net/store.h"

namespace lowcomm::cli {

class C10dGloo {
 public:
  C10dGloo(std::shared_ptr<net::Store> store, int rank, int size, const std::string& iface, const std::string& address,
           int timeout_s);
  ~C10dGloo();
  // Whether c10d's Gloo backend implements `op` ("reduce_scatter" it does not, in LibTorch 1.13).
  static bool supports(const std::string& op);
  // One call of `op` on `count` f32 elements per rank (nccl-tests layout), blocking.
  // `in` and `out` are plain buffers sized as bench_collectives allocates them.
  void run(const std::string& op, float* in, float* out, size_t count, int size);
  void barrier();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lowcomm::cli
