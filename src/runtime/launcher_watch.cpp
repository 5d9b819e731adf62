#include "lowcomm/runtime/launcher_watch.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <utility>

#include "lowcomm/base/error.h"
#include "lowcomm/base/proc.h"

namespace lowcomm::runtime {

long launcherPidFromEnv() {
  const char* v = std::getenv("LOWCOMM_LAUNCHER_PID");
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long pid = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || pid <= 0)
    throw ConfigError(std::string("environment variable LOWCOMM_LAUNCHER_PID='") + v + "' is not a process id");
  return pid;
}

namespace {

// State and start time (fields 3 and 22 of /proc/PID/stat); empty state when there is no such process.
std::pair<char, std::string> processState(long pid) {
  const std::string content = readProcFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = content.rfind(')');  // the command name may contain spaces
  if (content.empty() || paren == std::string::npos || paren + 2 >= content.size()) return {'\0', ""};
  std::istringstream rest(content.substr(paren + 2));
  std::string field, start;
  char state = '\0';
  rest >> state;
  for (int i = 4; i <= 22 && rest >> field; ++i) start = field;
  return {state, start};
}

}  // namespace

LauncherWatch::LauncherWatch(long launcher_pid, std::string who, std::chrono::milliseconds period)
    : pid_(launcher_pid), who_(std::move(who)), period_(period) {
  if (pid_ <= 0) return;
  const auto [state, start] = processState(pid_);
  if (state == '\0' || state == 'Z') orphaned();
  start_time_ = start;
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, period_, [this] { return stop_; }))
      if (!launcherAlive()) orphaned();
  });
}

bool LauncherWatch::launcherAlive() const {
  const auto [state, start] = processState(pid_);
  return state != '\0' && state != 'Z' && start == start_time_;
}

LauncherWatch::~LauncherWatch() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void LauncherWatch::orphaned() const {
  std::fprintf(stderr, "%s: error: the launcher (pid %ld) died; exiting\n", who_.c_str(), pid_);
  std::fflush(stderr);
  std::_Exit(1);  // other threads may be inside collectives: no unwinding, no destructors
}

}  // namespace lowcomm::runtime
