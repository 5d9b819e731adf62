// launchWithRestarts() with real /bin/sh workers: only what can heal is restarted, after a
// printed backoff; a failure that would recur is refused, naming its class.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "lowcomm/base/exit_status.h"
#include "lowcomm/launch/launcher.h"

namespace lowcomm::launch {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

class RunsDir {
 public:
  RunsDir() {
    std::string tmpl = (fs::temp_directory_path() / "lowcomm_restarts_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~RunsDir() { fs::remove_all(path_); }
  std::string runs() const { return (path_ / "runs").string(); }
  // How many attempts started (each worker appends a line).
  int count() const {
    std::ifstream in(runs());
    int n = 0;
    for (std::string l; std::getline(in, l);) ++n;
    return n;
  }

 private:
  fs::path path_;
};

// One worker: attempt k (0-based, counted in the runs file) exits with statuses[k] ("kill" =
// SIGKILL itself); attempts past the list exit 0.
LaunchOptions job(const RunsDir& d, const std::vector<std::string>& statuses, std::ostream& out) {
  std::string script = "echo run >> '" + d.runs() + "'; n=$(wc -l < '" + d.runs() + "'); case $n in ";
  for (size_t k = 0; k < statuses.size(); ++k)
    script += std::to_string(k + 1) + ") " + (statuses[k] == "kill" ? "kill -9 $$" : "exit " + statuses[k]) + ";; ";
  script += "esac; exit 0";
  LaunchOptions o;
  o.nproc = 1;
  o.command = {"sh", "-c", script};
  o.out = &out;
  o.err = &out;
  o.grace = std::chrono::seconds(1);
  return o;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(Restarts, ErrorsThatWouldRecurAreNotRestartedAndTheLogSaysWhy) {
  const std::pair<int, std::string> cases[] = {
      {kExitConfig, "config error"}, {kExitData, "data error"}, {kExitCheckpoint, "corrupt checkpoint"}};
  for (const auto& [status, name] : cases) {
    RunsDir d;
    std::ostringstream out, log;
    EXPECT_EQ(launchWithRestarts(job(d, {std::to_string(status)}, out), 3, log), status) << log.str();
    EXPECT_EQ(d.count(), 1) << name << ": restarted although it would recur\n" << log.str();
    EXPECT_TRUE(contains(log.str(), "exited with status " + std::to_string(status) + " (" + name + ")")) << log.str();
    EXPECT_TRUE(contains(log.str(), "not restarting")) << log.str();
  }
}

TEST(Restarts, AKilledWorkerIsRestartedAfterAPrintedBackoff) {
  RunsDir d;
  std::ostringstream out, log;
  const auto t0 = Clock::now();
  EXPECT_EQ(launchWithRestarts(job(d, {"kill"}, out), 2, log), 0) << log.str();
  EXPECT_EQ(d.count(), 2) << log.str();
  EXPECT_GE(Clock::now() - t0, std::chrono::seconds(1)) << "no backoff before the restart";
  EXPECT_TRUE(contains(log.str(), "restart 1 of 2 in 1 s")) << log.str();
  EXPECT_TRUE(contains(log.str(), "killed by signal 9 (SIGKILL)")) << log.str();
}

TEST(Restarts, PeerLostAndTimeoutAreRestartedWithADoublingBackoff) {
  RunsDir d;
  std::ostringstream out, log;
  const auto t0 = Clock::now();
  EXPECT_EQ(launchWithRestarts(job(d, {std::to_string(kExitPeerLost), std::to_string(kExitTimeout)}, out), 3, log), 0)
      << log.str();
  EXPECT_EQ(d.count(), 3) << log.str();
  EXPECT_GE(Clock::now() - t0, std::chrono::seconds(3)) << "backoff of 1 s then 2 s";
  EXPECT_TRUE(contains(log.str(), "(peer lost)")) << log.str();
  EXPECT_TRUE(contains(log.str(), "(timeout)")) << log.str();
  EXPECT_TRUE(contains(log.str(), "restart 1 of 3 in 1 s")) << log.str();
  EXPECT_TRUE(contains(log.str(), "restart 2 of 3 in 2 s")) << log.str();
}

// A rank that sees its peer die may exit first (peer lost, which heals); the peer's own error,
// observed while the launcher stops the job, is the cause and decides.
TEST(Restarts, AnErrorThatRecursIsTheCauseEvenWhenItsPeerReportsFirst) {
  RunsDir d;
  std::ostringstream out, log;
  LaunchOptions o = job(d, {}, out);
  o.nproc = 2;
  o.grace = std::chrono::seconds(3);
  const std::string ready = d.runs() + ".ready";  // rank 1 ignores SIGTERM from here on
  o.command = {"sh", "-c",
               "if [ $RANK = 0 ]; then while [ ! -e '" + ready + "' ]; do sleep 0.01; done; echo run >> '" + d.runs() +
                   "'; exit " + std::to_string(kExitPeerLost) + "; else trap '' TERM; touch '" + ready +
                   "'; sleep 0.3; exit " + std::to_string(kExitCheckpoint) + "; fi"};
  EXPECT_EQ(launchWithRestarts(o, 2, log), kExitCheckpoint) << log.str();
  EXPECT_EQ(d.count(), 1) << log.str();
  EXPECT_TRUE(contains(log.str(), "rank 1 exited with status 4 (corrupt checkpoint)")) << log.str();
  EXPECT_TRUE(contains(log.str(), "not restarting")) << log.str();
}

TEST(Restarts, AnUnknownStatusIsNotRestarted) {
  RunsDir d;
  std::ostringstream out, log;
  EXPECT_EQ(launchWithRestarts(job(d, {"1"}, out), 2, log), 1) << log.str();
  EXPECT_EQ(d.count(), 1) << log.str();
  EXPECT_TRUE(contains(log.str(), "not restarting")) << log.str();
}

}  // namespace
}  // namespace lowcomm::launch
