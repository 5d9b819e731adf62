#include "lowcomm/comm/communicator.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <map>
#include <thread>
#include <gloo/context.h>

#include "algo/algorithms.h"
#include "link.h"
#include "mesh.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/selector.h"
#include "lowcomm/net/shm.h"
#include "reduce.h"
#include "shm_domain.h"
#include "shm_node.h"

namespace lowcomm::comm {

namespace {

// One collective call (category "collective") or point-to-point call ("p2p") as a timeline
// event (Communicator::setTrace), recorded when the call returns normally.
class CallRecord {
 public:
  CallRecord(Trace* t, const char* op, size_t bytes, DType dt, const std::vector<int>& root_ranks,
             const char* cat = "collective")
      : t_(t && t->enabled() ? t : nullptr), op_(op), cat_(cat) {
    if (!t_) return;  // untraced: nothing on the collective's path
    start_ = Trace::Clock::now();
    exceptions_ = std::uncaught_exceptions();
    args = {{"bytes", std::to_string(bytes)}, {"dtype", dtypeName(dt)}};
    if (!root_ranks.empty()) {
      std::string r;
      for (size_t i = 0; i < root_ranks.size(); ++i) r += (i ? "," : "") + std::to_string(root_ranks[i]);
      args["ranks"] = r;
    }
  }
  ~CallRecord() {
    if (t_ && std::uncaught_exceptions() == exceptions_)
      t_->complete(op_, cat_, Trace::threadLane(), start_, Trace::Clock::now(), std::move(args));
  }
  CallRecord(const CallRecord&) = delete;
  CallRecord& operator=(const CallRecord&) = delete;
  bool on() const { return t_ != nullptr; }
  std::map<std::string, std::string> args;

