// Launcher tests with real worker processes (/bin/sh scripts).
#include "lowcomm/launch/launcher.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "lowcomm/base/error.h"

namespace lowcomm::launch {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream is(text);
  for (std::string l; std::getline(is, l);) out.push_back(l);
  return out;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A zombie still answers kill(pid, 0); it counts as gone (the container's init may not reap).
bool processAlive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = content.rfind(')');
  return paren == std::string::npos || paren + 2 >= content.size() || content[paren + 2] != 'Z';
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "lowcomm_launch_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Options running `sh -c script` with output captured into the given streams.
LaunchOptions shellJob(int nproc, const std::string& script, std::ostream& out,
                       std::ostream& err) {
  LaunchOptions o;
  o.nproc = nproc;
  o.command = {"sh", "-c", script};
  o.out = &out;
  o.err = &err;
  o.grace = std::chrono::seconds(2);
  return o;
}

TEST(Launcher, AllSucceedWithTorchrunEnvironment) {
  std::ostringstream out, err, log;
  auto o = shellJob(3,
                    "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR "
                    "$MASTER_PORT $EXTRA; echo to-stderr >&2; printf 'no newline'",
                    out, err);
  o.master_port = 12345;
  o.extra_env["EXTRA"] = "x y";
  ASSERT_EQ(launch(o, log), 0) << log.str();
  const auto out_lines = lines(out.str());
  const auto err_lines = lines(err.str());
  for (int r = 0; r < 3; ++r) {
    const std::string p = "[rank " + std::to_string(r) + "] ";
    const std::string env = p + std::to_string(r) + " 3 " + std::to_string(r) +
                            " 3 127.0.0.1 12345 x y";
    EXPECT_EQ(std::count(out_lines.begin(), out_lines.end(), env), 1) << out.str();
    EXPECT_EQ(std::count(out_lines.begin(), out_lines.end(), p + "no newline"), 1) << out.str();
    EXPECT_EQ(std::count(err_lines.begin(), err_lines.end(), p + "to-stderr"), 1) << err.str();
  }
  EXPECT_EQ(out_lines.size(), 6u) << out.str();
  EXPECT_EQ(log.str(), "");
}

TEST(Launcher, NoOutputLostAndLinesStayWhole) {
  std::ostringstream out, err, log;
  auto o = shellJob(2, "seq 1 20000", out, err);
  ASSERT_EQ(launch(o, log), 0) << log.str();
  std::vector<int> next(2, 1);
  for (const auto& l : lines(out.str())) {
    int rank = -1, value = -1;
    ASSERT_EQ(std::sscanf(l.c_str(), "[rank %d] %d", &rank, &value), 2) << l;
    ASSERT_TRUE(rank == 0 || rank == 1) << l;
    ASSERT_EQ(value, next[rank]++) << l;  // in order, nothing dropped, nothing split
  }
  EXPECT_EQ(next[0], 20001);
  EXPECT_EQ(next[1], 20001);
}

TEST(Launcher, FailFastStopsTheOtherWorkers) {
  TempDir dir;
  const std::string d = dir.path().string();
  // Every rank records its shell's and its child's pid; rank 2 fails once all have done so.
  const std::string script =
      "sleep 60 & echo $$ $! > " + d + "/tmp.$RANK && mv " + d + "/tmp.$RANK " + d +
      "/pid.$RANK\n"
      "if [ \"$RANK\" = 2 ]; then\n"
      "  while [ $(ls " + d + " | grep -c pid) -lt 4 ]; do sleep 0.02; done\n"
      "  echo failing; exit 3\n"
      "fi\n"
      "wait\n";
  std::ostringstream out, err, log;
  auto o = shellJob(4, script, out, err);
  const auto start = Clock::now();
  EXPECT_EQ(launch(o, log), 3);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));

  const std::string l = log.str();
  EXPECT_EQ(lines(l).size(), 1u) << l;
  EXPECT_TRUE(contains(l, "lowcomm launch: rank 2 (pid ")) << l;
  EXPECT_TRUE(contains(l, ") exited with status 3 (data error); stopping the other 3 workers")) << l;
  EXPECT_TRUE(contains(out.str(), "[rank 2] failing")) << out.str();
  for (int r = 0; r < 4; ++r) {
    std::ifstream f(dir.path() / ("pid." + std::to_string(r)));
    pid_t shell = 0, child = 0;
    ASSERT_TRUE(f >> shell >> child) << "rank " << r;
    EXPECT_FALSE(processAlive(shell)) << "rank " << r << " shell " << shell;
    EXPECT_FALSE(processAlive(child)) << "rank " << r << " sleep " << child;
  }
}

