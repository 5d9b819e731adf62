// launchWithRestarts(): launch() again after a failure, torchrun-elastic style.
#include <ostream>
#include <string>

#include "lowcomm/base/error.h"
#include "lowcomm/launch/launcher.h"

namespace lowcomm::launch {

int launchWithRestarts(const LaunchOptions& opts, int max_restarts, std::ostream& log) {
  if (max_restarts < 0) throw ConfigError("--max-restarts must be >= 0, got " + std::to_string(max_restarts));
  LaunchOptions o = opts;
  for (int attempt = 0;; ++attempt) {
    o.extra_env["LOWCOMM_RESTART_COUNT"] = std::to_string(attempt);
    LaunchReport report;
    const int rc = launch(o, log, &report);
    if (rc == 0 || report.interrupted) return rc;
    if (attempt == max_restarts) {
      if (max_restarts > 0)
        log << "lowcomm launch: giving up after " << max_restarts << " restart" << (max_restarts == 1 ? "" : "s")
            << std::endl;
      return rc;
    }
    log << "lowcomm launch: restart " << attempt + 1 << " of " << max_restarts << ": all " << o.nproc
        << " workers again, because rank " << report.failed_rank << " " << report.cause << std::endl;
  }
}

}  // namespace lowcomm::launch
