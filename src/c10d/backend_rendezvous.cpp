#include "lowcomm/c10d/backend_rendezvous.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "lowcomm/base/error.h"
#include "lowcomm/net/rdzv_store.h"
#include "lowcomm/runtime/launcher_watch.h"
#include "lowcomm/runtime/worker.h"

#include "arg_checks.h"

namespace lowcomm::torchdist {

namespace {

// Public on purpose: LOWCOMM_INSECURE=1 means "authenticate nobody", and says so.
constexpr const char* kInsecureToken = "lowcomm-insecure-mode-public-token";

// What every lowcomm group of this process shares. Never destroyed: the store must serve the
// other ranks until this process ends, and the watch may end it from its own thread.
struct JobState {
  std::mutex mu;
  std::string token;
  std::unique_ptr<runtime::LauncherWatch> watch;
  std::unique_ptr<net::RdzvServer> server;   // global rank 0
  std::shared_ptr<net::MemoryStore> local;  // a job of one rank
  std::map<std::string, int> made;          // groups made per torch group name
};

JobState& job() {
  static JobState* state = new JobState;
  return *state;
}

// torch's PrefixStore keeps its prefix protected; a pointer to member formed through a derived
// class reads it without copying the store.
struct PrefixPeek : c10d::PrefixStore {
  static const std::string& prefixOf(const c10d::PrefixStore& s) { return s.*(&PrefixPeek::prefix_); }
};

bool insecure() {
  const char* v = std::getenv("LOWCOMM_INSECURE");
  if (!v || !*v || std::string(v) == "0") return false;
  if (std::string(v) == "1") return true;
  throw ConfigError(std::string("environment variable LOWCOMM_INSECURE='") + v + "': expected 1 or 0");
}

int portVar(const char* name) {
  const char* v = std::getenv(name);
  char* end = nullptr;
  const long p = v && *v ? std::strtol(v, &end, 10) : -1;
  if (!v || !*v || *end != '\0' || p < 1 || p > 65535)
    throw ConfigError(std::string("lowcomm backend: environment variable ") + name + (v ? "='" + std::string(v) + "'" : "") +
                      (v ? " is not a TCP port" : " is not set") +
                      " (the backend's authenticated store listens at MASTER_ADDR:LOWCOMM_RDZV_PORT, default "
                      "MASTER_PORT + 1)");
  return static_cast<int>(p);
}

// MASTER_ADDR and LOWCOMM_RDZV_PORT (else MASTER_PORT + 1).
std::pair<std::string, int> storeAddress() {
  const char* addr = std::getenv("MASTER_ADDR");
  if (!addr || !*addr)
    throw ConfigError("lowcomm backend: environment variable MASTER_ADDR is not set (the backend's authenticated "
                      "store listens at MASTER_ADDR:LOWCOMM_RDZV_PORT, default MASTER_PORT + 1; an init_method "
                      "alone is not enough)");
  if (const char* p = std::getenv("LOWCOMM_RDZV_PORT"); p && *p) return {addr, portVar("LOWCOMM_RDZV_PORT")};
  const int master = portVar("MASTER_PORT");
  if (master == 65535) throw ConfigError("lowcomm backend: MASTER_PORT=65535 leaves no MASTER_PORT + 1: set LOWCOMM_RDZV_PORT");
  return {addr, master + 1};
}

long launcherPid() {
  const long pid = runtime::launcherPidFromEnv();
  if (pid) return pid;
  const char* torchrun = std::getenv("TORCHELASTIC_RUN_ID");
  return torchrun && *torchrun ? static_cast<long>(::getppid()) : 0;
}

std::shared_ptr<net::Store> connect(const std::string& host, int port, const std::string& token,
                                    std::chrono::milliseconds timeout) {
  try {
    return std::make_shared<net::RdzvClient>(host, port, token, timeout);
  } catch (const TimeoutError& e) {
    throw TimeoutError(std::string("lowcomm backend: ") + e.what() +
                       " (global rank 0 hosts the backend's store from its first lowcomm group on)");
  }
}

}  // namespace

std::string torchGroupName(const c10::intrusive_ptr<c10d::Store>& store) {
  const auto* prefixed = dynamic_cast<const c10d::PrefixStore*>(store.get());
  if (!prefixed)
    throw ConfigError(where("create_process_group") +
                      "expected the PrefixStore torch.distributed hands a backend (init_process_group, new_group)");
  return PrefixPeek::prefixOf(*prefixed);
}

std::string backendJobToken(int global_size) {
  const char* t = std::getenv("LOWCOMM_JOB_TOKEN");
  if ((t && *t) || global_size == 1) return runtime::jobTokenFromEnv(global_size);
  if (insecure()) {
    std::fprintf(stderr,
                 "lowcomm backend: WARNING: LOWCOMM_INSECURE=1 and no LOWCOMM_JOB_TOKEN: this job is not "
                 "authenticated; any process that reaches MASTER_ADDR can join it, read and alter its tensors\n");
    std::fflush(stderr);
    return kInsecureToken;
  }
  throw ConfigError(
      "lowcomm backend: environment variable LOWCOMM_JOB_TOKEN is not set: `lowcomm launch` sets it; under "
      "torchrun, srun or mpirun export the same secret on every rank, e.g. "
      "LOWCOMM_JOB_TOKEN=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \\n'), or set LOWCOMM_INSECURE=1 to run "
      "without authentication");
}

c10::intrusive_ptr<ProcessGroupLowcomm> createAuthenticatedGroup(const GroupSpec& g) {
  checkGroupArgs(g.rank, g.size, g.global_rank, g.global_size, g.timeout);
  comm::CommOptions opts = commOptionsFromEnv(g.timeout);
  JobState& state = job();
  std::shared_ptr<net::Store> base;
  std::string space, token, host;
  int port = 0;
  {
    std::lock_guard<std::mutex> lock(state.mu);
    if (!state.watch)
      state.watch = std::make_unique<runtime::LauncherWatch>(launcherPid(),
                                                             "lowcomm backend, rank " + std::to_string(g.global_rank));
    if (state.token.empty()) state.token = backendJobToken(g.global_size);
    token = state.token;
    if (g.global_size == 1) {
      if (!state.local) state.local = std::make_shared<net::MemoryStore>();
      base = state.local;
    } else {
      std::tie(host, port) = storeAddress();
      if (g.global_rank == 0 && !state.server) state.server = std::make_unique<net::RdzvServer>(host, port, token);
    }
    space = "torch-pg/" + g.name + "/" + std::to_string(state.made[g.name]++);
  }
  if (!base) base = connect(host, port, token, opts.connect_timeout.count() ? opts.connect_timeout : opts.timeout);
  opts.auth_token = token;
  return ProcessGroupLowcomm::create(std::make_shared<net::PrefixStore>(base, space), g.rank, g.size, opts);
}

}  // namespace lowcomm::torchdist
