#include "lowcomm/c10d/process_group.h"

#include <cstdlib>
#include <cstring>

#include <torch/csrc/utils/tensor_flatten.h>

#include "lowcomm/base/error.h"
#include "lowcomm/c10d/store_adapter.h"
#include "lowcomm/comm/tuned_table.h"
#include "lowcomm/net/env.h"

#include "arg_checks.h"

namespace lowcomm::torchdist {

namespace {

constexpr uint32_t kRootedTag = 0x4c430001;  // gather/scatter messages on the collectives' communicator

comm::DType reduceDType(const at::Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case at::kFloat: return comm::DType::f32;
    case at::kDouble: return comm::DType::f64;
    case at::kHalf: return comm::DType::f16;
    case at::kBFloat16: return comm::DType::bf16;
    case at::kInt: return comm::DType::i32;
    case at::kLong: return comm::DType::i64;
    case at::kByte: return comm::DType::u8;
    default:
      throw ConfigError(where(op) + "cannot reduce dtype " + std::string(c10::toString(t.scalar_type())) +
                        " (supported: float32, float64, float16, bfloat16, int32, int64, uint8)");
  }
}

comm::ReduceOp reduceOp(const c10d::ReduceOp& r, const char* op) {
  switch (r.op_) {
    case c10d::ReduceOp::SUM: return comm::ReduceOp::sum;
    case c10d::ReduceOp::AVG: return comm::ReduceOp::avg;
    case c10d::ReduceOp::MIN: return comm::ReduceOp::min;
    case c10d::ReduceOp::MAX: return comm::ReduceOp::max;
    default:
      static const char* names[] = {"SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"};
      const std::string name = r.op_ < 9 ? names[r.op_] : std::to_string(static_cast<int>(r.op_));
      throw ConfigError(where(op) + "reduce op " + name + " is not supported (SUM, AVG, MIN, MAX are)");
  }
}

size_t nbytes(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// A contiguous tensor to work on: `t` itself, or a copy to be written back with copyBack().
at::Tensor staged(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }
void copyBack(const at::Tensor& dst, const at::Tensor& src) {
  if (!dst.is_same(src)) dst.copy_(src);
}

bool envFlag(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  const std::string s = v;
  if (s == "1" || s == "true" || s == "on") return true;
  if (s == "0" || s == "false" || s == "off") return false;
  throw ConfigError(std::string(name) + "='" + s + "': expected 1 or 0");
}

}  // namespace

comm::CommOptions commOptionsFromEnv(std::chrono::milliseconds timeout) {
  comm::CommOptions o;
  if (timeout.count() > 0) o.timeout = timeout;
  o.deterministic = envFlag("LOWCOMM_DETERMINISTIC");
  const char* debug = std::getenv("TORCH_DISTRIBUTED_DEBUG");
  o.debug_check = envFlag("LOWCOMM_DEBUG_CHECK") || (debug && std::string(debug) == "DETAIL");
  if (const char* a = std::getenv("LOWCOMM_ALLREDUCE_ALGO"); a && *a) o.allreduce_algo = comm::parseAlgo(a);
  if (const char* s = std::getenv("LOWCOMM_SHM"); s && *s) o.shm = comm::parseShmMode(s);
  if (const char* k = std::getenv("LOWCOMM_STREAMS"); k && *k) o.streams = comm::parseStreams(k, "LOWCOMM_STREAMS");
  if (const char* t = std::getenv("LOWCOMM_TUNING"); t && *t)
    o.tuned = std::make_shared<const comm::TunedTable>(comm::TunedTable::load(t));
  if (const char* t = std::getenv("LOWCOMM_JOB_TOKEN"); t && *t) o.auth_token = t;
  if (const char* l = std::getenv("LOCAL_WORLD_SIZE"); l && *l) o.group_size = std::atoi(l);
  o.site = net::siteFromEnv();
  return o;
}

c10::intrusive_ptr<ProcessGroupLowcomm> ProcessGroupLowcomm::create(const c10::intrusive_ptr<c10d::Store>& store,
                                                                    int rank, int size,
                                                                    std::chrono::milliseconds timeout) {
  return create(std::make_shared<C10dStore>(store), rank, size, commOptionsFromEnv(timeout));
}

c10::intrusive_ptr<ProcessGroupLowcomm> ProcessGroupLowcomm::create(std::shared_ptr<net::Store> store, int rank,
                                                                    int size, const comm::CommOptions& opts) {
  net::TransportOptions transport;
  transport.timeout = opts.timeout;
  if (const char* m = std::getenv("MASTER_ADDR"); m && *m) transport.route_to = m;  // as lowcomm train's workers
  auto comm = comm::Communicator::create(std::move(store), rank, size, opts, transport);
  auto p2p = comm->split(0, rank);
  return c10::make_intrusive<ProcessGroupLowcomm>(std::move(comm), std::move(p2p));
}

ProcessGroupLowcomm::ProcessGroupLowcomm(std::shared_ptr<comm::Communicator> comm,
                                         std::shared_ptr<comm::Communicator> p2p)
    : c10d::ProcessGroup(comm->rank(), comm->size()), comm_(std::move(comm)), p2p_(std::move(p2p)),
      queue_(std::make_unique<TaskQueue>()) {}

ProcessGroupLowcomm::~ProcessGroupLowcomm() = default;

ProcessGroupLowcomm::WorkPtr ProcessGroupLowcomm::enqueue(c10d::OpType type, Tensors outputs,
                                                          std::function<void()> fn) {
  auto work = c10::make_intrusive<CollectiveWork>(rank_, type, std::move(outputs));
  queue_->push([work, fn = std::move(fn)] {
    std::exception_ptr error;
    try {
      fn();
    } catch (...) {
      error = std::current_exception();
    }
    work->complete(error);
  });
  return work;
}

ProcessGroupLowcomm::WorkPtr ProcessGroupLowcomm::submit(c10d::OpType type, Tensors outputs,
                                                         std::function<void(comm::Communicator&)> fn) {
  return enqueue(type, std::move(outputs), [this, fn = std::move(fn)] { fn(*comm_); });
}

ProcessGroupLowcomm::WorkPtr ProcessGroupLowcomm::broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) {
  const at::Tensor t = single(tensors, "broadcast");
  checkRank(opts.rootRank, size_, "broadcast", "root");
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(c10d::OpType::BROADCAST, {t}, [this, t, root] {
    at::Tensor buf = staged(t);
    comm_->broadcast(buf.data_ptr(), nbytes(buf), comm::DType::u8, root);
    copyBack(t, buf);
  });
}

