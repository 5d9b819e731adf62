#include "shm_domain.h"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <random>
#include <thread>

#include "abort.h"
#include "lowcomm/base/error.h"
#include "lowcomm/base/proc.h"

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

bool gone(int pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

// A zombie is dead too (lowcomm launch keeps exited workers as zombies until the end). A stat
// file that cannot be read means dead only if the process is gone by now (it may have been
// reaped while it was read; an unreadable stat of a live process, e.g. under hidepid, is alive).
bool alive(int pid) {
  if (pid <= 0) return true;
  if (gone(pid)) return false;
  const char state = processStateOf(pid);
  if (state == '\0') return !gone(pid);
  return state != 'Z' && state != 'X';
}
}  // namespace

ShmDomain::ShmDomain(net::ShmSegment seg, int rank, int n, size_t piece)
    : seg_(std::move(seg)), rank_(rank), n_(n), piece_(piece) {
  flags_at_ = alignUp(sizeof(Header), kLine);
  slots_at_ = alignUp(flags_at_ + static_cast<size_t>(n) * 2 * kLine, 4096);
  results_at_ = slots_at_ + static_cast<size_t>(n) * 2 * piece;
}

std::unique_ptr<ShmDomain> ShmDomain::create(net::Store& store, const std::string& prefix, int rank, int n,
                                             size_t piece, std::chrono::milliseconds timeout,
                                             const std::function<bool(bool)>& all_ok, const AbortState* abort) {
  LC_ENFORCE(n >= 1 && n <= kMaxRanks, "shared-memory domain of ", n, " ranks");
  piece = alignUp(std::max<size_t>(piece, 4096), 4096);
  const size_t bytes = alignUp(alignUp(sizeof(Header), kLine) + static_cast<size_t>(n) * 2 * kLine, 4096) +
                       (static_cast<size_t>(n) * 2 + 2) * piece;
  net::ShmSegment seg;
  std::string error;
  // Rank 0 always publishes a name, empty when it could not create the segment, so nobody
  // waits for it; every rank then votes, and one failure anywhere means nobody uses it.
  try {
    if (rank == 0) {
      try {
        seg = net::ShmSegment::create("lowcomm-shm", bytes);
      } catch (...) {
        store.set(prefix + "/shm/name", net::Bytes{});
        throw;
      }
      auto* h = reinterpret_cast<Header*>(seg.data());
      h->n = n;
      h->piece = piece;
      h->magic.store(kMagic, std::memory_order_release);
      store.set(prefix + "/shm/name", net::toBytes(seg.name()));
    } else {
      const std::string key = prefix + "/shm/name";
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      while (abort && !store.check(key) && std::chrono::steady_clock::now() < deadline) {
        abort->check("shared memory setup");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      const std::string name = net::toString(store.get(key, timeout));
      if (name.empty()) throw ConfigError("shared memory: rank 0 could not create the segment");
      seg = net::ShmSegment::open(name, bytes);
      auto* h = reinterpret_cast<Header*>(seg.data());
      if (h->magic.load(std::memory_order_acquire) != kMagic || h->n != n || h->piece != piece)
        throw ConfigError("shared memory: segment '" + name + "' does not match this communicator");
    }
    reinterpret_cast<Header*>(seg.data())->pid[rank] = ::getpid();
  } catch (const AbortedError&) {
    throw;  // the vote would be aborted too
  } catch (const Error& e) {
    error = e.what();
  }
  const bool ok = all_ok(error.empty());  // collective: also the "everyone has mapped it" barrier
  seg.unlink();
  if (!ok) throw ConfigError(error.empty() ? "shared memory: another rank could not map the segment" : error);
  return std::unique_ptr<ShmDomain>(new ShmDomain(std::move(seg), rank, n, piece));
}

char* ShmDomain::slot(int r, uint64_t epoch) const {
  return seg_.data() + slots_at_ + (static_cast<size_t>(r) * 2 + (epoch & 1)) * piece_;
}

char* ShmDomain::result(uint64_t epoch) const { return seg_.data() + results_at_ + (epoch & 1) * piece_; }

std::atomic<uint64_t>& ShmDomain::flag(int r, int which) const {
  return *reinterpret_cast<std::atomic<uint64_t>*>(seg_.data() + flags_at_ + (static_cast<size_t>(r) * 2 + which) * kLine);
}

// Spin briefly, then yield for up to 1 ms (ranks usually outnumber cores here), then sleep
// in 50 us steps, checking the deadline each step and the abort flag and the peer's liveness
// every 20 ms.
void ShmDomain::waitAll(int which, uint64_t epoch, std::chrono::steady_clock::time_point deadline, const char* op) {
  using Clock = std::chrono::steady_clock;
  const auto* h = reinterpret_cast<const Header*>(seg_.data());
  for (int j = 0; j < n_; ++j) {
    if (j == rank_) continue;
    auto& f = flag(j, which);
    Clock::time_point start{}, next_check{};
    for (uint32_t spins = 0; f.load(std::memory_order_acquire) < epoch; ++spins) {
      if (spins < 64) {
        __builtin_ia32_pause();
        continue;
      }
      const auto now = Clock::now();
      if (spins == 64) start = next_check = now;
      if (now - start < std::chrono::milliseconds(1)) {
        sched_yield();
        continue;
      }
      if (now > deadline)
        throw TimeoutError(std::string(op) + " (shared memory, rank " + std::to_string(rank_) +
                           "): timed out waiting for rank " + std::to_string(j) + " (peer dead or stuck?)");
      if (now >= next_check) {
        if (abort_ && abort_->aborted())
          abort_->raise(std::string(op) + " (shared memory, rank " + std::to_string(rank_) + ")");
        if (!alive(h->pid[j]))
          throw PeerError(j, std::string(op) + " (shared memory, rank " + std::to_string(rank_) + "): rank " +
                                 std::to_string(j) + " (pid " + std::to_string(h->pid[j]) + ") died");
        next_check = now + std::chrono::milliseconds(20);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace lowcomm::comm
