// Helpers shared by the subcommands.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "lowcomm/launch/launcher.h"

namespace lowcomm::cli {

// Parses argv into `app`. Returns false after printing --help; a parse error is a ConfigError.
bool parseArgs(CLI::App& app, int argc, char** argv);

// When `nproc` > 0 and this process is not already one of the workers (marker variable unset),
// runs `lowcomm <subcommand> argv[1..]` as `nproc` local workers through the launcher and
// returns its exit status; otherwise returns -1 and the caller runs as a worker.
// With `cluster.name` set the workers run on that emulated cluster (launch/cluster.h).
struct ClusterArgs {
  std::string name;         // --cluster PREFIX
  int procs_per_node = 0;   // --procs-per-node (0: the cluster's)
  std::string wire_json;    // --wire-json FILE
  int max_restarts = 0;     // --max-restarts N (lowcomm train)
  launch::ElasticOptions elastic;  // --elastic and its knobs (lowcomm train, lowcomm launch)
};
// --elastic, --heartbeat-ms, --heartbeat-timeout-ms, --max-replacements.
void addElasticOptions(CLI::App& app, launch::ElasticOptions& e);
// ConfigError unless --elastic's knobs are sane and it is not combined with --max-restarts.
void checkElasticOptions(const launch::ElasticOptions& e, int max_restarts);
void addClusterOptions(CLI::App& app, ClusterArgs& c);
int relaunchAsWorkers(int nproc, const std::string& subcommand, int argc, char** argv,
                      const ClusterArgs& cluster = {});

}  // namespace lowcomm::cli