 private:
  Trace* t_;
  const char* op_;
  const char* cat_;
  Trace::Clock::time_point start_;
  int exceptions_ = 0;
};

// A rank of this communicator as a rank of the root one (the timeline names root ranks).
int rootOf(const std::vector<int>& world_ranks, int r) { return world_ranks.empty() ? r : world_ranks[r]; }

// A point-to-point call's peers and sizes on its timeline event: "peer:bytes,peer:bytes".
std::string peersArg(const std::vector<int>& world_ranks, const std::vector<Communicator::P2P>& msgs) {
  std::string out;
  for (const auto& m : msgs)
    out += (out.empty() ? "" : ",") + std::to_string(rootOf(world_ranks, m.peer)) + ":" + std::to_string(m.bytes);
  return out;
}

// Called only when `rec` records (the lists cost an allocation). `comm`: the communicator's
// store prefix, which tells a split's messages from its parent's between the same two ranks.
void p2pArgs(CallRecord& rec, const std::vector<int>& world_ranks, const std::vector<Communicator::P2P>& sends,
             const std::vector<Communicator::P2P>& recvs, uint32_t tag, const std::string& comm) {
  rec.args["sends"] = peersArg(world_ranks, sends);
  rec.args["recvs"] = peersArg(world_ranks, recvs);
  rec.args["tag"] = std::to_string(tag);
  rec.args["comm"] = comm;
}

std::chrono::milliseconds connectTimeout(const CommOptions& o) {
  return o.connect_timeout.count() > 0 ? o.connect_timeout : o.timeout;
}
}  // namespace

Communicator::Communicator(std::shared_ptr<net::Store> store, std::string prefix, int rank, int size,
                           CommOptions opts, std::shared_ptr<TrafficMeter> meter, std::unique_ptr<Link> link)
    : store_(std::move(store)), prefix_(std::move(prefix)), rank_(rank), size_(size), opts_(opts),
      meter_(std::move(meter)), link_(std::move(link)) {}

Communicator::~Communicator() = default;

std::shared_ptr<Communicator> Communicator::create(std::shared_ptr<net::Store> store, int rank, int size,
                                                   const CommOptions& opts, const net::TransportOptions& transport) {
  if (size < 1 || rank < 0 || rank >= size)
    throw ConfigError("communicator: rank " + std::to_string(rank) + " is not in [0, " + std::to_string(size) + ")");
  if (size > kMaxRanks)
    throw ConfigError("communicator: " + std::to_string(size) + " ranks; at most " + std::to_string(kMaxRanks) +
                      " are supported (slot layout)");
  auto dev = net::makeDevice(transport);
  const std::string prefix = "lowcomm";
  std::shared_ptr<Communicator> c(new Communicator(store, prefix, rank, size, opts, std::make_shared<TrafficMeter>(),
                                                  connectLink(store, prefix, rank, size, dev, opts.auth_token,
                                                              connectTimeout(opts))));
  c->detectLocality();
  c->meter_->reset();  // the meter starts at zero: set-up traffic is not the user's
  return c;
}

void Communicator::detectLocality() {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the host key
  for (char ch : net::hostKey()) h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
  std::vector<uint64_t> all(size_);
  allgatherImpl(&h, 1, all.data(), std::vector<size_t>(size_, 1), DType::i64, "setup", Algo::ring);
  all_local_ = std::all_of(all.begin(), all.end(), [&](uint64_t x) { return x == h; });
  std::vector<bool> same(size_);
  for (int r = 0; r < size_; ++r) same[r] = all[r] == h;
  link_->setSameHost(std::move(same));
  node_of_.assign(size_, 0);
  std::vector<uint64_t> seen;
  for (int r = 0; r < size_; ++r) {
    auto it = std::find(seen.begin(), seen.end(), all[r]);
    node_of_[r] = static_cast<int>(it - seen.begin());
    if (it == seen.end()) seen.push_back(all[r]);
  }
  if (opts_.shm == ShmMode::on && !all_local_)
    throw ConfigError("shared memory was required (shm = on) but not every rank is on this host");
}

// A failed try's keys stay in the store (rank 0's empty segment name among them): every try has
// its own, the same on every rank since all of them failed alike (the vote).
std::string Communicator::shmTryPrefix(const std::string& base, int& tries) {
  const int t = tries++;
  return t == 0 ? base : base + "/try" + std::to_string(t);
}

ShmDomain* Communicator::shmDomain() {
  if (!shm_ && all_local_) {
    auto vote = [this](bool ok) { return voteAll(ok, *meter_); };
    try {
      shm_ = ShmDomain::create(*store_, shmTryPrefix(prefix_, shm_tries_), rank_, size_, opts_.shm_piece_bytes,
                               connectTimeout(opts_), vote);
    } catch (const ConfigError&) {
      if (opts_.shm == ShmMode::on) throw;
      all_local_ = false;  // e.g. not enough memory or another user: TCP from now on, on every rank
    }
  }
  return shm_.get();
}

bool Communicator::voteAll(bool ok, TrafficMeter& meter) {  // over TCP, whatever the options say
  int32_t v = ok ? 1 : 0;
  GlooExchange ex(*link_, meter, "setup", phase_, opts_.timeout, link_->nextSeq());
  allreduceHalvingDoubling(ex, Group::world(rank_, size_), reinterpret_cast<char*>(&v), 1, DType::i32, ReduceOp::min,
                           0, link_->scratch());
  return v == 1;
}

ShmDomain* Communicator::nodeShm() {
  if (node_shm_tried_ || opts_.shm == ShmMode::off) return node_shm_.get();
  node_shm_tried_ = true;
  const int gs = std::max(1, std::min(opts_.group_size, size_)), first = rank_ / gs * gs;
  if (gs < 2) return nullptr;
  for (int r = 0; r < size_; ++r)  // node_of_ is the same on every rank: so is this answer
    if (node_of_[r] != node_of_[r / gs * gs]) return nullptr;
  TrafficMeter setup;  // made at the first hierarchical call: like create()'s, not the user's traffic
  try {
    const std::string prefix = shmTryPrefix(prefix_ + "/node" + std::to_string(rank_ / gs), node_shm_tries_);
    node_shm_ = ShmDomain::create(*store_, prefix, rank_ - first, std::min(size_, first + gs) - first,
                                  opts_.shm_piece_bytes, connectTimeout(opts_), [&](bool ok) { return voteAll(ok, setup); });
  } catch (const ConfigError&) {
    // With shm = on every rank failed alike (the vote): each later call tries again and fails
    // the same way rather than falling back to TCP after a caught first error.
    if (opts_.shm == ShmMode::on) {
      node_shm_tried_ = false;
      throw;
    }
  }
  return node_shm_.get();
}

size_t Communicator::nodePiece() const { return node_shm_ ? node_shm_->piece() : 0; }

void Communicator::setPhase(const std::string& phase) { phase_ = phase; }
const std::string& Communicator::phase() const { return phase_; }

namespace {
struct Fingerprint {
  uint32_t magic;
  uint32_t op;
  uint64_t count;
  uint32_t dtype;
  int32_t extra;
};
}  // namespace

void Communicator::checkFingerprint(const char* op, size_t count, DType dt, int extra) {
  if (!opts_.debug_check || size_ == 1) return;
  uint32_t op_hash = 2166136261u;  // FNV-1a of the op name
  for (const char* c = op; *c; ++c) op_hash = (op_hash ^ static_cast<uint8_t>(*c)) * 16777619u;
  Fingerprint mine{0x4c434650u, op_hash, count, static_cast<uint32_t>(dt), extra};
  std::vector<Fingerprint> all(size_);
  all[rank_] = mine;
  {
    GlooExchange ex(*link_, *meter_, "fingerprint", phase_, opts_.timeout, link_->nextSeq());
    std::vector<size_t> off(size_ + 1);
    for (int i = 0; i <= size_; ++i) off[i] = i * sizeof(Fingerprint);
    ringAllgather(ex, Group::world(rank_, size_), reinterpret_cast<char*>(all.data()), off, 4096, 0);
  }
  bool same = true;
  for (const auto& f : all)
    same = same && f.magic == mine.magic && f.op == mine.op && f.count == mine.count && f.dtype == mine.dtype &&
           f.extra == mine.extra;
  if (same) return;
  std::string msg = std::string("collective mismatch detected by rank ") + std::to_string(rank_) + " calling " + op +
                    ": ranks called different collectives or arguments:";
  for (int i = 0; i < size_; ++i) {
    const auto& f = all[i];
    msg += "\n  rank " + std::to_string(i) + ": " + (f.op == mine.op ? op : "<other op>") +
           " count=" + std::to_string(f.count) + " dtype=" +
           (f.dtype <= static_cast<uint32_t>(DType::u8) ? dtypeName(static_cast<DType>(f.dtype)) : "?") +
           " arg=" + std::to_string(f.extra);
  }
  throw MismatchError(msg);
}

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
  CallRecord rec(trace_, "allreduce", count * es, dt, world_ranks_);
  if (rec.on()) {
    rec.args["algo"] = algoName(a);
    rec.args["segment"] = std::to_string(opts_.segment_bytes);
    if (a == Algo::hierarchical || a == Algo::rails) rec.args["group_size"] = std::to_string(opts_.group_size);
  }
  GlooExchange ex(*link_, *meter_, "allreduce", phase_, opts_.timeout, link_->nextSeq());
  const Group g = Group::world(rank_, size_);
  char* p = static_cast<char*>(buf);
  switch (a) {
    case Algo::halving_doubling: allreduceHalvingDoubling(ex, g, p, count, dt, op, 0, link_->scratch()); break;
    case Algo::hierarchical:
      if (node) {
        if (rec.on()) rec.args["node_piece"] = std::to_string(node->piece());  // the node's part in shared memory
        try {
          ShmNode mem(*node, *meter_, phase_, std::chrono::steady_clock::now() + opts_.timeout);
          allreduceHierarchicalNode(ex, g, opts_.group_size, mem, p, count, dt, op, opts_.segment_bytes,
                                    link_->scratch());
        } catch (const Error& e) {
          link_->poison(e.what());
          throw;
        }
      } else {
        allreduceHierarchical(ex, g, opts_.group_size, p, count, dt, op, opts_.segment_bytes, link_->scratch());
      }
      break;
    case Algo::rails: allreduceRails(ex, g, opts_.group_size, p, count, dt, op, opts_.segment_bytes, link_->scratch()); break;
    case Algo::shm: {
      const auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
      try {
        allreduceShm(*shmDomain(), p, count, dt, op, *meter_, phase_, deadline);
      } catch (const Error& e) {
        link_->poison(e.what());
        throw;
      }
      break;
    }
    case Algo::ordered: allreduceOrdered(ex, g, p, count, dt, op, opts_.segment_bytes, link_->scratch()); break;
    default: allreduceRing(ex, g, p, count, dt, op, opts_.segment_bytes, 0, link_->scratch()); break;
  }
  if (op == ReduceOp::avg) divideBy(buf, count, dt, size_);
}

