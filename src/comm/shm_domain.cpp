#include "shm_domain.h"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <random>
#include <thread>

#include "lowcomm/base/error.h"

namespace lowcomm::comm {

namespace {
constexpr uint64_t kMagic = 0x6c6f77636f6d6d31ull;  // "lowcomm1"
constexpr size_t kLine = 64;
constexpr int kMaxRanks = 1024;

struct Header {
  std::atomic<uint64_t> magic;
  int32_t n;
  uint64_t piece;
  int32_t pid[kMaxRanks];
};

size_t alignUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

bool alive(int pid) { return pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH; }
}  // namespace

ShmDomain::ShmDomain(net::ShmSegment seg, int rank, int n, size_t piece)
    : seg_(std::move(seg)), rank_(rank), n_(n), piece_(piece) {
  flags_at_ = alignUp(sizeof(Header), kLine);
  slots_at_ = alignUp(flags_at_ + static_cast<size_t>(n) * 2 * kLine, 4096);
  results_at_ = slots_at_ + static_cast<size_t>(n) * 2 * piece;
}

std::unique_ptr<ShmDomain> ShmDomain::create(net::Store& store, const std::string& prefix, int rank, int n,
                                             size_t piece, std::chrono::milliseconds timeout,
                                             const std::function<void()>& barrier) {
  LC_ENFORCE(n >= 1 && n <= kMaxRanks, "shared-memory domain of ", n, " ranks");
  piece = alignUp(std::max<size_t>(piece, 4096), 4096);
  const size_t bytes = alignUp(alignUp(sizeof(Header), kLine) + static_cast<size_t>(n) * 2 * kLine, 4096) +
                       (static_cast<size_t>(n) * 2 + 2) * piece;
  net::ShmSegment seg;
  if (rank == 0) {
    std::random_device rd;
    const std::string name = "/lowcomm-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
    seg = net::ShmSegment::create(name, bytes);
    auto* h = reinterpret_cast<Header*>(seg.data());
    h->n = n;
    h->piece = piece;
    h->magic.store(kMagic, std::memory_order_release);
    store.set(prefix + "/shm/name", net::toBytes(name));
  } else {
    const std::string name = net::toString(store.get(prefix + "/shm/name", timeout));
    seg = net::ShmSegment::open(name, bytes);
    auto* h = reinterpret_cast<Header*>(seg.data());
    if (h->magic.load(std::memory_order_acquire) != kMagic || h->n != n || h->piece != piece)
      throw ConfigError("shared memory: segment '" + name + "' does not match this communicator");
  }
  reinterpret_cast<Header*>(seg.data())->pid[rank] = ::getpid();
  barrier();  // everyone has mapped it (and written its pid)
  seg.unlink();
  return std::unique_ptr<ShmDomain>(new ShmDomain(std::move(seg), rank, n, piece));
}

char* ShmDomain::slot(int r, uint64_t epoch) const {
  return seg_.data() + slots_at_ + (static_cast<size_t>(r) * 2 + (epoch & 1)) * piece_;
}

char* ShmDomain::result(uint64_t epoch) const { return seg_.data() + results_at_ + (epoch & 1) * piece_; }

std::atomic<uint64_t>& ShmDomain::flag(int r, int which) const {
  return *reinterpret_cast<std::atomic<uint64_t>*>(seg_.data() + flags_at_ + (static_cast<size_t>(r) * 2 + which) * kLine);
}

// Spin briefly, then yield (ranks usually outnumber cores here), then sleep; only in the
// sleeping phase are the deadline and the peers' liveness checked.
void ShmDomain::waitAll(int which, uint64_t epoch, std::chrono::steady_clock::time_point deadline, const char* op) {
  const auto* h = reinterpret_cast<const Header*>(seg_.data());
  for (int j = 0; j < n_; ++j) {
    if (j == rank_) continue;
    auto& f = flag(j, which);
    for (uint32_t spins = 0; f.load(std::memory_order_acquire) < epoch; ++spins) {
      if (spins < 64) {
        __builtin_ia32_pause();
      } else if (spins < 20000) {
        sched_yield();
      } else {
        if (!alive(h->pid[j]))
          throw PeerError(j, std::string(op) + " (shared memory, rank " + std::to_string(rank_) + "): rank " +
                                 std::to_string(j) + " (pid " + std::to_string(h->pid[j]) + ") died");
        if (std::chrono::steady_clock::now() > deadline)
          throw TimeoutError(std::string(op) + " (shared memory, rank " + std::to_string(rank_) +
                             "): timed out waiting for rank " + std::to_string(j) + " (peer dead or stuck?)");
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }
}

}  // namespace lowcomm::comm
