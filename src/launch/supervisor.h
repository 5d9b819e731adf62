// The supervisor of one launch (private to lowcomm_launch): spawns the workers, forwards their
// output line by line, and stops them all at the first failure or a forwarded signal.
//
// One thread does everything: a poll() loop over the workers' pipes and a self-pipe fed by the
// forwarded-signal handler, with a short tick to notice exits (waitid WNOHANG). Exits are
// observed with WNOWAIT and the zombies are reaped only in the destructor: a zombie keeps its
// pid, hence its process group id, reserved, so signalling a worker's group can never hit an
// unrelated process that reused the number.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "elastic_host.h"
#include "signal_forwarding.h"
#include "unique_fd.h"
#include "lowcomm/launch/cluster.h"
#include "lowcomm/launch/launcher.h"

namespace lowcomm::launch {

// The variables the launcher sets for each rank: no extra environment variable may name one.
inline constexpr const char* kTorchrunVars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                               "MASTER_ADDR", "MASTER_PORT", "LOWCOMM_PROCS_ON_HOST",
                                               "LOWCOMM_LAUNCHER_PID", "LOWCOMM_SITE", "LOWCOMM_SITES",
                                               "LOWCOMM_SITE_RANK", "LOWCOMM_SITE_SIZE"};

// One of a worker's output pipes with the bytes after its last newline.
struct OutStream {
  int rank = 0;
  bool is_err = false;
  UniqueFd fd;  // read end; closed at EOF
  std::string partial;
};

struct Worker {
  int rank = 0;          // its slot, with --elastic
  int incarnation = 0;   // --elastic: 0 for the slot's first worker, k for its k-th replacement
  pid_t pid = -1;        // -1: not started (a slot waiting for its replacement)
  bool exited = false;  // observed (WNOWAIT), reaped only in ~Supervisor
  int exit_code = 0;    // exit status, or 128+signal
  OutStream out, err;
};

// Runs one launch; its destructor guarantees no worker outlives it (SIGKILL + reap). `opts`
// must outlive it. Workers are placed by `placement`; with a `cluster`, each rank is spawned in
// its node's network namespace. The first failure is written to `log` and `report`.
class Supervisor {
 public:
  Supervisor(const LaunchOptions& opts, const std::string& master_addr, int port, const Cluster* cluster,
             std::vector<Placement> placement, std::ostream& log, LaunchReport* report)
      : opts_(opts), master_addr_(master_addr), port_(port), cluster_(cluster), placement_(std::move(placement)), log_(log),
        out_(opts.out ? *opts.out : std::cout), err_(opts.err ? *opts.err : std::cerr), report_(report) {}
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Spawns every worker and supervises them to the end; returns 0, the first failure's exit
  // code, or 128 + the signal received.
  int run();
  // --elastic: the membership goes through `store` (the launcher's own client of the store it
  // hosts, lowcomm/launch/launcher.h). Before run().
  void setElasticStore(std::shared_ptr<net::Store> store);

 private:
  using Clock = std::chrono::steady_clock;

  // Lifecycle (supervisor.cpp).
  bool stopping() const { return result_ != 0; }
  bool anyStreamOpen() const;
  size_t runningCount() const;
  std::vector<std::string> baseEnv() const;
  void spawnAll();
  void spawnSlot(int rank, int incarnation);
  void spawn(Worker& w, std::vector<char*>& argv, std::vector<std::string>& env);
  void awaitGroupsGone(std::chrono::milliseconds limit);
  static bool liveMemberOf(const std::set<pid_t>& groups);
  void signalAll(int sig);
  void startStopping(int result);
  void escalateIfDue();
  void handleSignals();
  void observeExits();
  void reportFailure(const Worker& w, const std::string& what, int status = -1, int signal = 0);

  // Live membership (supervisor_elastic.cpp).
  // A worker ended: true when the slot is taken care of (to be replaced, or the job finishing),
  // false when the failure stops the job as without --elastic.
  bool replaceOnExit(Worker& w, const std::string& what, int status, int signal);
  void finishedOnExit(const Worker& w);  // a worker exited 0
  void tickElastic();
  void retire(Worker& w);

  // Output forwarding (supervisor_output.cpp).
  void pollOnce(Clock::time_point until);
  bool readOnce(OutStream& s);
  void drain(Worker& w);
  void forward(OutStream& s, const char* data, size_t n);
  void flushPartial(OutStream& s);
  void emit(const OutStream& s, const std::string& line);

  const LaunchOptions& opts_;
  const std::string master_addr_;
  const int port_;
  const Cluster* cluster_;
  const std::vector<Placement> placement_;
  std::ostream& log_;
  std::ostream& out_;
  std::ostream& err_;
  SignalForwarding signals_;
  std::vector<Worker> workers_;   // the current worker of each slot
  std::vector<Worker> retired_;   // --elastic: replaced workers (zombies until ~Supervisor)
  int result_ = 0;  // first failure's exit code or 128+signal received; 0 while all is well
  Clock::time_point kill_at_{};
  bool killed_ = false;
  LaunchReport* report_;
  std::unique_ptr<ElasticHost> elastic_;
  std::map<int, Clock::time_point> replace_at_;  // slots waiting for their replacement
  int replacements_ = 0;
  bool finishing_ = false;  // --elastic: a worker has exited 0
  // This launch's job token, unless our own environment brings one (a job across hosts: every
  // host's launcher must hand out the same secret) or the options do (withJobToken: one token
  // for every restart of a job).
  std::string token_ =
      std::getenv("LOWCOMM_JOB_TOKEN") || opts_.extra_env.count("LOWCOMM_JOB_TOKEN") ? std::string() : newJobToken();
};

}  // namespace lowcomm::launch