ProcessGroupLowcomm::WorkPtr ProcessGroupLowcomm::allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) {
  const at::Tensor t = single(tensors, "allreduce");
  const comm::DType dt = reduceDType(t, "allreduce");
  const comm::ReduceOp op = reduceOp(opts.reduceOp, "allreduce");
  return enqueue(c10d::OpType::ALLREDUCE, {t}, [this, t, dt, op] {
    at::Tensor buf = staged(t);
    comm_->allreduce(buf.data_ptr(), static_cast<size_t>(buf.numel()), dt, op);
    copyBack(t, buf);
  });
}

ProcessGroupLowcomm::WorkPtr ProcessGroupLowcomm::allreduce_coalesced(Tensors& tensors,
                                                                      const c10d::AllreduceCoalescedOptions& opts) {
  if (tensors.empty()) throw ConfigError(where("allreduce_coalesced") + "no tensors");
  for (const auto& t : tensors) {
    checkTensor(t, "allreduce_coalesced");
    if (t.scalar_type() != tensors[0].scalar_type())
      throw ConfigError(where("allreduce_coalesced") + "tensors of different dtypes");
  }
  const comm::DType dt = reduceDType(tensors[0], "allreduce_coalesced");
  const comm::ReduceOp op = reduceOp(opts.reduceOp, "allreduce_coalesced");
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, tensors, [this, tensors, dt, op] {
    at::Tensor flat = torch::utils::flatten_dense_tensors(tensors);
    comm_->allreduce(flat.data_ptr(), static_cast<size_t>(flat.numel()), dt, op);
    auto parts = torch::utils::unflatten_dense_tensors(flat, tensors);
    for (size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(parts[i]);
  });
}

ProcessGroupLowcomm::WorkPtr ProcessGroupLowcomm::reduce(Tensors& tensors, const c10d::ReduceOptions& opts) {
  checkRank(opts.rootRank, size_, "reduce", "root");
  c10d::AllreduceOptions all;
  all.reduceOp = opts.reduceOp;
  return allreduce(tensors, all);
}

