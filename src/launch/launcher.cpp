// launch(): spawn the workers, forward their output line by line, supervise them.
//
// One thread does everything: a poll() loop over the workers' pipes and a self-pipe fed by the
// forwarded-signal handler, with a short tick to notice exits (waitid WNOHANG). Exits are
// observed with WNOWAIT and the zombies are reaped only at the very end: a zombie keeps its
// pid, hence its process group id, reserved, so signalling a worker's group can never hit an
// unrelated process that reused the number.
#include "lowcomm/launch/launcher.h"

#include <dirent.h>
#include <thread>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lowcomm/base/error.h"
#include "lowcomm/base/exit_status.h"
#include "lowcomm/base/proc.h"
#include "lowcomm/launch/cluster.h"
#include "wire_report.h"

extern char** environ;

namespace lowcomm::launch {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxProcs = 1024;
constexpr auto kTick = std::chrono::milliseconds(50);             // exit-detection latency
constexpr auto kDrainAfterExit = std::chrono::milliseconds(500);  // orphans holding a pipe
constexpr size_t kMaxLine = 64 * 1024;  // longer unterminated output is forwarded in pieces

const char* const kTorchrunVars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                     "MASTER_ADDR", "MASTER_PORT", "LOWCOMM_PROCS_ON_HOST", "LOWCOMM_LAUNCHER_PID"};

// Signals sent to the launcher that are passed on to every worker (torchrun's set).
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

std::string signalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);  // glibc >= 2.32
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string plural(size_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Both ends close-on-exec so no worker inherits another worker's pipe (it would hold it open
// and delay EOF); the read end non-blocking so a drain can never block.
void makePipe(UniqueFd& read_end, UniqueFd& write_end) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw Error(std::string("pipe2: ") + std::strerror(errno));
  read_end.reset(p[0]);
  write_end.reset(p[1]);
  ::fcntl(p[0], F_SETFL, ::fcntl(p[0], F_GETFL) | O_NONBLOCK);
}

// --- Signal forwarding: the one piece of process-wide state. ---
// A signal handler can reach launch() only through a global. It holds the write end of a
// self-pipe while a launch() runs (-1 otherwise); the handler only write()s the signal number
// there (async-signal-safe) and the poll loop does the forwarding.
std::atomic<int> g_signal_pipe{-1};
static_assert(std::atomic<int>::is_always_lock_free, "used from a signal handler");

extern "C" void onLauncherSignal(int sig) {
  const int saved_errno = errno;
  const int fd = g_signal_pipe.load();
  if (fd >= 0) {
    const unsigned char byte = static_cast<unsigned char>(sig);
    [[maybe_unused]] ssize_t n = ::write(fd, &byte, 1);  // pipe full: the signal is a repeat
  }
  errno = saved_errno;
}

// Installs the handlers for its lifetime and restores the previous ones after.
class SignalForwarding {
 public:
  SignalForwarding() {
    makePipe(read_, write_);
    ::fcntl(write_.get(), F_SETFL, ::fcntl(write_.get(), F_GETFL) | O_NONBLOCK);
    int expected = -1;
    if (!g_signal_pipe.compare_exchange_strong(expected, write_.get()))
      throw Error("another launch() is already running in this process");
    struct sigaction sa {};
    sa.sa_handler = onLauncherSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < std::size(kForwardedSignals); ++i)
      ::sigaction(kForwardedSignals[i], &sa, &old_[i]);
  }
  ~SignalForwarding() {
    for (size_t i = 0; i < std::size(kForwardedSignals); ++i)
      ::sigaction(kForwardedSignals[i], &old_[i], nullptr);
    g_signal_pipe.store(-1);  // a handler already past its load() may still write: fds close last
  }
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;

  int fd() const { return read_.get(); }

  // Signals received since the last call, oldest first.
  std::vector<int> take() {
    std::vector<int> sigs;
    unsigned char buf[64];
    ssize_t n;
    while ((n = ::read(read_.get(), buf, sizeof(buf))) > 0) sigs.insert(sigs.end(), buf, buf + n);
    return sigs;
  }

 private:
  UniqueFd read_, write_;
  struct sigaction old_[std::size(kForwardedSignals)] {};
};

