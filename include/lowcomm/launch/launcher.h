// Local multi-process launcher, torchrun-style.
//
// Contract: starts `nproc` copies of `command` with RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT set (plus `extra_env`). With `cluster` (an emulated
// cluster made by tools/cluster, see cluster.h) the ranks are placed on its nodes, P per node in
// rank order, and each runs inside its node's network namespace: MASTER_ADDR is node 0's address,
// GLOO_SOCKET_IFNAME the nodes' interface (unless extra_env sets it), LOCAL_RANK/LOCAL_WORLD_SIZE
// follow the placement. The nodes' kernel link counters are read before the first rank starts and
// after the last one ends; their difference (the run's wire bytes) is logged and, with
// `wire_json`, written there. Every worker also gets LOWCOMM_PROCS_ON_HOST = nproc (all of them
// share this machine's cores, whatever node they emulate), which sizes their thread pools. Each worker's stdout and
// stderr lines are prefixed with "[rank N] " (`quiet_nonzero` drops the stdout of ranks != 0;
// their stderr is always forwarded).
// Fail fast: the first worker to exit non-zero or die from a signal makes the launcher print
// one line naming the rank and its exit status (with its error class, lowcomm/base/exit_status.h)
// or signal, stop the others (SIGTERM, then
// SIGKILL after `grace`), and return non-zero. SIGINT/SIGTERM (and SIGHUP/SIGQUIT, as torchrun)
// sent to the launcher are forwarded to every worker, which then get `grace` before SIGKILL.
//
// Each worker runs in its own process group (so signals reach the whole tree it starts) with
// stdin from /dev/null (a background group reading the terminal would be stopped). extra_env
// may not set the seven variables above. Only one launch() may run at a time in a process: the
// signal forwarding needs process-wide handlers for those signals, installed for the call.
#pragma once

#include <chrono>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace lowcomm::launch {

// Live membership (`--elastic`, docs/elastic.md): a worker that dies is replaced in its slot while
// the others train on, instead of the whole job stopping. The launcher hosts the rendezvous store
// at MASTER_ADDR:MASTER_PORT (so it outlives every worker), publishes the membership epochs,
// watches the workers' heartbeats (a worker silent for `heartbeat_timeout` is killed and
// replaced) and starts a replacement `replace_after` after a death, with LOWCOMM_ELASTIC=1,
// LOWCOMM_ELASTIC_INCARNATION (0 for the first worker of a slot) and
// LOWCOMM_ELASTIC_HEARTBEAT_MS. A failure a new process would repeat (a config or data error:
// the rule of launchWithRestarts) still stops the job, as does the `max_replacements`+1-th death.
// Once a worker has exited 0 the job is finishing: nothing more is replaced.
struct ElasticOptions {
  bool enabled = false;
  std::chrono::milliseconds heartbeat{200};
  std::chrono::milliseconds heartbeat_timeout{3000};
  std::chrono::milliseconds replace_after{500};
  int max_replacements = 1000;
};

struct LaunchOptions {
  int nproc = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free port
  bool quiet_nonzero = false;
  std::vector<std::string> command;
  std::map<std::string, std::string> extra_env;
  std::chrono::milliseconds grace{std::chrono::seconds(5)};
  // Where workers' prefixed stdout / stderr lines go; nullptr: std::cout / std::cerr.
  // Each line is written and flushed whole, so lines of different ranks never interleave.
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
  // Emulated cluster: the prefix given to `tools/cluster up`; empty runs every rank here.
  std::string cluster;
  int procs_per_node = 0;  // 0: the cluster's own (tools/cluster up --procs-per-node)
  std::string wire_json;   // cluster only: write the run's wire bytes per node here (JSON)
  ElasticOptions elastic;
};

// What ended a launch: the first failing rank and why (or a later one whose error recurs when the
// first may heal, e.g. a peer lost because of it), or an interrupt of the launcher.
struct LaunchReport {
  bool interrupted = false;  // the launcher got SIGINT/SIGTERM/SIGHUP/SIGQUIT first
  int failed_rank = -1;      // the first worker that failed (-1: none)
  std::string cause;         // e.g. "exited with status 3 (data error)", "was killed by signal 9 (SIGKILL)"
  int exit_status = -1;      // its exit status (lowcomm/base/exit_status.h); -1 when killed or unknown
  int signal = 0;            // the signal that killed it; 0 when it exited
};

// Runs the workers to completion. Returns 0 when all exited 0; otherwise the failing worker's
// exit code (128+signal when killed), never 0; 128+signal when the launcher itself got
// SIGINT/SIGTERM first. Throws ConfigError on bad options, including a command that cannot be
// executed (not found, not executable); no worker is left running when it throws. `report`
// (optional) says what ended it.
int launch(const LaunchOptions& opts, std::ostream& log, LaunchReport* report = nullptr);

// torchrun-elastic style: after a worker fails, every worker has been stopped by launch(); start
// all of them again (same world size, a fresh rendezvous port unless one is fixed), up to
// `max_restarts` times, with LOWCOMM_RESTART_COUNT = the attempt (0 first). Only a failure a
// restart can heal is restarted: a worker killed by a signal, or one that exited with the status
// of a lost peer or a timeout (exitStatusHeals); any other status (config error, data error,
// corrupt checkpoint, an unknown error) ends the job with a line saying why it is not restarted.
// Restarts wait 1 s, doubling up to 30 s; each is logged with its cause and wait. An interrupt of
// the launcher is never restarted. Returns the last attempt's status.
int launchWithRestarts(const LaunchOptions& opts, int max_restarts, std::ostream& log);

// A fresh random job token (64 hex digits). launch() hands one to every worker of a launch as
// LOWCOMM_JOB_TOKEN (unless the launcher's own environment has one): the rendezvous admits only
// processes that prove it.
std::string newJobToken();

// `opts` with a job token of its own in extra_env (unless the environment or extra_env has one):
// every launch() with it, e.g. each restart of launchWithRestarts, is the same job (workers derive
// the job id their checkpoints record from the token).
LaunchOptions withJobToken(LaunchOptions opts);

// A TCP port that was free on `addr` a moment ago.
int findFreePort(const std::string& addr);

}  // namespace lowcomm::launch
