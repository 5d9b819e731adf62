#include "cli_util.h"

#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "lowcomm/base/error.h"
#include "lowcomm/launch/launcher.h"

namespace lowcomm::cli {

namespace {
constexpr const char* kWorkerMarker = "LOWCOMM_WORKER";

std::string selfPath() {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) throw Error("cannot find this executable's path (/proc/self/exe)");
  self[len] = 0;
  return self;
}
}  // namespace

bool parseArgs(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return false;
  } catch (const CLI::ParseError& e) {
    throw ConfigError(e.what());
  }
  return true;
}

void addClusterOptions(CLI::App& app, ClusterArgs& c) {
  app.add_option("--cluster", c.name, "run the workers on this emulated cluster (tools/cluster up --prefix NAME)");
  app.add_option("--procs-per-node", c.procs_per_node, "with --cluster: workers per node (default: the cluster's)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--wire-json", c.wire_json, "with --cluster: write the run's wire bytes per node (kernel counters) here");
}

void addElasticOptions(CLI::App& app, launch::ElasticOptions& e) {
  app.add_flag("--elastic", e.enabled,
               "live membership: a worker that dies is replaced while the others train on, no restart "
               "(docs/elastic.md; lowcomm train: strategy ddp)");
  app.add_option_function<int>("--heartbeat-ms", [&e](int ms) { e.heartbeat = std::chrono::milliseconds(ms); },
                               "with --elastic: how often a worker beats (default 200)")
      ->check(CLI::Range(10, 60000));
  app.add_option_function<int>("--heartbeat-timeout-ms",
                               [&e](int ms) { e.heartbeat_timeout = std::chrono::milliseconds(ms); },
                               "with --elastic: a worker silent this long is killed and replaced (default 3000)")
      ->check(CLI::Range(100, 3600000));
  app.add_option("--max-replacements", e.max_replacements, "with --elastic: the deaths replaced before the job stops")
      ->check(CLI::Range(0, 1000000));
}

void checkElasticOptions(const launch::ElasticOptions& e, int max_restarts) {
  if (!e.enabled) return;
  if (max_restarts > 0) throw ConfigError("--elastic and --max-restarts exclude each other: a dead worker is either replaced or the job restarted");
  if (e.heartbeat_timeout <= 2 * e.heartbeat)
    throw ConfigError("--heartbeat-timeout-ms must be more than twice --heartbeat-ms (" +
                      std::to_string(e.heartbeat.count()) + " ms)");
}

int relaunchAsWorkers(int nproc, const std::string& subcommand, int argc, char** argv, const ClusterArgs& cluster) {
  if (std::getenv(kWorkerMarker)) return -1;
  if (nproc <= 0) {
    if (!cluster.name.empty()) throw ConfigError("--cluster needs --nproc N");
    if (cluster.max_restarts > 0) throw ConfigError("--max-restarts needs --nproc N (or lowcomm launch --max-restarts)");
    if (cluster.elastic.enabled && !std::getenv("LOWCOMM_ELASTIC"))
      throw ConfigError("--elastic needs --nproc N (or lowcomm launch --elastic)");
    if (!cluster.wire_json.empty() || cluster.procs_per_node) throw ConfigError("--wire-json and --procs-per-node need --cluster");
    return -1;
  }
  if (cluster.name.empty() && (!cluster.wire_json.empty() || cluster.procs_per_node))
    throw ConfigError("--wire-json and --procs-per-node need --cluster");
  launch::LaunchOptions lo;
  lo.nproc = nproc;
  lo.cluster = cluster.name;
  lo.procs_per_node = cluster.procs_per_node;
  lo.wire_json = cluster.wire_json;
  checkElasticOptions(cluster.elastic, cluster.max_restarts);
  lo.elastic = cluster.elastic;
  lo.quiet_nonzero = true;
  lo.extra_env[kWorkerMarker] = "1";
  lo.command = {selfPath()};
  for (const auto& word : CLI::detail::split(subcommand, ' ')) lo.command.push_back(word);
  for (int i = 1; i < argc; ++i) lo.command.push_back(argv[i]);
  return launch::launchWithRestarts(launch::withJobToken(lo), cluster.max_restarts, std::cerr);
}

}  // namespace lowcomm::cli