void Communicator::broadcast(void* buf, size_t count, DType dt, int root, Algo algo) {
  if (root < 0 || root >= size_)
    throw ConfigError("broadcast: root " + std::to_string(root) + " is not a rank of this communicator (size " +
                      std::to_string(size_) + ")");
  if (algo != Algo::automatic && algo != Algo::tree && algo != Algo::chain)
    throw ConfigError(std::string("algorithm '") + algoName(algo) + "' cannot run broadcast (tree or chain)");
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
  const Group g = Group::world(rank_, size_);
  if (algo == Algo::chain) broadcastChain(ex, g, static_cast<char*>(buf), bytes, root, opts_.segment_bytes, 0);
  else broadcastTree(ex, g, static_cast<char*>(buf), bytes, root, opts_.segment_bytes, 0);
}

void Communicator::allgather(const void* send, void* recv, size_t count, DType dt, Algo algo) {
  allgatherv(send, count, recv, std::vector<size_t>(size_, count), dt, algo);
}

void Communicator::allgatherv(const void* send, size_t send_count, void* recv, const std::vector<size_t>& counts,
                              DType dt, Algo algo) {
  if (algo == Algo::automatic) algo = opts_.allgather_algo;
  if (!algoRuns("allgather", algo))
    throw ConfigError(std::string("algorithm '") + algoName(algo) + "' cannot run allgather (ring or hier)");
  if (algo == Algo::automatic) algo = autoAllgather(size_, opts_.group_size);
  if (algo == Algo::hierarchical && size_ > 1 && (opts_.group_size < 2 || opts_.group_size >= size_))
    throw ConfigError("algorithm 'hier' for allgather needs a group size between 2 and " + std::to_string(size_ - 1) +
                      " (ranks per node), got " + std::to_string(opts_.group_size));
  allgatherImpl(send, send_count, recv, counts, dt, "allgather", algo);
}