ProcessGroupLowcomm::WorkPtr ProcessGroupLowcomm::allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                                                            const c10d::AllgatherOptions&) {
  const at::Tensor in = single(inputs, "allgather");
  if (outputs.size() != 1 || outputs[0].size() != static_cast<size_t>(size_))
    throw ConfigError(where("allgather") + "expected one output list of " + std::to_string(size_) + " tensors");
  for (const auto& o : outputs[0]) {
    checkTensor(o, "allgather");
    sameShape(o, in, "allgather", "output and input differ");
  }
  Tensors outs = outputs[0];
  return enqueue(c10d::OpType::ALLGATHER, outs, [this, in, outs] {
    at::Tensor src = staged(in);
    at::Tensor flat = at::empty({static_cast<int64_t>(size_) * in.numel()}, in.options());
    comm_->allgather(src.data_ptr(), flat.data_ptr(), nbytes(src), comm::DType::u8);
    for (int r = 0; r < size_; ++r) outs[r].copy_(flat.narrow(0, r * in.numel(), in.numel()).view_as(outs[r]));
  });
}

ProcessGroupLowcomm::WorkPtr ProcessGroupLowcomm::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::AllgatherOptions&) {
  checkTensor(output, "_allgather_base");
  checkTensor(input, "_allgather_base");
  if (output.scalar_type() != input.scalar_type() || output.numel() != size_ * input.numel())
    throw ConfigError(where("_allgather_base") + "output must hold world size × input elements of its dtype");
  const at::Tensor out = output, in = input;
  return enqueue(c10d::OpType::_ALLGATHER_BASE, {out}, [this, out, in] {
    at::Tensor src = staged(in), dst = staged(out);
    comm_->allgather(src.data_ptr(), dst.data_ptr(), nbytes(src), comm::DType::u8);
    copyBack(out, dst);
  });
}

ProcessGroupLowcomm::WorkPtr ProcessGroupLowcomm::gather(std::vector<Tensors>& outputs, Tensors& inputs,
                                                         const c10d::GatherOptions& opts) {
  const at::Tensor in = single(inputs, "gather");
  checkRank(opts.rootRank, size_, "gather", "root");
  const int root = static_cast<int>(opts.rootRank);
  Tensors outs;
  if (rank_ == root) {
    if (outputs.size() != 1 || outputs[0].size() != static_cast<size_t>(size_))
      throw ConfigError(where("gather") + "the root needs one output list of " + std::to_string(size_) + " tensors");
    checkTensors(outputs[0], "gather");
    for (const auto& o : outputs[0]) sameShape(o, in, "gather", "output and input differ");
    outs = outputs[0];
  } else if (!outputs.empty() && !outputs[0].empty()) {
    throw ConfigError(where("gather") + "only the root (rank " + std::to_string(root) + ") takes output tensors");
  }
  return enqueue(c10d::OpType::GATHER, outs, [this, in, outs, root] {
    at::Tensor src = staged(in);
    if (rank_ != root) return comm_->send(src.data_ptr(), nbytes(src), root, kRootedTag);
    for (int r = 0; r < size_; ++r) {
      at::Tensor dst = staged(outs[r]);
      if (r == rank_) dst.copy_(src.view_as(dst));
      else comm_->recv(dst.data_ptr(), nbytes(dst), r, kRootedTag);
      copyBack(outs[r], dst);
    }
  });
}