// One of a worker's output pipes with the bytes after its last newline.
struct OutStream {
  int rank = 0;
  bool is_err = false;
  UniqueFd fd;  // read end; closed at EOF
  std::string partial;
};

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  bool exited = false;  // observed (WNOWAIT), reaped only in ~Supervisor
  int exit_code = 0;    // exit status, or 128+signal
  OutStream out, err;
};

void validate(const LaunchOptions& o) {
  if (o.nproc < 1 || o.nproc > kMaxProcs)
    throw ConfigError("nproc must be in 1.." + std::to_string(kMaxProcs) + ", got " +
                      std::to_string(o.nproc));
  if (o.command.empty() || o.command[0].empty())
    throw ConfigError("no worker command given (expected `-- CMD ARGS...`)");
  if (o.master_addr.empty()) throw ConfigError("master address is empty");
  if (o.master_port < 0 || o.master_port > 65535)
    throw ConfigError("master port must be in 0..65535, got " + std::to_string(o.master_port));
  if (o.grace.count() < 0) throw ConfigError("grace period must not be negative");
  for (const auto& [key, value] : o.extra_env) {
    if (key.empty() || key.find('=') != std::string::npos)
      throw ConfigError("invalid environment variable name '" + key + "'");
    for (const char* reserved : kTorchrunVars)
      if (key == reserved)
        throw ConfigError(key + " is set by the launcher for each rank; it cannot be an extra "
                          "environment variable");
  }
}

// Runs one launch; its destructor guarantees no worker outlives it (SIGKILL + reap).
class Supervisor {
 public:
  Supervisor(const LaunchOptions& opts, const std::string& master_addr, int port, const Cluster* cluster,
             std::vector<Placement> placement, std::ostream& log, LaunchReport* report)
      : opts_(opts), master_addr_(master_addr), port_(port), cluster_(cluster), placement_(std::move(placement)), log_(log),
        out_(opts.out ? *opts.out : std::cout), err_(opts.err ? *opts.err : std::cerr), report_(report) {}