void Communicator::allgatherImpl(const void* send, size_t send_count, void* recv, const std::vector<size_t>& counts,
                                 DType dt, const char* op, Algo algo) {
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
    if (algo == Algo::hierarchical) rec.args["group_size"] = std::to_string(opts_.group_size);
  }
  GlooExchange ex(*link_, *meter_, op, phase_, opts_.timeout, link_->nextSeq());
  const Group g = Group::world(rank_, size_);
  if (algo == Algo::hierarchical) allgatherHierarchical(ex, g, opts_.group_size, out, off, opts_.segment_bytes);
  else ringAllgather(ex, g, out, off, opts_.segment_bytes, 0);
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
    ringReduceScatter(ex, Group::world(rank_, size_), work, off, dt, op,
                      segmentElems(opts_.segment_bytes, es, recv_count), 0,
                      link_->scratch().get(ringScratchBytes(off, es)));
    ex.waitAll();
  }
  if (!in_place) std::memcpy(recv, work + off[rank_] * es, recv_count * es);
  if (op == ReduceOp::avg) divideBy(recv, recv_count, dt, size_);
}

void Communicator::alltoall(const void* send, void* recv, size_t count, DType dt) {
  checkFingerprint("alltoall", count, dt, 0);
  CallRecord rec(trace_, "alltoall", size_ * count * dtypeSize(dt), dt, world_ranks_);
  GlooExchange ex(*link_, *meter_, "alltoall", phase_, opts_.timeout, link_->nextSeq());
  alltoallPairwise(ex, Group::world(rank_, size_), static_cast<const char*>(send), static_cast<char*>(recv),
                   count * dtypeSize(dt), 0);
}

