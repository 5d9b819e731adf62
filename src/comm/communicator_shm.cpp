// The communicator's shared memory (lowcomm/comm/communicator.h): the all-local segment of the
// shm allreduce and each hierarchical group's node segment, mapped collectively on first use.
#include <algorithm>

#include "lowcomm/comm/algorithms.h"
#include "link.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/communicator.h"
#include "shm_domain.h"

namespace lowcomm::comm {

// A failed try's keys stay in the store (rank 0's empty segment name among them): every try has
// its own, the same on every rank since all of them failed alike (the vote).
std::string Communicator::shmTryPrefix(const std::string& base, int& tries) {
  const int t = tries++;
  return t == 0 ? base : base + "/try" + std::to_string(t);
}

ShmDomain* Communicator::shmDomain() {
  if (!shm_ && all_local_) {
    link_->abortState().check("shared memory setup");
    auto vote = [this](bool ok) { return voteAll(ok, *meter_); };
    try {
      shm_ = ShmDomain::create(*store_, shmTryPrefix(prefix_, shm_tries_), rank_, size_, opts_.shm_piece_bytes,
                               opts_.rendezvousTimeout(), vote, &link_->abortState());
    } catch (const ConfigError&) {
      if (opts_.shm == ShmMode::on) throw;
      all_local_ = false;  // e.g. not enough memory or another user: TCP from now on, on every rank
    }
    if (shm_) shm_->setAbort(&link_->abortState());
  }
  return shm_.get();
}

bool Communicator::voteAll(bool ok, TrafficMeter& meter) {  // over TCP, whatever the options say
  int32_t v = ok ? 1 : 0;
  GlooExchange ex(*link_, meter, "setup", phase_, opts_.timeout, link_->nextSeq());
  AllreduceOptions o;
  o.buf = reinterpret_cast<char*>(&v);
  o.count = 1;
  o.dt = DType::i32;
  o.op = ReduceOp::min;
  o.scratch = &link_->scratch();
  allreduceHalvingDoubling(ex, Group::world(rank_, size_), o);
  return v == 1;
}

ShmDomain* Communicator::nodeShm() {
  if (node_shm_tried_ || opts_.shm == ShmMode::off) return node_shm_.get();
  link_->abortState().check("shared memory setup");
  node_shm_tried_ = true;
  const int gs = std::max(1, std::min(opts_.group_size, size_)), first = rank_ / gs * gs;
  if (gs < 2) return nullptr;
  for (int r = 0; r < size_; ++r)  // the node of every rank is the same on every rank: so is this answer
    if (topology_.node_of[r] != topology_.node_of[r / gs * gs]) return nullptr;
  TrafficMeter setup;  // made at the first hierarchical call: like create()'s, not the user's traffic
  try {
    const std::string prefix = shmTryPrefix(prefix_ + "/node" + std::to_string(rank_ / gs), node_shm_tries_);
    node_shm_ = ShmDomain::create(*store_, prefix, rank_ - first, std::min(size_, first + gs) - first,
                                  opts_.shm_piece_bytes, opts_.rendezvousTimeout(), [&](bool ok) { return voteAll(ok, setup); },
                                  &link_->abortState());
    if (node_shm_) node_shm_->setAbort(&link_->abortState());
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

}  // namespace lowcomm::comm