TEST(Launcher, WorkersIgnoringSigtermAreKilledAfterGrace) {
  TempDir dir;
  const std::string ready = (dir.path() / "ready").string();
  // Rank 0 ignores SIGTERM (so does its sleep, which inherits that) before rank 1 fails.
  const std::string script = "trap '' TERM; [ \"$RANK\" = 0 ] && touch " + ready +
                             " && exec sleep 60\n"
                             "while [ ! -e " + ready + " ]; do sleep 0.02; done; exit 5";
  std::ostringstream out, err, log;
  auto o = shellJob(2, script, out, err);
  o.grace = std::chrono::milliseconds(300);
  const auto start = Clock::now();
  EXPECT_EQ(launch(o, log), 5);
  EXPECT_GE(Clock::now() - start, o.grace);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(contains(log.str(), "rank 1 (pid ")) << log.str();
  EXPECT_TRUE(contains(log.str(), "exited with status 5 (I/O error); stopping the other 1 worker\n"))
      << log.str();
}

TEST(Launcher, KilledWorkerIsReportedWithSignalName) {
  std::ostringstream out, err, log;
  auto o = shellJob(2, "[ \"$RANK\" = 1 ] && kill -9 $$; sleep 60", out, err);
  const auto start = Clock::now();
  EXPECT_EQ(launch(o, log), 128 + 9);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  EXPECT_TRUE(contains(log.str(), "lowcomm launch: rank 1 (pid ")) << log.str();
  EXPECT_TRUE(contains(log.str(), "was killed by signal 9 (SIGKILL); stopping the other 1 worker"))
      << log.str();
}

TEST(Launcher, FreePortIsChosenWhenNoneGiven) {
  const int port = findFreePort("127.0.0.1");
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
  // It was free: binding it must work now (no other process should have taken it this fast).
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ::close(fd);

  std::ostringstream out, err, log;
  auto o = shellJob(2, "echo $MASTER_PORT", out, err);
  ASSERT_EQ(o.master_port, 0);
  ASSERT_EQ(launch(o, log), 0) << log.str();
  const auto l = lines(out.str());
  ASSERT_EQ(l.size(), 2u) << out.str();
  int ports[2] = {0, 0};
  for (const auto& line : l) {
    int rank = -1, p = -1;
    ASSERT_EQ(std::sscanf(line.c_str(), "[rank %d] %d", &rank, &p), 2) << line;
    ports[rank] = p;
  }
  EXPECT_GT(ports[0], 0);
  EXPECT_EQ(ports[0], ports[1]);
}

// The Python backend's store needs a port of its own beside MASTER_PORT (torch's store holds that
// one): the launcher hands every rank the same free one, unless the user set LOWCOMM_RDZV_PORT.
TEST(Launcher, PythonBackendGetsARendezvousPortOfItsOwn) {
  std::ostringstream out, err, log;
  auto o = shellJob(2, "echo $MASTER_PORT ${LOWCOMM_RDZV_PORT:-0}", out, err);
  ASSERT_EQ(launch(o, log), 0) << log.str();
  const auto l = lines(out.str());
  ASSERT_EQ(l.size(), 2u) << out.str();
  int master[2] = {0, 0}, rdzv[2] = {0, 0};
  for (const auto& line : l) {
    int rank = -1, m = -1, r = -1;
    ASSERT_EQ(std::sscanf(line.c_str(), "[rank %d] %d %d", &rank, &m, &r), 3) << line;
    master[rank] = m;
    rdzv[rank] = r;
  }
  EXPECT_GT(rdzv[0], 0) << "no LOWCOMM_RDZV_PORT";
  EXPECT_NE(rdzv[0], master[0]);
  EXPECT_EQ(rdzv[0], rdzv[1]);
  std::ostringstream out2, err2;
  auto mine = shellJob(1, "echo ${LOWCOMM_RDZV_PORT:-0}", out2, err2);
  mine.extra_env["LOWCOMM_RDZV_PORT"] = "4242";
  ASSERT_EQ(launch(mine, log), 0) << log.str();
  EXPECT_TRUE(contains(out2.str(), "[rank 0] 4242")) << out2.str();
}