void Communicator::barrier() {
  checkFingerprint("barrier", 0, DType::u8, 0);
  if (size_ == 1) return;
  CallRecord rec(trace_, "barrier", 0, DType::u8, world_ranks_);
  GlooExchange ex(*link_, *meter_, "barrier", phase_, opts_.timeout, link_->nextSeq());
  barrierDissemination(ex, Group::world(rank_, size_), 0);
}

void Communicator::send(const void* buf, size_t bytes, int dst, uint32_t tag) {
  if (dst < 0 || dst >= size_ || dst == rank_)
    throw ConfigError("send: destination rank " + std::to_string(dst) + " is not another rank of this communicator");
  CallRecord rec(trace_, "send", bytes, DType::u8, {}, "p2p");
  if (rec.on()) p2pArgs(rec, world_ranks_, {{dst, const_cast<void*>(buf), bytes}}, {}, tag, prefix_);
  GlooExchange ex(*link_, *meter_, "send", phase_, opts_.timeout, Link::kP2PSeq);
  ex.wait(ex.isend(dst, buf, bytes, (static_cast<uint64_t>(Link::kP2PSeq) << 32) | tag));
}

void Communicator::recv(void* buf, size_t bytes, int src, uint32_t tag) {
  if (src < 0 || src >= size_ || src == rank_)
    throw ConfigError("recv: source rank " + std::to_string(src) + " is not another rank of this communicator");
  CallRecord rec(trace_, "recv", bytes, DType::u8, {}, "p2p");
  if (rec.on()) p2pArgs(rec, world_ranks_, {}, {{src, buf, bytes}}, tag, prefix_);
  GlooExchange ex(*link_, *meter_, "recv", phase_, opts_.timeout, Link::kP2PSeq);
  ex.wait(ex.irecv(src, buf, bytes, (static_cast<uint64_t>(Link::kP2PSeq) << 32) | tag));
}

struct Communicator::Request::Impl {
  std::unique_ptr<GlooExchange> ex;
  int id = -1;
  int peer = -1;
  bool done = false;
  Trace* trace = nullptr;  // records the wait as a "wait" event naming `req` (its post's id)
  std::string req;
};

