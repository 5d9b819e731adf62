#include "dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <string>
#include <thread>

#include "all_ranks.h"
#include "lowcomm/base/error.h"

namespace lowcomm::train {

namespace fs = std::filesystem;

namespace {

std::string hostName() {
  char h[256] = {};
  if (::gethostname(h, sizeof(h) - 1) != 0) return "?";
  return h;
}

// What the holder wrote into the lock file ("pid P host H"). It writes right after taking the
// lock: an empty file is read again for a moment.
std::string holderOf(int fd) {
  for (int tries = 0; tries < 20; ++tries) {
    char buf[512] = {};
    const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    std::string s(buf, n > 0 ? static_cast<size_t>(n) : 0);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
    if (!s.empty()) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "an unknown process";
}

// Creates `dir` and takes the lock `dir`/`name`; ConfigError naming `what` (the config key) and the
// holder when another process holds it.
int lockIn(const fs::path& dir, const std::string& name, const std::string& what) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw ConfigError("cannot create " + what + " '" + dir.string() + "': " + ec.message());
  const std::string path = (dir / name).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw ConfigError("cannot create the lock file '" + path + "' in " + what + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = err == EWOULDBLOCK ? holderOf(fd) : "";
    ::close(fd);
    if (err != EWOULDBLOCK) throw ConfigError("cannot lock '" + path + "': " + std::strerror(err));
    throw ConfigError(what + " '" + dir.string() + "' is in use by another job: " + holder + " holds '" + path +
                      "' (wait for that job to end, or give this run another " + what + ")");
  }
  const std::string me = "pid " + std::to_string(::getpid()) + " host " + hostName() + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const int err = errno;
    ::close(fd);
    throw ConfigError("cannot write the lock file '" + path + "': " + std::strerror(err));
  }
  return fd;
}

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Regular files in `dir` that `stale` accepts; a name that is not a regular file is left alone.
template <typename Pred>
void removeStale(const fs::path& dir, Pred stale) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!stale(name) || !e.is_regular_file(ec)) continue;
    if (::unlink(e.path().c_str()) != 0 && errno != ENOENT)
      throw IoError("cannot remove the stale temporary file '" + e.path().string() + "': " + std::strerror(errno));
  }
}

}  // namespace

DirLocks::DirLocks(comm::Communicator& world, const fs::path& out_dir, const fs::path& ckpt_dir) {
  const int rank = world.rank();
  std::exception_ptr error;
  try {
    if (rank == 0) fds_.push_back(lockIn(out_dir, "lowcomm.lock", "logging.out_dir"));
    fds_.push_back(lockIn(ckpt_dir, "rank" + std::to_string(rank) + ".lock", "checkpoint directory"));
    const std::string mine = ".rank" + std::to_string(rank) + ".pt.tmp";
    removeStale(ckpt_dir, [&](const std::string& n) { return n.rfind("step", 0) == 0 && endsWith(n, mine); });
    if (rank == 0) {
      removeStale(ckpt_dir, [](const std::string& n) { return n == "latest.tmp"; });
      removeStale(out_dir, [](const std::string& n) {
        return n == "config.toml.tmp" || n == "metrics.jsonl.tmp" || n == "summary.json.tmp" || n == "model_state.pt.tmp";
      });
    }
  } catch (...) {
    error = std::current_exception();
  }
  try {  // no rank starts writing while another gave up
    throwIfAnyRankFailed(world, error, "locking the output directories");
  } catch (...) {
    release();  // a constructor that throws runs no destructor
    throw;
  }
}

DirLocks::~DirLocks() { release(); }

void DirLocks::release() {
  for (int fd : fds_) ::close(fd);
  fds_.clear();
}

}  // namespace lowcomm::train
