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

int relaunchAsWorkers(int nproc, const std::string& subcommand, int argc, char** argv) {
  if (nproc <= 0 || std::getenv(kWorkerMarker)) return -1;
  launch::LaunchOptions lo;
  lo.nproc = nproc;
  lo.quiet_nonzero = true;
  lo.extra_env[kWorkerMarker] = "1";
  lo.command = {selfPath()};
  for (const auto& word : CLI::detail::split(subcommand, ' ')) lo.command.push_back(word);
  for (int i = 1; i < argc; ++i) lo.command.push_back(argv[i]);
  return launch::launch(lo, std::cerr);
}

}  // namespace lowcomm::cli