ProcessGroupLowcomm::WorkPtr ProcessGroupLowcomm::scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                          const c10d::ScatterOptions& opts) {
  const at::Tensor out = single(outputs, "scatter");
  checkRank(opts.rootRank, size_, "scatter", "root");
  const int root = static_cast<int>(opts.rootRank);
  Tensors ins;
  if (rank_ == root) {
    if (inputs.size() != 1 || inputs[0].size() != static_cast<size_t>(size_))
      throw ConfigError(where("scatter") + "the root needs one input list of " + std::to_string(size_) + " tensors");
    checkTensors(inputs[0], "scatter");
    for (const auto& i : inputs[0]) sameShape(i, out, "scatter", "input and output differ");
    ins = inputs[0];
  } else if (!inputs.empty() && !inputs[0].empty()) {
    throw ConfigError(where("scatter") + "only the root (rank " + std::to_string(root) + ") takes input tensors");
  }
  return enqueue(c10d::OpType::SCATTER, {out}, [this, out, ins, root] {
    at::Tensor dst = staged(out);
    if (rank_ != root) {
      comm_->recv(dst.data_ptr(), nbytes(dst), root, kRootedTag);
    } else {
      for (int r = 0; r < size_; ++r) {
        at::Tensor src = staged(ins[r]);
        if (r == rank_) dst.copy_(src.view_as(dst));
        else comm_->send(src.data_ptr(), nbytes(src), r, kRootedTag);
      }
    }
    copyBack(out, dst);
  });
}

ProcessGroupLowcomm::WorkPtr ProcessGroupLowcomm::reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) {
  const at::Tensor out = single(outputs, "reduce_scatter");
  if (inputs.size() != 1 || inputs[0].size() != static_cast<size_t>(size_))
    throw ConfigError(where("reduce_scatter") + "expected one input list of " + std::to_string(size_) + " tensors");
  checkTensors(inputs[0], "reduce_scatter");
  for (const auto& i : inputs[0]) sameShape(i, out, "reduce_scatter", "input and output differ");
  const comm::DType dt = reduceDType(out, "reduce_scatter");
  const comm::ReduceOp op = reduceOp(opts.reduceOp, "reduce_scatter");
  Tensors ins = inputs[0];
  return enqueue(c10d::OpType::REDUCE_SCATTER, {out}, [this, out, ins, dt, op] {
    at::Tensor flat = torch::utils::flatten_dense_tensors(ins), dst = staged(out);
    comm_->reduceScatter(flat.data_ptr(), dst.data_ptr(), static_cast<size_t>(out.numel()), dt, op);
    copyBack(out, dst);
  });
}

ProcessGroupLowcomm::WorkPtr ProcessGroupLowcomm::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                       const c10d::ReduceScatterOptions& opts) {
  checkTensor(output, "_reduce_scatter_base");
  checkTensor(input, "_reduce_scatter_base");
  if (output.scalar_type() != input.scalar_type() || input.numel() != size_ * output.numel())
    throw ConfigError(where("_reduce_scatter_base") + "input must hold world size × output elements of its dtype");
  const comm::DType dt = reduceDType(output, "_reduce_scatter_base");
  const comm::ReduceOp op = reduceOp(opts.reduceOp, "_reduce_scatter_base");
  const at::Tensor out = output, in = input;
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, {out}, [this, out, in, dt, op] {
    at::Tensor src = staged(in), dst = staged(out);
    comm_->reduceScatter(src.data_ptr(), dst.data_ptr(), static_cast<size_t>(out.numel()), dt, op);
    copyBack(out, dst);
  });
}

void ProcessGroupLowcomm::exchangeBlocks(const std::vector<std::pair<const void*, size_t>>& sends,
                                         const std::vector<std::pair<void*, size_t>>& recvs) {
  std::vector<comm::Communicator::P2P> s, r;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    s.push_back({p, const_cast<void*>(sends[p].first), sends[p].second});
    r.push_back({p, recvs[p].first, recvs[p].second});
  }
  if (recvs[rank_].second != sends[rank_].second)
    throw ConfigError(where("alltoall") + "this rank's own block differs in size between input and output");
  if (sends[rank_].second) std::memcpy(recvs[rank_].first, sends[rank_].first, sends[rank_].second);
  comm_->exchange(s, r, kRootedTag + 1);
}