// quiet_nonzero hides the other ranks' standard output, never their errors: a failing rank 2
// shows rank 2's message.
TEST(Launcher, QuietNonzeroHidesOtherRanksOutputButNotTheirErrors) {
  std::ostringstream out, err, log;
  auto o = shellJob(3, "echo out $RANK; echo err $RANK >&2", out, err);
  o.quiet_nonzero = true;
  ASSERT_EQ(launch(o, log), 0) << log.str();
  EXPECT_EQ(out.str(), "[rank 0] out 0\n");
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(err.str().find("[rank " + std::to_string(r) + "] err " + std::to_string(r) + "\n"), std::string::npos)
        << err.str();
  std::ostringstream out2, err2, log2;
  auto f = shellJob(3, "if [ $RANK = 2 ]; then echo 'error: bad shard on rank 2' >&2; exit 3; fi; sleep 30", out2, err2);
  f.quiet_nonzero = true;
  EXPECT_NE(launch(f, log2), 0);
  EXPECT_NE(err2.str().find("[rank 2] error: bad shard on rank 2"), std::string::npos) << err2.str();
}

TEST(Launcher, SignalsToTheLauncherAreForwarded) {
  TempDir dir;
  const std::string d = dir.path().string();
  // Bounded sleep: should the signal never be sent, the test fails instead of hanging.
  const std::string script = "trap 'echo got TERM; exit 0' TERM; sleep 8 & touch " + d +
                             "/ready.$RANK; wait";
  std::ostringstream out, err, log;
  auto o = shellJob(2, script, out, err);
  std::thread sender([&] {
    const auto give_up = Clock::now() + std::chrono::seconds(5);
    auto ready = [&] {
      return fs::exists(dir.path() / "ready.0") && fs::exists(dir.path() / "ready.1");
    };
    while (!ready() && Clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    // launch() installs its handler before starting any worker, and is still running: the
    // workers wait for the signal.
    if (ready()) ::kill(::getpid(), SIGTERM);
  });
  const auto start = Clock::now();
  const int rc = launch(o, log);
  sender.join();
  EXPECT_EQ(rc, 128 + SIGTERM);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  EXPECT_TRUE(contains(log.str(), "received SIGTERM; forwarding it to the 2 running workers"))
      << log.str();
  EXPECT_TRUE(contains(out.str(), "[rank 0] got TERM")) << out.str();
  EXPECT_TRUE(contains(out.str(), "[rank 1] got TERM")) << out.str();
}

TEST(Launcher, MissingCommandIsAConfigErrorNamingIt) {
  std::ostringstream out, err, log;
  LaunchOptions o;
  o.nproc = 2;
  o.command = {"lowcomm-no-such-command-xyz", "--flag"};
  o.out = &out;
  o.err = &err;
  try {
    launch(o, log);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "'lowcomm-no-such-command-xyz'")) << e.what();
    EXPECT_TRUE(contains(e.what(), "No such file or directory")) << e.what();
  }
}

TEST(Launcher, BadOptionsAreConfigErrors) {
  std::ostringstream log;
  LaunchOptions o;
  o.command = {"true"};
  auto bad = [&](auto mutate) {
    LaunchOptions c = o;
    mutate(c);
    EXPECT_THROW(launch(c, log), ConfigError);
  };
  bad([](LaunchOptions& c) { c.nproc = 0; });
  bad([](LaunchOptions& c) { c.command.clear(); });
  bad([](LaunchOptions& c) { c.master_port = 70000; });
  bad([](LaunchOptions& c) { c.master_addr = ""; });
  bad([](LaunchOptions& c) { c.extra_env["RANK"] = "5"; });
  bad([](LaunchOptions& c) { c.grace = std::chrono::milliseconds(-1); });
  EXPECT_THROW(findFreePort("no-such-host.invalid"), ConfigError);
}

}  // namespace
}  // namespace lowcomm::launch