Communicator::Request::Request(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::Request::~Request() = default;

void Communicator::Request::wait() {
  if (impl_->done) return;
  CallRecord rec(impl_->trace, "wait", 0, DType::u8, {}, "p2p");
  if (rec.on()) rec.args["req"] = impl_->req;
  impl_->ex->wait(impl_->id);
  impl_->done = true;
}

bool Communicator::Request::done() const { return impl_->done; }
int Communicator::Request::peer() const { return impl_->peer; }

namespace {

// Posts one message on an exchange of its own (the request owns it until waited).
std::unique_ptr<Communicator::Request::Impl> postP2P(Link& link, TrafficMeter& meter, const std::string& phase,
                                                     std::chrono::milliseconds timeout, bool send, void* buf,
                                                     size_t bytes, int peer, uint32_t tag) {
  auto impl = std::make_unique<Communicator::Request::Impl>();
  impl->ex = std::make_unique<GlooExchange>(link, meter, send ? "send" : "recv", phase, timeout, Link::kP2PSeq);
  const uint64_t slot = (static_cast<uint64_t>(Link::kP2PSeq) << 32) | tag;
  impl->id = send ? impl->ex->isend(peer, buf, bytes, slot) : impl->ex->irecv(peer, buf, bytes, slot);
  impl->peer = peer;
  return impl;
}

// A posted request's id on its "isend"/"irecv" event and, later, on its "wait" event.
void traceRequest(CallRecord& rec, Communicator::Request::Impl& impl, Trace* trace, std::string req) {
  impl.trace = trace;
  impl.req = std::move(req);
  rec.args["req"] = impl.req;
}

}  // namespace

std::unique_ptr<Communicator::Request> Communicator::isend(const void* buf, size_t bytes, int dst, uint32_t tag) {
  if (dst < 0 || dst >= size_ || dst == rank_)
    throw ConfigError("isend: destination rank " + std::to_string(dst) + " is not another rank of this communicator");
  CallRecord rec(trace_, "isend", bytes, DType::u8, {}, "p2p");
  if (rec.on()) p2pArgs(rec, world_ranks_, {{dst, const_cast<void*>(buf), bytes}}, {}, tag, prefix_);
  auto impl = postP2P(*link_, *meter_, phase_, opts_.timeout, true, const_cast<void*>(buf), bytes, dst, tag);
  if (rec.on()) traceRequest(rec, *impl, trace_, prefix_ + "#" + std::to_string(p2p_requests_++));
  return std::make_unique<Request>(std::move(impl));
}

std::unique_ptr<Communicator::Request> Communicator::irecv(void* buf, size_t bytes, int src, uint32_t tag) {
  if (src < 0 || src >= size_ || src == rank_)
    throw ConfigError("irecv: source rank " + std::to_string(src) + " is not another rank of this communicator");
  CallRecord rec(trace_, "irecv", bytes, DType::u8, {}, "p2p");
  if (rec.on()) p2pArgs(rec, world_ranks_, {}, {{src, buf, bytes}}, tag, prefix_);
  auto impl = postP2P(*link_, *meter_, phase_, opts_.timeout, false, buf, bytes, src, tag);
  if (rec.on()) traceRequest(rec, *impl, trace_, prefix_ + "#" + std::to_string(p2p_requests_++));
  return std::make_unique<Request>(std::move(impl));
}

void Communicator::exchange(const std::vector<P2P>& sends, const std::vector<P2P>& recvs, uint32_t tag) {
  auto check = [&](const std::vector<P2P>& msgs, const char* what) {
    std::vector<bool> seen(size_, false);
    for (const auto& m : msgs) {
      if (m.peer < 0 || m.peer >= size_ || m.peer == rank_)
        throw ConfigError(std::string("exchange: ") + what + " rank " + std::to_string(m.peer) +
                          " is not another rank of this communicator");
      if (seen[m.peer])
        throw ConfigError(std::string("exchange: two ") + what + " messages with rank " + std::to_string(m.peer) +
                          " in one call");
      seen[m.peer] = true;
    }
  };
  check(sends, "send to");
  check(recvs, "receive from");
  size_t total = 0;
  for (const auto& m : sends) total += m.bytes;
  CallRecord rec(trace_, "exchange", total, DType::u8, {}, "p2p");
  if (rec.on()) p2pArgs(rec, world_ranks_, sends, recvs, tag, prefix_);
  GlooExchange ex(*link_, *meter_, "exchange", phase_, opts_.timeout, Link::kP2PSeq);
  const uint64_t slot = (static_cast<uint64_t>(Link::kP2PSeq) << 32) | tag;
  for (const auto& m : recvs) ex.irecv(m.peer, m.buf, m.bytes, slot);
  for (const auto& m : sends) ex.isend(m.peer, m.buf, m.bytes, slot);
  ex.waitAll();
}

int Communicator::recvAny(void* buf, size_t bytes, const std::vector<int>& srcs, uint32_t tag) {
  if (srcs.empty()) throw ConfigError("recvAny: no source rank given");
  for (int s : srcs)
    if (s < 0 || s >= size_ || s == rank_)
      throw ConfigError("recvAny: source rank " + std::to_string(s) + " is not another rank of this communicator");
  CallRecord rec(trace_, "recv_any", bytes, DType::u8, {}, "p2p");  // on the timeline, not replayable
  GlooExchange ex(*link_, *meter_, "recv", phase_, opts_.timeout, Link::kP2PSeq);
  const int req = ex.irecvAny(srcs, buf, bytes, (static_cast<uint64_t>(Link::kP2PSeq) << 32) | tag);
  ex.wait(req);
  return ex.peerOf(req);
}

std::shared_ptr<Communicator> Communicator::split(int color, int key) {
  std::vector<int32_t> mine = {color, key, rank_};
  std::vector<int32_t> all(3 * size_);
  allgatherImpl(mine.data(), 3, all.data(), std::vector<size_t>(size_, 3), DType::i32, "setup", Algo::ring);
  const uint64_t id = splits_++;
  if (color < 0) return nullptr;
  std::vector<std::pair<int, int>> members;  // (key, rank)
  for (int i = 0; i < size_; ++i)
    if (all[3 * i] == color) members.emplace_back(all[3 * i + 1], all[3 * i + 2]);
  std::sort(members.begin(), members.end());
  int new_rank = 0;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i].second == rank_) new_rank = static_cast<int>(i);
  const int new_size = static_cast<int>(members.size());
  const std::string prefix = prefix_ + "/split" + std::to_string(id) + "/color" + std::to_string(color);
  std::shared_ptr<Communicator> child(new Communicator(
      store_, prefix, new_rank, new_size, opts_, meter_,
      connectLink(store_, prefix, new_rank, new_size, link_->device(), opts_.auth_token, connectTimeout(opts_))));
  // The child's own locality exchange is metered: classify its peers from what this one knows.
  std::vector<bool> same(new_size);
  for (int i = 0; i < new_size; ++i) same[i] = link_->sameHost(members[i].second) || members[i].second == rank_;
  child->link_->setSameHost(std::move(same));
  child->detectLocality();
  child->trace_ = trace_;
  // Ranks of the root communicator, for the timeline (empty: all of the root's, in its order).
  bool identity = true;
  std::vector<int> roots(new_size);
  for (int i = 0; i < new_size; ++i) {
    const int parent = members[i].second;
    roots[i] = world_ranks_.empty() ? parent : world_ranks_[parent];
    identity = identity && roots[i] == i;
  }
  if (!(identity && new_size == size_ && world_ranks_.empty())) child->world_ranks_ = std::move(roots);
  return child;
}

