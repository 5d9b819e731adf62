// launchWithRestarts(): launch() again after a failure that a restart can heal, torchrun-elastic
// style, after a backoff; a failure that would recur ends the job at once, saying so.
#include <algorithm>
#include <chrono>
#include <ostream>
#include <string>
#include <thread>

#include "lowcomm/base/error.h"
#include "lowcomm/base/exit_status.h"
#include "lowcomm/launch/launcher.h"
#include "recurs.h"

namespace lowcomm::launch {

namespace {

// Short enough not to matter next to a run, long enough for a peer's port or a busy
// filesystem to come back: 1 s, doubling, at most 30 s. An attempt that ran at least
// kMaxBackoff before it failed was not a crash loop: the next backoff is 1 s again (else a job
// losing a machine every minute would wait 30 s at each restart from the sixth on).
constexpr std::chrono::seconds kFirstBackoff{1};
constexpr std::chrono::seconds kMaxBackoff{30};

}  // namespace

int launchWithRestarts(const LaunchOptions& opts, int max_restarts, std::ostream& log) {
  if (max_restarts < 0) throw ConfigError("--max-restarts must be >= 0, got " + std::to_string(max_restarts));
  LaunchOptions o = opts;
  std::chrono::seconds backoff = kFirstBackoff;
  for (int attempt = 0;; ++attempt) {
    o.extra_env["LOWCOMM_RESTART_COUNT"] = std::to_string(attempt);
    LaunchReport report;
    const auto started = std::chrono::steady_clock::now();
    const int rc = launch(o, log, &report);
    if (std::chrono::steady_clock::now() - started >= kMaxBackoff) backoff = kFirstBackoff;
    if (rc == 0 || report.interrupted || max_restarts == 0) return rc;
    const std::string because = "rank " + std::to_string(report.failed_rank) + " " + report.cause;
    if (attempt == max_restarts) {
      log << "lowcomm launch: giving up after " << max_restarts << " restart" << (max_restarts == 1 ? "" : "s")
          << std::endl;
      return rc;
    }
    if (const std::string why = whyItWouldRecur(report); !why.empty()) {
      const int left = max_restarts - attempt;
      log << "lowcomm launch: not restarting (" << left << " restart" << (left == 1 ? "" : "s") << " left): " << because << ": "
          << why << "; only a killed worker, a lost peer or a timeout is restarted" << std::endl;
      return rc;
    }
    log << "lowcomm launch: restart " << attempt + 1 << " of " << max_restarts << " in " << backoff.count()
        << " s: all " << o.nproc << " workers again, because " << because << std::endl;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

}  // namespace lowcomm::launch
