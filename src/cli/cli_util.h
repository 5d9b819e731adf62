// Helpers shared by the subcommands.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace lowcomm::cli {

// Parses argv into `app`. Returns false after printing --help; a parse error is a ConfigError.
bool parseArgs(CLI::App& app, int argc, char** argv);

// When `nproc` > 0 and this process is not already one of the workers (marker variable unset),
// runs `lowcomm <subcommand> argv[1..]` as `nproc` local workers through the launcher and
// returns its exit status; otherwise returns -1 and the caller runs as a worker.
int relaunchAsWorkers(int nproc, const std::string& subcommand, int argc, char** argv);

}  // namespace lowcomm::cli