// The child's locality exchange runs over 2n ranks, so both roles of a process join at once.
std::shared_ptr<Communicator> Communicator::joinRole(const std::string& prefix, int rank, int size) {
  std::shared_ptr<Communicator> child(
      new Communicator(store_, prefix, rank, size, opts_, meter_,
                       connectLink(store_, prefix, rank, size, link_->device(), opts_.auth_token, connectTimeout(opts_))));
  std::vector<bool> same(size);
  for (int i = 0; i < size; ++i) same[i] = link_->sameHost(i % size_) || i % size_ == rank_;
  child->link_->setSameHost(std::move(same));
  child->detectLocality();
  // Not traced: 2n ranks in n processes have no place on a per-process timeline.
  return child;
}

std::pair<std::shared_ptr<Communicator>, std::shared_ptr<Communicator>> Communicator::splitRoles() {
  const std::string prefix = prefix_ + "/roles" + std::to_string(splits_++);
  std::shared_ptr<Communicator> second;
  std::exception_ptr error;
  std::thread other([&] {
    try {
      second = joinRole(prefix, size_ + rank_, 2 * size_);
    } catch (...) {
      error = std::current_exception();
    }
  });
  std::shared_ptr<Communicator> first;
  try {
    first = joinRole(prefix, rank_, 2 * size_);
  } catch (...) {
    other.join();
    throw;
  }
  other.join();
  if (error) std::rethrow_exception(error);
  return {first, second};
}

}  // namespace lowcomm::comm
