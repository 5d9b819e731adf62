// Communicator collectives (lowcomm/comm/communicator.h): argument checks, the fingerprint, the
// timeline record, and the dispatch of the chosen algorithm through the algorithm table
// (lowcomm/comm/algorithm_table.h), the rows the simulator dispatches through as well.
#include <cstring>
#include <string>
#include <vector>

#include "algo/algorithms.h"
#include "call_record.h"
#include "link.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/algorithm_table.h"
#include "lowcomm/comm/communicator.h"
#include "lowcomm/comm/selector.h"
#include "reduce.h"
#include "shm_domain.h"
#include "shm_node.h"

namespace lowcomm::comm {

namespace {

ConfigError cannotRun(Algo a, Op op) {
  std::string known;
  for (const auto& name : algorithmChoices(op))
    if (name != "auto") known += (known.empty() ? "" : ", ") + name;
  return ConfigError(std::string("algorithm '") + algoName(a) + "' cannot run " + opName(op) + " (" + known + ")");
}

}  // namespace

void Communicator::allreduce(void* buf, size_t count, DType dt, ReduceOp op, Algo algo) {
  const size_t es = dtypeSize(dt);
  Algo a = chooseAllreduce(count * es, algo);
  // Mapping the segment is collective and may fail on every rank alike: then choose again.
  if (a == Algo::shm && size_ > 1 && count > 0 && !shmDomain()) a = chooseAllreduce(count * es, algo);
  // The algorithm is part of the fingerprint: ranks running different ones would exchange
  // messages of different sizes; so is hier's shm mode (its node part in shared memory or not).
  const int shm_bits = a == Algo::hierarchical && opts_.shm != ShmMode::off ? 1 << 16 : 0;
  checkFingerprint("allreduce", count, dt, static_cast<int>(op) | static_cast<int>(a) << 8 | shm_bits);
  if (size_ == 1 || count == 0) return;
  ShmDomain* node = a == Algo::hierarchical ? nodeShm() : nullptr;  // collective at the first call
  const AlgorithmSpec& spec = algorithmSpec(a);
  CallRecord rec(trace_, "allreduce", count * es, dt, world_ranks_);
  if (rec.on()) {
    rec.args["algo"] = spec.name;
    rec.args["segment"] = std::to_string(opts_.segment_bytes);
    if (spec.needs == Needs::groups) rec.args["group_size"] = std::to_string(groupFor(a));
  }
  GlooExchange ex(*link_, *meter_, "allreduce", phase_, opts_.timeout, link_->nextSeq());
  AllreduceOptions o;
  o.buf = static_cast<char*>(buf);
  o.count = count;
  o.dt = dt;
  o.op = op;
  o.segment_bytes = opts_.segment_bytes;
  o.group_size = groupFor(a);
  o.scratch = &link_->scratch();
  const auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
  try {
    if (spec.needs == Needs::one_host) {  // not over the exchange: the all-local segment
      allreduceShm(*shmDomain(), o, *meter_, phase_, deadline);
    } else if (node) {  // hier with its node part in the group's shared memory
      if (rec.on()) rec.args["node_piece"] = std::to_string(node->piece());
      ShmNode mem(*node, *meter_, phase_, deadline);
      o.node = &mem;
      spec.runs.allreduce_fn(ex, Group::world(rank_, size_), o);
    } else {
      spec.runs.allreduce_fn(ex, Group::world(rank_, size_), o);
    }
  } catch (const Error& e) {
    // Shared memory left half-written, or a peer gone from it: its state is unknown.
    if (spec.needs == Needs::one_host || node) link_->poison(e.what());
    throw;
  }
  if (op == ReduceOp::avg) divideBy(buf, count, dt, size_);
}

void Communicator::broadcast(void* buf, size_t count, DType dt, int root, Algo algo) {
  if (root < 0 || root >= size_)
    throw ConfigError("broadcast: root " + std::to_string(root) + " is not a rank of this communicator (size " +
                      std::to_string(size_) + ")");
  if (!algoRuns(Op::broadcast, algo)) throw cannotRun(algo, Op::broadcast);
  checkFingerprint("broadcast", count, dt, root);
  if (size_ == 1 || count == 0) return;
  const size_t bytes = count * dtypeSize(dt);
  if (algo == Algo::automatic) algo = autoBroadcast(bytes, size_, opts_.segment_bytes);
  CallRecord rec(trace_, "broadcast", bytes, dt, world_ranks_);
  if (rec.on()) {
    rec.args["root"] = std::to_string(root);
    rec.args["algo"] = algoName(algo);
    rec.args["segment"] = std::to_string(opts_.segment_bytes);
  }
  GlooExchange ex(*link_, *meter_, "broadcast", phase_, opts_.timeout, link_->nextSeq());
  BroadcastOptions o;
  o.buf = static_cast<char*>(buf);
  o.bytes = bytes;
  o.root = root;
  o.segment_bytes = opts_.segment_bytes;
  algorithmSpec(algo).runs.broadcast_fn(ex, Group::world(rank_, size_), o);
}

void Communicator::allgather(const void* send, void* recv, size_t count, DType dt, Algo algo) {
  allgatherv(send, count, recv, std::vector<size_t>(size_, count), dt, algo);
}

void Communicator::allgatherv(const void* send, size_t send_count, void* recv, const std::vector<size_t>& counts,
                              DType dt, Algo algo) {
  const Algo forced = algo == Algo::automatic ? opts_.allgather_algo : algo;
  if (!algoRuns(Op::allgather, forced)) throw cannotRun(forced, Op::allgather);
  const AllgatherChoice how = chooseAllgather(forced);
  if (size_ > 1 && !shapeFits(how.algo, size_, how.group_size))
    throw ConfigError(std::string("algorithm '") + algoName(how.algo) + "' for allgather needs a group size between 2 and " +
                      std::to_string(size_ - 1) + " (ranks per node), got " + std::to_string(how.group_size));
  allgatherImpl(send, send_count, recv, counts, dt, "allgather", how);
}

void Communicator::allgatherImpl(const void* send, size_t send_count, void* recv, const std::vector<size_t>& counts,
                                 DType dt, const char* op, AllgatherChoice how) {
  const Algo algo = how.algo;
  if (counts.size() != static_cast<size_t>(size_))
    throw ConfigError("allgatherv: " + std::to_string(counts.size()) + " counts given for " + std::to_string(size_) +
                      " ranks");
  if (counts[rank_] != send_count)
    throw ConfigError("allgatherv: rank " + std::to_string(rank_) + " sends " + std::to_string(send_count) +
                      " elements but counts[" + std::to_string(rank_) + "] = " + std::to_string(counts[rank_]));
  size_t total = 0;
  for (size_t c : counts) total += c;
  checkFingerprint("allgatherv", total, dt, static_cast<int>(algo));
  const size_t es = dtypeSize(dt);
  std::vector<size_t> off(size_ + 1, 0);
  for (int i = 0; i < size_; ++i) off[i + 1] = off[i] + counts[i] * es;
  char* out = static_cast<char*>(recv);
  if (send_count && out + off[rank_] != send) std::memmove(out + off[rank_], send, send_count * es);
  if (size_ == 1) return;
  CallRecord rec(std::strcmp(op, "setup") == 0 ? nullptr : trace_, "allgatherv", off[size_], dt, world_ranks_);
  if (rec.on()) {
    std::string per;
    for (int i = 0; i < size_; ++i) per += (i ? "," : "") + std::to_string(off[i + 1] - off[i]);
    rec.args["rank_bytes"] = per;
    rec.args["algo"] = algoName(algo);
    rec.args["segment"] = std::to_string(opts_.segment_bytes);
    if (algorithmSpec(algo).needs == Needs::groups) rec.args["group_size"] = std::to_string(how.group_size);
  }
  GlooExchange ex(*link_, *meter_, op, phase_, opts_.timeout, link_->nextSeq());
  AllgatherOptions o;
  o.buf = out;
  o.off_bytes = &off;
  o.segment_bytes = opts_.segment_bytes;
  o.group_size = how.group_size;
  algorithmSpec(algo).runs.allgather_fn(ex, Group::world(rank_, size_), o);
}

void Communicator::reduceScatter(const void* send, void* recv, size_t recv_count, DType dt, ReduceOp op) {
  checkFingerprint("reduce_scatter", recv_count, dt, static_cast<int>(op));
  const size_t es = dtypeSize(dt);
  if (size_ == 1) {
    if (recv_count && recv != send) std::memmove(recv, send, recv_count * es);
    return;
  }
  if (recv_count == 0) return;
  CallRecord rec(trace_, "reduce_scatter", size_ * recv_count * es, dt, world_ranks_);
  const bool in_place = static_cast<const char*>(send) + rank_ * recv_count * es == recv;
  char* work = in_place ? static_cast<char*>(recv) - rank_ * recv_count * es : link_->work().get(size_ * recv_count * es);
  if (!in_place) std::memcpy(work, send, size_ * recv_count * es);
  std::vector<size_t> off(size_ + 1);
  for (int i = 0; i <= size_; ++i) off[i] = i * recv_count;
  {
    GlooExchange ex(*link_, *meter_, "reduce_scatter", phase_, opts_.timeout, link_->nextSeq());
    ReduceScatterOptions o;  // the ring: reduce_scatter's one algorithm
    o.buf = work;
    o.off = &off;
    o.dt = dt;
    o.op = op;
    o.seg_elems = segmentElems(opts_.segment_bytes, es, recv_count);
    o.tmp = link_->scratch().get(ringScratchBytes(off, es));
    ringReduceScatter(ex, Group::world(rank_, size_), o);
    ex.waitAll();
  }
  if (!in_place) std::memcpy(recv, work + off[rank_] * es, recv_count * es);
  if (op == ReduceOp::avg) divideBy(recv, recv_count, dt, size_);
}

void Communicator::alltoall(const void* send, void* recv, size_t count, DType dt) {
  checkFingerprint("alltoall", count, dt, 0);
  CallRecord rec(trace_, "alltoall", size_ * count * dtypeSize(dt), dt, world_ranks_);
  GlooExchange ex(*link_, *meter_, "alltoall", phase_, opts_.timeout, link_->nextSeq());
  AlltoallOptions o;  // pairwise: alltoall's one algorithm
  o.send = static_cast<const char*>(send);
  o.recv = static_cast<char*>(recv);
  o.block_bytes = count * dtypeSize(dt);
  alltoallPairwise(ex, Group::world(rank_, size_), o);
}

void Communicator::barrier() {
  checkFingerprint("barrier", 0, DType::u8, 0);
  if (size_ == 1) return;
  CallRecord rec(trace_, "barrier", 0, DType::u8, world_ranks_);
  GlooExchange ex(*link_, *meter_, "barrier", phase_, opts_.timeout, link_->nextSeq());
  barrierDissemination(ex, Group::world(rank_, size_), BarrierOptions{});
}

}  // namespace lowcomm::comm
