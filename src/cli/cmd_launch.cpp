// `lowcomm launch`: start N local workers torchrun-style (see lowcomm/launch/launcher.h).
//
// Syntax: lowcomm launch --nproc N [options] -- CMD ARGS...
// Everything after the first `--` is the worker command, passed through untouched, so the
// worker's own options never collide with the launcher's.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cli_util.h"
#include "commands.h"
#include "lowcomm/base/error.h"
#include "lowcomm/launch/cluster.h"
#include "lowcomm/launch/launcher.h"

namespace lowcomm::cli {

int cmdLaunch(int argc, char** argv) {
  int dash = 1;
  while (dash < argc && std::strcmp(argv[dash], "--") != 0) ++dash;

  launch::LaunchOptions opts;
  double grace_seconds = 5.0;
  std::vector<std::string> env;

  CLI::App app{"Start N local worker processes with torchrun's environment (RANK, WORLD_SIZE, "
               "LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT).",
               "lowcomm launch"};
  app.footer(
      "Worker command: everything after `--`, e.g.\n"
      "  lowcomm launch --nproc 2 -- sh -c 'echo $RANK of $WORLD_SIZE'\n"
      "Worker output is prefixed \"[rank N] \". The first worker to fail stops the others;\n"
      "the exit status is then that worker's (128+signal if it was killed).\n"
      "On an emulated cluster (tools/cluster up --nodes 2):\n"
      "  lowcomm launch --cluster lc --nproc 2 --wire-json wire.json -- lowcomm bench collectives");
  int nproc = 0;
  app.add_option("--nproc", nproc, "number of worker processes (with --cluster: default all its slots)")
      ->check(CLI::Range(1, 65536));
  app.add_option("--master-addr", opts.master_addr, "rendezvous address (rank 0's host)")
      ->capture_default_str();
  app.add_option("--master-port", opts.master_port, "rendezvous port; 0 picks a free one")
      ->capture_default_str();
  app.add_flag("--quiet-nonzero", opts.quiet_nonzero, "drop the standard output of ranks other than 0 (their errors are still shown)");
  app.add_option("--grace-seconds", grace_seconds,
                 "after a failure, time between SIGTERM and SIGKILL for the other workers")
      ->capture_default_str();
  app.add_option("--env", env, "extra KEY=VALUE for every worker (repeatable)");
  app.add_option("--cluster", opts.cluster,
                 "run the workers on this emulated cluster (tools/cluster up --prefix NAME): each in its node's "
                 "network namespace; MASTER_ADDR is node 0's address");
  app.add_option("--procs-per-node", opts.procs_per_node, "with --cluster: workers per node (default: the cluster's)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--wire-json", opts.wire_json, "with --cluster: write the run's wire bytes per node here");
  int max_restarts = 0;
  app.add_option("--max-restarts", max_restarts,
                 "after a worker is killed, loses a peer or times out, stop the others and start all again after "
                 "1 s (doubling, at most 30 s), up to N times; other errors are not restarted "
                 "(LOWCOMM_RESTART_COUNT tells the workers; `lowcomm train` then resumes from its latest checkpoint)")
      ->check(CLI::Range(0, 1000000));

  addElasticOptions(app, opts.elastic);

  if (!parseArgs(app, dash, argv)) return 0;
  checkElasticOptions(opts.elastic, max_restarts);

  if (nproc <= 0 && !opts.cluster.empty()) {
    const auto c = launch::loadCluster(opts.cluster);
    nproc = static_cast<int>(c.nodes.size()) * (opts.procs_per_node > 0 ? opts.procs_per_node : c.procs_per_node);
  }
  if (nproc <= 0) throw ConfigError("--nproc N is required (N >= 1)");
  opts.nproc = nproc;
  if (dash >= argc) throw ConfigError("missing `-- CMD ARGS...` after the launcher options");
  opts.command.assign(argv + dash + 1, argv + argc);
  if (opts.command.empty()) throw ConfigError("missing worker command after `--`");

  if (!std::isfinite(grace_seconds) || grace_seconds < 0)
    throw ConfigError("--grace-seconds must be a non-negative number");
  opts.grace = std::chrono::milliseconds(std::llround(grace_seconds * 1000.0));

  for (const auto& kv : env) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError("--env expects KEY=VALUE, got '" + kv + "'");
    opts.extra_env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }

  return launch::launchWithRestarts(launch::withJobToken(opts), max_restarts, std::cerr);
}

}  // namespace lowcomm::cli