  ~Supervisor() {
    for (auto& w : workers_) {
      if (w.pid <= 0) continue;
      if (!w.exited) ::kill(-w.pid, SIGKILL);
      while (::waitpid(w.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }

  int run() {
    spawnAll();
    while (runningCount() > 0) {
      pollOnce(Clock::now() + kTick);
      handleSignals();
      observeExits();
      escalateIfDue();
    }
    // Leaders are gone; finish reading what they (or children still holding the pipes) wrote.
    // Bounded: a child that left the worker's group could hold a pipe forever. When stopping,
    // children in the groups get the grace period and then SIGKILL, which closes the pipes.
    const auto exited_at = Clock::now();
    const auto drain_deadline = [&] {
      return (stopping() ? std::max(kill_at_, exited_at) : exited_at) + kDrainAfterExit;
    };
    while (anyStreamOpen() && Clock::now() < drain_deadline()) {
      pollOnce(std::min(Clock::now() + kTick, drain_deadline()));
      handleSignals();
      escalateIfDue();
    }
    // After a failure or an interrupt nothing of the job may linger (children that ignored
    // SIGTERM or closed their output); the zombie leaders keep the group ids ours.
    if (stopping()) {
      signalAll(SIGKILL);
      awaitGroupsGone(std::chrono::seconds(2));
    }
    for (auto& w : workers_) {
      flushPartial(w.out);
      flushPartial(w.err);
    }
    return result_;
  }

 private:
  bool stopping() const { return result_ != 0; }

  bool anyStreamOpen() const {
    for (const auto& w : workers_)
      if (w.out.fd.get() >= 0 || w.err.fd.get() >= 0) return true;
    return false;
  }

  size_t runningCount() const {
    size_t n = 0;
    for (const auto& w : workers_) n += w.exited ? 0 : 1;
    return n;
  }

  std::vector<std::string> baseEnv() const {
    std::set<std::string> overridden(std::begin(kTorchrunVars), std::end(kTorchrunVars));
    for (const auto& kv : opts_.extra_env) overridden.insert(kv.first);
    std::vector<std::string> env;
    for (char** e = environ; e && *e; ++e) {
      const std::string entry(*e);
      if (!overridden.count(entry.substr(0, entry.find('=')))) env.push_back(entry);
    }
    for (const auto& [key, value] : opts_.extra_env) env.push_back(key + "=" + value);
    return env;
  }

  void spawnAll() {
    const std::vector<std::string> base = baseEnv();
    std::vector<char*> argv;
    for (const auto& a : opts_.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    workers_.resize(opts_.nproc);
    for (int rank = 0; rank < opts_.nproc; ++rank) {
      std::vector<std::string> env = base;
      env.push_back("RANK=" + std::to_string(rank));
      env.push_back("WORLD_SIZE=" + std::to_string(opts_.nproc));
      env.push_back("LOCAL_RANK=" + std::to_string(placement_[rank].local_rank));
      env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(placement_[rank].local_world_size));
      env.push_back("MASTER_ADDR=" + master_addr_);
      env.push_back("MASTER_PORT=" + std::to_string(port_));
      env.push_back("LOWCOMM_PROCS_ON_HOST=" + std::to_string(opts_.nproc));  // they share this machine's cores
      env.push_back("LOWCOMM_LAUNCHER_PID=" + std::to_string(::getpid()));    // workers exit when we die
      if (!token_.empty()) env.push_back("LOWCOMM_JOB_TOKEN=" + token_);      // proves membership of this job
      if (cluster_ && !opts_.extra_env.count("GLOO_SOCKET_IFNAME")) {
        env.erase(std::remove_if(env.begin(), env.end(),
                                 [](const std::string& e) { return e.rfind("GLOO_SOCKET_IFNAME=", 0) == 0; }),
                  env.end());
        env.push_back("GLOO_SOCKET_IFNAME=" + cluster_->iface);
      }
      Worker& w = workers_[rank];
      w.rank = w.out.rank = w.err.rank = rank;
      w.err.is_err = true;
      // A process starts in the network namespace of the thread that spawns it.
      if (cluster_)
        runInNetns(cluster_->nodes[placement_[rank].node].netns, [&] { spawn(w, argv, env); });
      else
        spawn(w, argv, env);
    }
  }

  // posix_spawnp (not fork+exec): glibc reports exec failure as its return value, and the
  // process group, signal dispositions and fds are set up in the child before exec.
  void spawn(Worker& w, std::vector<char*>& argv, std::vector<std::string>& env) {
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);

    UniqueFd out_w, err_w;
    makePipe(w.out.fd, out_w);
    makePipe(w.err.fd, err_w);

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out_w.get(), STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, err_w.get(), STDERR_FILENO);

    // Own process group; default dispositions for the signals the launcher sends or forwards
    // and for SIGPIPE (an ignored disposition would survive exec); an empty signal mask.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF |
                                        POSIX_SPAWN_SETSIGMASK);
    posix_spawnattr_setpgroup(&attr, 0);
    sigset_t defaults, empty;
    sigemptyset(&defaults);
    for (int sig : kForwardedSignals) sigaddset(&defaults, sig);
    sigaddset(&defaults, SIGPIPE);
    sigemptyset(&empty);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setsigmask(&attr, &empty);

    pid_t pid = -1;
    const int rc = ::posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
      const std::string why = std::string(": ") + std::strerror(rc);
      if (rc == ENOENT || rc == EACCES || rc == ENOEXEC || rc == ENOTDIR || rc == ELOOP)
        throw ConfigError("cannot execute worker command '" + opts_.command[0] + "'" + why);
      throw Error("cannot start rank " + std::to_string(w.rank) + " ('" + opts_.command[0] +
                  "')" + why);
    }
    w.pid = pid;
  }

  // SIGKILL is delivered asynchronously: wait until no live (non-zombie) process remains in
  // any worker's group, so that "stopped" means gone when launch() returns.
  void awaitGroupsGone(std::chrono::milliseconds limit) {
    std::set<pid_t> groups;
    for (const auto& w : workers_)
      if (w.pid > 0) groups.insert(w.pid);
    const auto deadline = Clock::now() + limit;
    while (liveMemberOf(groups) && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  static bool liveMemberOf(const std::set<pid_t>& groups) {
    DIR* proc = ::opendir("/proc");
    if (!proc) return false;
    bool live = false;
    while (dirent* e = ::readdir(proc)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      const std::string stat = readProcFile(std::string("/proc/") + e->d_name + "/stat");  // may vanish meanwhile
      const size_t paren = stat.rfind(')');
      if (paren == std::string::npos) continue;
      char state = 0;
      long ppid = 0, pgrp = 0;
      if (std::sscanf(stat.c_str() + paren + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3) continue;
      if (state != 'Z' && state != 'X' && groups.count(static_cast<pid_t>(pgrp))) {
        live = true;
        break;
      }
    }
    ::closedir(proc);
    return live;
  }

  // Signals every worker's group; exited leaders' groups too, as their children may remain.
  void signalAll(int sig) {
    for (const auto& w : workers_)
      if (w.pid > 0) ::kill(-w.pid, sig);
  }

  void startStopping(int result) {
    result_ = result;
    signalAll(SIGTERM);
    kill_at_ = Clock::now() + opts_.grace;
  }

  void escalateIfDue() {
    if (stopping() && !killed_ && Clock::now() >= kill_at_) {
      signalAll(SIGKILL);
      killed_ = true;
    }
  }

  void handleSignals() {
    for (int sig : signals_.take()) {
      if (!stopping()) {
        log_ << "lowcomm launch: received " << signalName(sig) << "; forwarding it to the "
             << plural(runningCount(), "running worker") << std::endl;
        result_ = 128 + sig;
        kill_at_ = Clock::now() + opts_.grace;
        if (report_) report_->interrupted = true;
      }
      signalAll(sig);
    }
  }

  void observeExits() {
    for (auto& w : workers_) {
      if (w.exited) continue;
      siginfo_t info{};
      if (::waitid(P_PID, w.pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
        // ECHILD: someone else reaped it (SIGCHLD set to SIG_IGN); the status is lost.
        if (errno == EINTR) continue;
        w.exited = true;
        w.exit_code = 1;
        reportFailure(w, "vanished (its exit status was reaped elsewhere)");
        continue;
      }
      if (info.si_pid == 0) continue;
      w.exited = true;
      drain(w);  // its output before the line that announces its end
      if (info.si_code == CLD_EXITED) {
        w.exit_code = info.si_status;
        const char* error_class = exitStatusName(w.exit_code);
        if (w.exit_code != 0)
          reportFailure(w, "exited with status " + std::to_string(w.exit_code) +
                               (error_class ? std::string(" (") + error_class + ")" : ""), w.exit_code, 0);
      } else {
        w.exit_code = 128 + info.si_status;
        reportFailure(w, "was killed by signal " + std::to_string(info.si_status) + " (" +
                             signalName(info.si_status) + ")", -1, info.si_status);
      }
    }
  }

  // Only the first failure is reported: later exits are the consequence of stopping. Except an
  // error that recurs after a failure that may heal: a rank that saw its peer die can exit first
  // (peer lost); the peer's own error is the cause, and decides whether to restart. Status 1 (no
  // class) is not taken as a cause here: a rank whose peer vanished under it may exit with it too
  // (a LibTorch error), so it cannot tell a recurring error from a consequence of the first.
  void reportFailure(const Worker& w, const std::string& what, int status = -1, int signal = 0) {
    if (stopping()) {
      const bool recurs = status > kExitError && exitStatusName(status) && !exitStatusHeals(status);
      if (!recurs || !report_ || !(report_->signal > 0 || exitStatusHeals(report_->exit_status))) return;
      log_ << "lowcomm launch: rank " << w.rank << " (pid " << w.pid << ") " << what << ": the cause" << std::endl;
      *report_ = LaunchReport{false, w.rank, what, status, signal};
      result_ = w.exit_code;
      return;
    }
    const size_t others = runningCount();
    log_ << "lowcomm launch: rank " << w.rank << " (pid " << w.pid << ") " << what;
    if (others > 0) log_ << "; stopping the other " << plural(others, "worker");
    log_ << std::endl;
    if (report_) *report_ = LaunchReport{false, w.rank, what, status, signal};
    startStopping(w.exit_code);
  }

  void pollOnce(Clock::time_point until) {
    std::vector<pollfd> fds{{signals_.fd(), POLLIN, 0}};
    std::vector<OutStream*> streams{nullptr};
    for (auto& w : workers_) {
      for (OutStream* s : {&w.out, &w.err}) {
        if (s->fd.get() < 0) continue;
        fds.push_back({s->fd.get(), POLLIN, 0});
        streams.push_back(s);
      }
    }
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
    const int n = ::poll(fds.data(), fds.size(), std::max<int>(0, wait.count()));
    if (n <= 0) return;  // timeout or EINTR: the caller's checks run either way
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents != 0) readOnce(*streams[i]);
  }

  // Reads one chunk; returns false when nothing more is available now (or EOF).
  bool readOnce(OutStream& s) {
    if (s.fd.get() < 0) return false;
    char buf[64 * 1024];
    const ssize_t n = ::read(s.fd.get(), buf, sizeof(buf));
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
    if (n <= 0) {  // EOF, or an error that ends this stream just the same
      flushPartial(s);
      s.fd.reset();
      return false;
    }
    forward(s, buf, static_cast<size_t>(n));
    return true;
  }

  // Everything the exited worker wrote is in its pipes now; bounded in case a child of it
  // keeps writing (the poll loop picks up the rest).
  void drain(Worker& w) {
    for (OutStream* s : {&w.out, &w.err})
      for (int i = 0; i < 16 && readOnce(*s); ++i) {
      }
  }

  void forward(OutStream& s, const char* data, size_t n) {
    if (opts_.quiet_nonzero && s.rank != 0 && !s.is_err) return;  // errors of every rank reach the user
    s.partial.append(data, n);
    size_t start = 0;
    for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1)
      emit(s, s.partial.substr(start, nl - start));
    s.partial.erase(0, start);
    while (s.partial.size() >= kMaxLine) {
      emit(s, s.partial.substr(0, kMaxLine));
      s.partial.erase(0, kMaxLine);
    }
  }

  void flushPartial(OutStream& s) {
    if (!s.partial.empty()) emit(s, s.partial);
    s.partial.clear();
  }

  void emit(const OutStream& s, const std::string& line) {
    std::ostream& os = s.is_err ? err_ : out_;
    os << "[rank " << s.rank << "] " << line << '\n';
    os.flush();
  }

  const LaunchOptions& opts_;
  const std::string master_addr_;
  const int port_;
  const Cluster* cluster_;
  const std::vector<Placement> placement_;
  std::ostream& log_;
  std::ostream& out_;
  std::ostream& err_;
  SignalForwarding signals_;
  std::vector<Worker> workers_;
  int result_ = 0;  // first failure's exit code or 128+signal received; 0 while all is well
  Clock::time_point kill_at_{};
  bool killed_ = false;
  LaunchReport* report_;
  // This launch's job token, unless our own environment brings one (a job across hosts: every
  // host's launcher must hand out the same secret) or the options do (withJobToken: one token
  // for every restart of a job).
  std::string token_ =
      std::getenv("LOWCOMM_JOB_TOKEN") || opts_.extra_env.count("LOWCOMM_JOB_TOKEN") ? std::string() : newJobToken();
};

}  // namespace

