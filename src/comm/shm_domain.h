// Shared-memory domain of a communicator whose ranks all run on one host (private to comm).
//
// Layout of the segment: a header (magic, size, each rank's pid), then per rank two
// cache-line-separated epoch flags (`arrive`, `done`), then two input slots per rank and two
// result buffers, each `piece` bytes (double buffering by epoch parity).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "lowcomm/net/shm.h"
#include "lowcomm/net/store.h"

namespace lowcomm::comm {

class AbortState;

class ShmDomain {
 public:
  // Collective over the communicator's ranks: rank 0 creates the segment and publishes its
  // name in the store, the others map it; `all_ok(mine)` (a collective AND over ranks) says
  // whether every rank succeeded, then rank 0 removes the name. Throws ConfigError on every
  // rank when any rank failed. With `abort`, the wait for rank 0's name ends with AbortedError
  // within 20 ms of its trigger (a store's get cannot be woken).
  static std::unique_ptr<ShmDomain> create(net::Store& store, const std::string& prefix, int rank, int n,
                                           size_t piece_bytes, std::chrono::milliseconds timeout,
                                           const std::function<bool(bool)>& all_ok,
                                           const AbortState* abort = nullptr);

  // Waits end with AbortedError within 20 ms of abort's trigger (abort.h); it must outlive this.
  void setAbort(const AbortState* abort) { abort_ = abort; }
  int rank() const { return rank_; }
  int size() const { return n_; }
  size_t piece() const { return piece_; }
  char* slot(int r, uint64_t epoch) const;
  char* result(uint64_t epoch) const;
  uint64_t nextEpoch() { return ++epoch_; }

  void arrive(uint64_t epoch) { flag(rank_, 0).store(epoch, std::memory_order_release); }
  void done(uint64_t epoch) { flag(rank_, 1).store(epoch, std::memory_order_release); }
  // Wait until every rank's flag reached `epoch`. A dead peer gives PeerError naming it, the
  // deadline TimeoutError naming the rank still waited for.
  void waitArrived(uint64_t epoch, std::chrono::steady_clock::time_point deadline, const char* op) {
    waitAll(0, epoch, deadline, op);
  }
  void waitDone(uint64_t epoch, std::chrono::steady_clock::time_point deadline, const char* op) {
    waitAll(1, epoch, deadline, op);
  }

 private:
  ShmDomain(net::ShmSegment seg, int rank, int n, size_t piece);
  std::atomic<uint64_t>& flag(int r, int which) const;
  void waitAll(int which, uint64_t epoch, std::chrono::steady_clock::time_point deadline, const char* op);

  net::ShmSegment seg_;
  int rank_, n_;
  size_t piece_;
  size_t flags_at_, slots_at_, results_at_;
  uint64_t epoch_ = 0;
  const AbortState* abort_ = nullptr;
};

}  // namespace lowcomm::comm
