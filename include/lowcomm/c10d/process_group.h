// ProcessGroupLowcomm: a torch.distributed backend ("lowcomm") whose collectives run on lowcomm's
// Communicator (our algorithms over Gloo's TCP pairs, shared memory among ranks of one host,
// hierarchical across nodes), every byte counted by its traffic meter.
//
// Contract:
// - Collectives are queued in call order to one worker thread per group and return a Work at
//   once (DDP overlaps them with backward); every rank must issue them in the same order, as
//   with any c10d backend. Work::wait() rethrows failures: a dead peer or a timeout names the
//   rank (PeerError / TimeoutError text), within the group's timeout.
// - Tensors: CPU, dense, one tensor per list (no multi-device lists). Non-contiguous tensors are
//   staged through a contiguous copy. Reductions (allreduce, reduce, reduce_scatter) take
//   float32, float64, float16, bfloat16, int32, int64, uint8 and the ops SUM, AVG, MIN, MAX;
//   other dtypes and ops are a clear error. Broadcast, allgather, gather, scatter, alltoall,
//   send and recv move bytes and take every dtype.
// - reduce() computes an allreduce (every rank, not only the root, ends with the result);
//   gather/scatter go through the root with point-to-point messages.
// - send/recv are posted at once on a communicator of their own (split from the group's), so
//   isend/irecv pairs in any order do not deadlock and do not wait behind queued collectives.
//   recvAnysource is not supported. Wait for every send/recv Work: one dropped while its message
//   is in flight leaves that communicator unusable (later send/recv fail naming the reason).
// - Destroying the group waits for its queued collectives (the worker thread is joined).
// - Options from the environment (read when the group is created): LOWCOMM_DETERMINISTIC=1
//   (rank-ordered sums, independent of algorithm and timing), LOWCOMM_ALLREDUCE_ALGO
//   (auto|ring|hd|hier|rails|ordered|shm|tree), LOWCOMM_SHM (auto|on|off), LOWCOMM_STREAMS
//   (auto|1..64: TCP connections per pair of ranks in different sites, comm.streams; the site is
//   LOWCOMM_SITE, set by `lowcomm launch --cluster`), LOWCOMM_JOB_TOKEN (pair
//   authentication; the Python backend requires it, see backend_rendezvous.h), LOWCOMM_DEBUG_CHECK=1 or TORCH_DISTRIBUTED_DEBUG=DETAIL (a fingerprint
//   exchange before every collective turns calls that differ across ranks — op, size, dtype,
//   root — into an error naming the ranks instead of a hang), LOCAL_WORLD_SIZE (ranks per node for the hierarchical and rails algorithms),
//   GLOO_SOCKET_IFNAME (interface to bind).
#pragma once

#include <memory>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "lowcomm/comm/communicator.h"
#include "lowcomm/c10d/work.h"

namespace lowcomm::torchdist {

// The communicator options the environment asks for (see above); ConfigError names a bad value.
comm::CommOptions commOptionsFromEnv(std::chrono::milliseconds timeout);

class ProcessGroupLowcomm : public c10d::ProcessGroup {
 public:
  // Rendezvous through torch's store (the PrefixStore init_process_group/new_group hands a backend).
  // (`lowcomm bench collectives` only; the Python backend goes through backend_rendezvous.h.)
  static c10::intrusive_ptr<ProcessGroupLowcomm> create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                        int size, std::chrono::milliseconds timeout);
  // Rendezvous through lowcomm's `store` with options `opts` (auth_token: every pair proves it).
  static c10::intrusive_ptr<ProcessGroupLowcomm> create(std::shared_ptr<net::Store> store, int rank, int size,
                                                        const comm::CommOptions& opts);
  ProcessGroupLowcomm(std::shared_ptr<comm::Communicator> comm, std::shared_ptr<comm::Communicator> p2p);
  ~ProcessGroupLowcomm() override;

  const std::string getBackendName() const override { return "lowcomm"; }
  comm::TrafficSnapshot traffic() const { return comm_->meter().snapshot(); }
  void resetTraffic() { comm_->meter().reset(); }
  const comm::CommOptions& options() const { return comm_->options(); }
  // Waits until every queued collective has finished (lowcomm.torch calls it at exit).
  void drain() { queue_->drain(); }

  using Tensors = std::vector<at::Tensor>;
  using WorkPtr = c10::intrusive_ptr<c10d::Work>;
  // Queues fn for the worker thread, after every collective already queued; the Work completes
  // with `outputs` when fn returned (or with its exception). fn gets the group's communicator,
  // which it must use collectively like any other call (a DDP comm hook's compressed reduce).
  WorkPtr submit(c10d::OpType type, Tensors outputs, std::function<void(comm::Communicator&)> fn);
  WorkPtr broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override;
  WorkPtr allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override;
  WorkPtr allreduce_coalesced(Tensors& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  WorkPtr reduce(Tensors& tensors, const c10d::ReduceOptions& opts) override;
  WorkPtr allgather(std::vector<Tensors>& outputs, Tensors& inputs, const c10d::AllgatherOptions& opts) override;
  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) override;
  WorkPtr gather(std::vector<Tensors>& outputs, Tensors& inputs, const c10d::GatherOptions& opts) override;
  WorkPtr scatter(Tensors& outputs, std::vector<Tensors>& inputs, const c10d::ScatterOptions& opts) override;
  WorkPtr reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                         const c10d::ReduceScatterOptions& opts) override;
  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                               const c10d::ReduceScatterOptions& opts) override;
  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                        std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) override;
  WorkPtr alltoall(Tensors& outputs, Tensors& inputs, const c10d::AllToAllOptions& opts) override;
  WorkPtr barrier(const c10d::BarrierOptions& opts) override;
  WorkPtr send(Tensors& tensors, int dst, int tag) override;
  WorkPtr recv(Tensors& tensors, int src, int tag) override;

 private:
  WorkPtr enqueue(c10d::OpType type, Tensors outputs, std::function<void()> fn);
  // Exchanges one contiguous buffer per peer (block `r` of sends goes to rank r); this rank's own
  // block is copied locally. Worker thread only.
  void exchangeBlocks(const std::vector<std::pair<const void*, size_t>>& sends,
                      const std::vector<std::pair<void*, size_t>>& recvs);

  std::shared_ptr<comm::Communicator> comm_;  // collectives, on the worker thread only
  std::shared_ptr<comm::Communicator> p2p_;   // send/recv, posted from the caller's thread
  std::unique_ptr<TaskQueue> queue_;          // destroyed first: finishes the queued collectives
};

}  // namespace lowcomm::torchdist