std::string newJobToken() {
  uint8_t bytes[32];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t r = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw Error(std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<size_t>(r);
  }
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) out += {hex[b >> 4], hex[b & 15]};
  return out;
}

LaunchOptions withJobToken(LaunchOptions opts) {
  if (!std::getenv("LOWCOMM_JOB_TOKEN") && !opts.extra_env.count("LOWCOMM_JOB_TOKEN"))
    opts.extra_env["LOWCOMM_JOB_TOKEN"] = newJobToken();
  return opts;
}

// The Python backend's authenticated store listens on LOWCOMM_RDZV_PORT (torch's own store holds
// MASTER_PORT): a free one of its own, unless the user chose it.
static LaunchOptions withRdzvPort(const LaunchOptions& opts, const std::string& addr, int master_port) {
  LaunchOptions o = opts;
  if (std::getenv("LOWCOMM_RDZV_PORT") || o.extra_env.count("LOWCOMM_RDZV_PORT")) return o;
  int port = findFreePort(addr);
  for (int i = 0; i < 16 && port == master_port; ++i) port = findFreePort(addr);
  o.extra_env["LOWCOMM_RDZV_PORT"] = std::to_string(port);
  return o;
}

int launch(const LaunchOptions& opts, std::ostream& log, LaunchReport* report) {
  if (report) *report = LaunchReport{};
  validate(opts);
  if (opts.cluster.empty()) {
    if (!opts.wire_json.empty()) throw ConfigError("wire bytes (--wire-json) are measured only with --cluster");
    const int port = opts.master_port != 0 ? opts.master_port : findFreePort(opts.master_addr);
    const LaunchOptions with_rdzv = withRdzvPort(opts, opts.master_addr, port);  // the Supervisor keeps a reference
    Supervisor supervisor(with_rdzv, opts.master_addr, port, nullptr, placeRanks(opts.nproc, 1, opts.nproc), log,
                          report);
    return supervisor.run();
  }
  const Cluster cluster = loadCluster(opts.cluster);
  const int ppn = opts.procs_per_node > 0 ? opts.procs_per_node : cluster.procs_per_node;
  auto placement = placeRanks(opts.nproc, static_cast<int>(cluster.nodes.size()), ppn);
  const std::string& master = cluster.nodes[0].address;
  int port = opts.master_port;
  if (port == 0) runInNetns(cluster.nodes[0].netns, [&] { port = findFreePort(master); });
  LaunchOptions with_rdzv;
  runInNetns(cluster.nodes[0].netns, [&] { with_rdzv = withRdzvPort(opts, master, port); });
  const int used_nodes = placement.back().node + 1;
  std::vector<LinkCounters> before(used_nodes);
  for (int i = 0; i < used_nodes; ++i) before[i] = readCounters(cluster.nodes[i].netns, cluster.iface);
  const auto t0 = Clock::now();
  int rc;
  {
    Supervisor supervisor(with_rdzv, master, port, &cluster, placement, log, report);
    rc = supervisor.run();
  }
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<LinkCounters> delta(used_nodes);
  for (int i = 0; i < used_nodes; ++i) delta[i] = readCounters(cluster.nodes[i].netns, cluster.iface) - before[i];
  try {
    reportWire(opts, cluster, placement, delta, wall, log);
  } catch (const std::exception& e) {
    if (rc == 0) throw;
    log << "lowcomm launch: " << e.what() << std::endl;  // the workers' failure is the news
  }
  return rc;
}

}  // namespace lowcomm::launch