ProcessGroupLowcomm::WorkPtr ProcessGroupLowcomm::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                std::vector<int64_t>& output_splits,
                                                                std::vector<int64_t>& input_splits,
                                                                const c10d::AllToAllOptions&) {
  checkTensor(output, "alltoall_base");
  checkTensor(input, "alltoall_base");
  if (output.scalar_type() != input.scalar_type())
    throw ConfigError(where("alltoall_base") + "input and output dtypes differ");
  auto dim0 = [](const at::Tensor& t) { return t.dim() ? t.size(0) : int64_t{1}; };
  const auto out_rows = checkSplits(output_splits, dim0(output), size_, "output_split_sizes");
  const auto in_rows = checkSplits(input_splits, dim0(input), size_, "input_split_sizes");
  const at::Tensor out = output, in = input;
  return enqueue(c10d::OpType::ALLTOALL_BASE, {out}, [this, out, in, out_rows, in_rows] {
    at::Tensor src = staged(in), dst = staged(out);
    const size_t in_row = in.dim() && in.size(0) ? nbytes(src) / in.size(0) : nbytes(src);
    const size_t out_row = out.dim() && out.size(0) ? nbytes(dst) / out.size(0) : nbytes(dst);
    std::vector<std::pair<const void*, size_t>> sends;
    std::vector<std::pair<void*, size_t>> recvs;
    size_t so = 0, ro = 0;
    for (int p = 0; p < size_; ++p) {
      sends.emplace_back(static_cast<const char*>(src.data_ptr()) + so, in_rows[p] * in_row);
      recvs.emplace_back(static_cast<char*>(dst.data_ptr()) + ro, out_rows[p] * out_row);
      so += in_rows[p] * in_row;
      ro += out_rows[p] * out_row;
    }
    exchangeBlocks(sends, recvs);
    copyBack(out, dst);
  });
}

ProcessGroupLowcomm::WorkPtr ProcessGroupLowcomm::alltoall(Tensors& outputs, Tensors& inputs,
                                                           const c10d::AllToAllOptions&) {
  if (outputs.size() != static_cast<size_t>(size_) || inputs.size() != static_cast<size_t>(size_))
    throw ConfigError(where("alltoall") + "expected " + std::to_string(size_) + " input and output tensors");
  for (int p = 0; p < size_; ++p) {
    checkTensor(outputs[p], "alltoall");
    checkTensor(inputs[p], "alltoall");
    if (outputs[p].scalar_type() != inputs[0].scalar_type() || inputs[p].scalar_type() != inputs[0].scalar_type())
      throw ConfigError(where("alltoall") + "tensors of different dtypes");
  }
  const Tensors outs = outputs, ins = inputs;
  return enqueue(c10d::OpType::ALLTOALL, outs, [this, outs, ins] {
    Tensors src, dst;
    std::vector<std::pair<const void*, size_t>> sends;
    std::vector<std::pair<void*, size_t>> recvs;
    for (int p = 0; p < size_; ++p) {
      src.push_back(staged(ins[p]));
      dst.push_back(staged(outs[p]));
      sends.emplace_back(src[p].data_ptr(), nbytes(src[p]));
      recvs.emplace_back(dst[p].data_ptr(), nbytes(dst[p]));
    }
    exchangeBlocks(sends, recvs);
    for (int p = 0; p < size_; ++p) copyBack(outs[p], dst[p]);
  });
}

ProcessGroupLowcomm::WorkPtr ProcessGroupLowcomm::barrier(const c10d::BarrierOptions&) {
  return enqueue(c10d::OpType::BARRIER, {}, [this] { comm_->barrier(); });
}

ProcessGroupLowcomm::WorkPtr ProcessGroupLowcomm::send(Tensors& tensors, int dst, int tag) {
  const at::Tensor t = single(tensors, "send");
  checkRank(dst, size_, "send", "destination");
  checkTag(tag, "send");
  at::Tensor buf = staged(t);
  auto req = p2p_->isend(buf.data_ptr(), nbytes(buf), dst, static_cast<uint32_t>(tag));
  return c10::make_intrusive<P2PWork>(rank_, c10d::OpType::SEND, std::move(req), Tensors{buf});
}

ProcessGroupLowcomm::WorkPtr ProcessGroupLowcomm::recv(Tensors& tensors, int src, int tag) {
  const at::Tensor t = single(tensors, "recv");
  checkRank(src, size_, "recv", "source");
  checkTag(tag, "recv");
  at::Tensor buf = staged(t);
  auto req = p2p_->irecv(buf.data_ptr(), nbytes(buf), src, static_cast<uint32_t>(tag));
  std::function<void()> after;
  if (!buf.is_same(t)) after = [t, buf] { t.copy_(buf); };
  return c10::make_intrusive<P2PWork>(rank_, c10d::OpType::RECV, std::move(req), Tensors{t, buf}, std::move(after));
}

}  // namespace lowcomm::torchdist
