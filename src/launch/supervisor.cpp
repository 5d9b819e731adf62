// Supervisor's lifecycle: spawning the workers, observing their exits, stopping them.
#include "supervisor.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "lowcomm/base/error.h"
#include "lowcomm/base/exit_status.h"
#include "lowcomm/base/proc.h"

extern char** environ;

namespace lowcomm::launch {

namespace {

constexpr auto kTick = std::chrono::milliseconds(50);             // exit-detection latency
constexpr auto kDrainAfterExit = std::chrono::milliseconds(500);  // orphans holding a pipe

std::string plural(size_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

}  // namespace

Supervisor::~Supervisor() {
  for (auto* all : {&workers_, &retired_}) {
    for (auto& w : *all) {
      if (w.pid <= 0) continue;
      if (!w.exited) ::kill(-w.pid, SIGKILL);
      while (::waitpid(w.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }
}

int Supervisor::run() {
  if (elastic_) elastic_->start();  // epoch 1, every slot: before any worker looks for it
  spawnAll();
  while (runningCount() > 0 || (!replace_at_.empty() && !stopping())) {
    pollOnce(Clock::now() + kTick);
    handleSignals();
    observeExits();
    if (elastic_ && !stopping()) tickElastic();
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

bool Supervisor::anyStreamOpen() const {
  for (const auto& w : workers_)
    if (w.out.fd.get() >= 0 || w.err.fd.get() >= 0) return true;
  return false;
}

size_t Supervisor::runningCount() const {
  size_t n = 0;
  for (const auto& w : workers_) n += w.pid > 0 && !w.exited ? 1 : 0;
  return n;
}

std::vector<std::string> Supervisor::baseEnv() const {
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

void Supervisor::spawnAll() {
  workers_.resize(opts_.nproc);
  for (int rank = 0; rank < opts_.nproc; ++rank) spawnSlot(rank, 0);
}

// Starts the worker of `rank` (its slot, with --elastic) in workers_[rank].
void Supervisor::spawnSlot(int rank, int incarnation) {
  std::vector<char*> argv;
  for (const auto& a : opts_.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const auto sites = cluster_ ? placeSites(placement_, cluster_->nodes, cluster_->siteCount())
                              : std::vector<SitePlacement>();
  std::vector<std::string> env = baseEnv();
  env.push_back("RANK=" + std::to_string(rank));
  env.push_back("WORLD_SIZE=" + std::to_string(opts_.nproc));
  env.push_back("LOCAL_RANK=" + std::to_string(placement_[rank].local_rank));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(placement_[rank].local_world_size));
  env.push_back("MASTER_ADDR=" + master_addr_);
  env.push_back("MASTER_PORT=" + std::to_string(port_));
  env.push_back("LOWCOMM_PROCS_ON_HOST=" + std::to_string(opts_.nproc));  // they share this machine's cores
  env.push_back("LOWCOMM_LAUNCHER_PID=" + std::to_string(::getpid()));    // workers exit when we die
  if (!token_.empty()) env.push_back("LOWCOMM_JOB_TOKEN=" + token_);      // proves membership of this job
  if (elastic_) {
    env.push_back("LOWCOMM_ELASTIC=1");
    env.push_back("LOWCOMM_ELASTIC_INCARNATION=" + std::to_string(incarnation));
    env.push_back("LOWCOMM_ELASTIC_HEARTBEAT_MS=" + std::to_string(opts_.elastic.heartbeat.count()));
  }
  if (cluster_) {  // the site level of the topology (one site on a cluster without a WAN)
    env.push_back("LOWCOMM_SITE=" + std::to_string(sites[rank].site));
    env.push_back("LOWCOMM_SITES=" + std::to_string(sites[rank].sites));
    env.push_back("LOWCOMM_SITE_RANK=" + std::to_string(sites[rank].site_rank));
    env.push_back("LOWCOMM_SITE_SIZE=" + std::to_string(sites[rank].site_size));
  }
  if (cluster_ && !opts_.extra_env.count("GLOO_SOCKET_IFNAME")) {
    env.erase(std::remove_if(env.begin(), env.end(),
                             [](const std::string& e) { return e.rfind("GLOO_SOCKET_IFNAME=", 0) == 0; }),
              env.end());
    env.push_back("GLOO_SOCKET_IFNAME=" + cluster_->iface);
  }
  Worker& w = workers_[rank];
  w = Worker{};
  w.rank = w.out.rank = w.err.rank = rank;
  w.incarnation = incarnation;
  w.err.is_err = true;
  // A process starts in the network namespace of the thread that spawns it.
  if (cluster_)
    runInNetns(cluster_->nodes[placement_[rank].node].netns, [&] { spawn(w, argv, env); });
  else
    spawn(w, argv, env);
}

// posix_spawnp (not fork+exec): glibc reports exec failure as its return value, and the
// process group, signal dispositions and fds are set up in the child before exec.
void Supervisor::spawn(Worker& w, std::vector<char*>& argv, std::vector<std::string>& env) {
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
void Supervisor::awaitGroupsGone(std::chrono::milliseconds limit) {
  std::set<pid_t> groups;
  for (const auto* all : {&workers_, &retired_})
    for (const auto& w : *all)
      if (w.pid > 0) groups.insert(w.pid);
  const auto deadline = Clock::now() + limit;
  while (liveMemberOf(groups) && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

bool Supervisor::liveMemberOf(const std::set<pid_t>& groups) {
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
void Supervisor::signalAll(int sig) {
  for (const auto* all : {&workers_, &retired_})
    for (const auto& w : *all)
      if (w.pid > 0) ::kill(-w.pid, sig);
}

void Supervisor::startStopping(int result) {
  result_ = result;
  signalAll(SIGTERM);
  kill_at_ = Clock::now() + opts_.grace;
}

void Supervisor::escalateIfDue() {
  if (stopping() && !killed_ && Clock::now() >= kill_at_) {
    signalAll(SIGKILL);
    killed_ = true;
  }
}

void Supervisor::handleSignals() {
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

void Supervisor::observeExits() {
  for (auto& w : workers_) {
    if (w.exited || w.pid <= 0) continue;
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
      const std::string what = "exited with status " + std::to_string(w.exit_code) +
                               (error_class ? std::string(" (") + error_class + ")" : "");
      if (w.exit_code == 0) {
        if (elastic_) finishedOnExit(w);
      } else if (!(elastic_ && replaceOnExit(w, what, w.exit_code, 0))) {
        reportFailure(w, what, w.exit_code, 0);
      }
    } else {
      w.exit_code = 128 + info.si_status;
      const std::string what = "was killed by signal " + std::to_string(info.si_status) + " (" +
                               signalName(info.si_status) + ")";
      if (!(elastic_ && replaceOnExit(w, what, -1, info.si_status))) reportFailure(w, what, -1, info.si_status);
    }
  }
}

// Only the first failure is reported: later exits are the consequence of stopping. Except an
// error that recurs after a failure that may heal: a rank that saw its peer die can exit first
// (peer lost); the peer's own error is the cause, and decides whether to restart. Status 1 (no
// class) is not taken as a cause here: a rank whose peer vanished under it may exit with it too
// (a LibTorch error), so it cannot tell a recurring error from a consequence of the first.
void Supervisor::reportFailure(const Worker& w, const std::string& what, int status, int signal) {
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

}  // namespace lowcomm::launch
