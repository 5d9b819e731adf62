// Multi-process tier of the worker runtime: lowcomm_test_worker processes rendezvous through
// the real authenticated rendezvous store and run collectives over real sockets, started by the launcher or by hand
// with an explicit environment (Slurm, Open MPI, none at all, a rank missing).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lowcomm/launch/launcher.h"

#ifndef LC_TEST_WORKER
#error "LC_TEST_WORKER must name the lowcomm_test_worker executable"
#endif

namespace lowcomm {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Env = std::map<std::string, std::string>;

const char* const kWorker = LC_TEST_WORKER;
const std::string kAddr = "127.0.0.1";

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string readFile(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "lowcomm_mp_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// What a worker started by hand needs to run, and nothing a launcher would leave behind.
Env minimalEnv() {
  Env env;
  for (const char* name : {"PATH", "LD_LIBRARY_PATH", "TMPDIR"})
    if (const char* v = std::getenv(name)) env[name] = v;
  env["LOWCOMM_JOB_TOKEN"] = "multiprocess-test-job-token";  // what `lowcomm launch` would hand out
  return env;
}

// A worker started by hand with exactly `env`, stdout and stderr into files. The destructor
// SIGKILLs it (by pid) if it is still running, so a failed assertion leaves nothing behind.
class WorkerProcess {
 public:
  WorkerProcess(const std::vector<std::string>& args, const Env& env, const fs::path& dir,
                const std::string& name, const std::string& program = kWorker)
      : out_(dir / (name + ".out")), err_(dir / (name + ".err")) {
    std::vector<std::string> argv_s{program};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_s;
    for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int rc = ::posix_spawn(&pid_, program.c_str(), &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      pid_ = -1;
      throw std::runtime_error("posix_spawn " + program + ": " + std::strerror(rc));
    }
  }
  ~WorkerProcess() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  // Exit status (128+signal when killed) once it exits before `deadline`; nullopt otherwise
  // (the process is then still running; the destructor kills it).
  std::optional<int> waitUntil(Clock::time_point deadline) {
    while (true) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (r < 0 && errno != EINTR) throw std::runtime_error(std::string("waitpid: ") + std::strerror(errno));
      if (Clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  pid_t pid() const { return pid_; }
  std::string out() const { return readFile(out_); }
  std::string err() const { return readFile(err_); }

 private:
  pid_t pid_ = -1;
  fs::path out_, err_;
};

// Launcher options for `lowcomm_test_worker args...` with captured output. Rendezvous and
// collective timeouts keep a broken runtime from hanging the test until ctest's timeout.
launch::LaunchOptions workerJob(int nproc, std::vector<std::string> args, std::ostream& out,
                                std::ostream& err) {
  launch::LaunchOptions o;
  o.nproc = nproc;
  o.master_addr = kAddr;
  o.command = {kWorker};
  o.command.insert(o.command.end(), args.begin(), args.end());
  o.extra_env = {{"LC_TEST_RDZV_MS", "30000"}, {"LC_TEST_TIMEOUT_MS", "30000"}};
  o.out = &out;
  o.err = &err;
  o.grace = std::chrono::seconds(2);
  return o;
}

// Launcher path: torchrun variables, the rendezvous store hosted by rank 0, a 4-rank allreduce over
// sockets with an odd element count gives the exact sum on every rank.
TEST(Multiprocess, AllreduceThroughLauncher) {
  std::ostringstream out, err, log;
  const int rc = launch::launch(workerJob(4, {"allreduce"}, out, err), log);
  ASSERT_EQ(rc, 0) << log.str() << err.str();
  for (int r = 0; r < 4; ++r) {
    const std::string want = "[rank " + std::to_string(r) + "] rank " + std::to_string(r) +
                             " of 4 source=torchrun local=" + std::to_string(r) + "/4 ok";
    EXPECT_TRUE(contains(out.str(), want)) << "missing '" << want << "' in:\n" << out.str();
  }
}

// Fail fast: a rank that dies after rendezvous makes the job end long before the 20 s
// collective timeout, and the launcher names the rank that died first and its status.
TEST(Multiprocess, DeadRankFailsFast) {
  std::ostringstream out, err, log;
  auto o = workerJob(3, {"crash", "1"}, out, err);
  o.extra_env["LC_TEST_TIMEOUT_MS"] = "20000";
  const auto t0 = Clock::now();
  const int rc = launch::launch(o, log);
  const double took = secondsSince(t0);
  EXPECT_EQ(rc, 7) << log.str() << err.str();
  EXPECT_LT(took, 30.0);
  EXPECT_TRUE(contains(log.str(), "rank 1 ")) << log.str();
  EXPECT_TRUE(contains(log.str(), "status 7")) << log.str();
}

// Rendezvous with a rank that never comes: both present ranks give up after 2 s (`timeout_var`
// set to 2000 ms) and say which rank is missing.
void expectRendezvousTimeout(const char* timeout_var) {
  TempDir dir;
  const int port = launch::findFreePort(kAddr);
  std::vector<std::unique_ptr<WorkerProcess>> procs;
  for (int r = 0; r < 2; ++r) {
    Env env = minimalEnv();
    env["RANK"] = std::to_string(r);
    env["WORLD_SIZE"] = "3";
    env["MASTER_ADDR"] = kAddr;
    env["MASTER_PORT"] = std::to_string(port);
    env[timeout_var] = "2000";
    procs.push_back(std::make_unique<WorkerProcess>(std::vector<std::string>{"allreduce"}, env,
                                                    dir.path(), "rank" + std::to_string(r)));
  }
  const auto deadline = Clock::now() + std::chrono::seconds(15);
  for (int r = 0; r < 2; ++r) {
    const auto status = procs[r]->waitUntil(deadline);
    ASSERT_TRUE(status.has_value()) << "rank " << r << " still running after 15 s";
    EXPECT_NE(*status, 0) << "rank " << r;
    EXPECT_TRUE(contains(procs[r]->err(), "missing ranks: 2")) << "rank " << r << ":\n" << procs[r]->err();
  }
}

// --elastic through the real launcher: slot 1 dies a third of the way; the other three never
// exit, abort their collective within a second of the death, go on in an epoch of three, and
// take in slot 1's replacement, which catches up with their round; the job ends with status 0.
TEST(Multiprocess, ElasticReplacesADeadWorkerWhileTheOthersGoOn) {
  std::ostringstream out, err, log;
  auto o = workerJob(4, {"elastic", "1", "150"}, out, err);
  o.elastic.enabled = true;
  o.elastic.heartbeat = std::chrono::milliseconds(100);
  o.elastic.replace_after = std::chrono::milliseconds(200);
  o.extra_env["LC_TEST_TIMEOUT_MS"] = "30000";
  const auto t0 = Clock::now();
  const int rc = launch::launch(o, log);
  EXPECT_EQ(rc, 0) << log.str() << err.str();
  EXPECT_LT(secondsSince(t0), 60.0);
  const std::string l = log.str(), s = out.str();
  EXPECT_TRUE(contains(l, "membership epoch 2: slot 1 left: was killed by signal 9")) << l;
  EXPECT_TRUE(contains(l, "membership epoch 3: slot 1 joined (incarnation 1)")) << l;
  for (int slot : {0, 2, 3}) {
    const std::string me = "slot " + std::to_string(slot) + " ";
    EXPECT_TRUE(contains(s, me + "epoch 2 members 3")) << s;
    EXPECT_TRUE(contains(s, me + "epoch 3 members 4")) << s;
    EXPECT_TRUE(contains(s, me + "done 150")) << s;
  }
  EXPECT_TRUE(contains(s, "slot 1 done 150")) << s;  // the replacement
  // Every abort within a second of the round the dead worker did not join.
  size_t at = 0;
  int aborts = 0;
  while ((at = s.find(" aborted after ", at)) != std::string::npos) {
    at += 15;
    EXPECT_LT(std::stol(s.substr(at)), 1000) << s;
    ++aborts;
  }
  EXPECT_GE(aborts, 3) << s;
}

TEST(Multiprocess, RendezvousTimeoutNamesMissingRank) { expectRendezvousTimeout("LC_TEST_RDZV_MS"); }

// Without its own rendezvous timeout the rendezvous follows the communicator's (comm.timeout_s in
// a config), not a fixed 300 s.
TEST(Multiprocess, RendezvousTimeoutFollowsCommTimeout) { expectRendezvousTimeout("LC_TEST_TIMEOUT_MS"); }

// Two workers started by hand with the environment `envFor(rank)` (plus the master address);
// each must print its allreduce line with the given source.
void expectAllreduceWithEnv(const std::function<Env(int rank)>& envFor, const std::string& source) {
  TempDir dir;
  const int port = launch::findFreePort(kAddr);
  std::vector<std::unique_ptr<WorkerProcess>> procs;
  for (int r = 0; r < 2; ++r) {
    Env env = minimalEnv();
    for (const auto& kv : envFor(r)) env.insert(kv);
    env["MASTER_ADDR"] = kAddr;
    env["MASTER_PORT"] = std::to_string(port);
    env["LC_TEST_RDZV_MS"] = "30000";
    env["LC_TEST_TIMEOUT_MS"] = "30000";
    procs.push_back(std::make_unique<WorkerProcess>(std::vector<std::string>{"allreduce"}, env,
                                                    dir.path(), "rank" + std::to_string(r)));
  }
  const auto deadline = Clock::now() + std::chrono::seconds(45);
  for (int r = 0; r < 2; ++r) {
    const auto status = procs[r]->waitUntil(deadline);
    ASSERT_TRUE(status.has_value()) << "rank " << r << " still running after 45 s";
    EXPECT_EQ(*status, 0) << "rank " << r << ":\n" << procs[r]->err();
    const std::string want = "rank " + std::to_string(r) + " of 2 source=" + source + " local=" +
                             std::to_string(r) + "/2 ok";
    EXPECT_TRUE(contains(procs[r]->out(), want)) << "missing '" << want << "' in:\n" << procs[r]->out();
  }
}

// Alive and not a zombie (orphans may be re-parented to a pid 1 that does not reap them).
bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = content.rfind(')');
  return !content.empty() && paren != std::string::npos && paren + 2 < content.size() && content[paren + 2] != 'Z';
}

// A launcher that is SIGKILLed cannot stop its workers; they notice that they were re-parented
// (LOWCOMM_LAUNCHER_PID is no longer their parent) and exit within a second instead of training
// on. The "launcher" is a shell that starts two workers spinning on allreduces.
TEST(Multiprocess, WorkersExitWhenTheLauncherDies) {
  TempDir dir;
  const int port = launch::findFreePort(kAddr);
  const std::string d = dir.path().string();
  std::string script = "export LOWCOMM_LAUNCHER_PID=$$ MASTER_ADDR=" + kAddr + " MASTER_PORT=" + std::to_string(port) +
                       " WORLD_SIZE=2 LC_TEST_RDZV_MS=30000 LC_TEST_TIMEOUT_MS=30000\n";
  for (int r = 0; r < 2; ++r)
    script += "RANK=" + std::to_string(r) + " '" + kWorker + "' spin > '" + d + "/w" + std::to_string(r) + ".out' 2> '" +
              d + "/w" + std::to_string(r) + ".err' &\necho $! > '" + d + "/w" + std::to_string(r) + ".pid'\n";
  script += "wait\n";
  WorkerProcess launcher({"-c", script}, minimalEnv(), dir.path(), "launcher", "/bin/sh");
  const auto up = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < up && !(contains(readFile(dir.path() / "w0.out"), "spinning") &&
                                contains(readFile(dir.path() / "w1.out"), "spinning")))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(contains(readFile(dir.path() / "w1.out"), "spinning")) << readFile(dir.path() / "w1.err");
  const pid_t w0 = std::stoi(readFile(dir.path() / "w0.pid")), w1 = std::stoi(readFile(dir.path() / "w1.pid"));
  const pid_t launcher_pid = launcher.pid();
  ::kill(launcher_pid, SIGKILL);
  ASSERT_TRUE(launcher.waitUntil(Clock::now() + std::chrono::seconds(5)).has_value());
  const auto t0 = Clock::now();
  while (secondsSince(t0) < 10 && (running(w0) || running(w1))) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const bool gone = !running(w0) && !running(w1);
  if (!gone) ::kill(w0, SIGKILL), ::kill(w1, SIGKILL);
  ASSERT_TRUE(gone) << "workers still running 10 s after their launcher was killed";
  EXPECT_LT(secondsSince(t0), 5.0);
  const std::string errs = readFile(dir.path() / "w0.err") + readFile(dir.path() / "w1.err");
  EXPECT_TRUE(contains(errs, "the launcher (pid " + std::to_string(launcher_pid) + ") died")) << errs;
}

// A process that knows the job's address but not its token cannot join: it is refused with a
// clear message while the job's two ranks go on with their collectives.
TEST(Multiprocess, ForeignProcessIsRefusedAndTheJobGoesOn) {
  TempDir dir;
  const int port = launch::findFreePort(kAddr);
  auto env = [&](int rank, const std::string& token) {
    Env e = minimalEnv();
    e["RANK"] = std::to_string(rank);
    e["WORLD_SIZE"] = "2";
    e["MASTER_ADDR"] = kAddr;
    e["MASTER_PORT"] = std::to_string(port);
    e["LOWCOMM_JOB_TOKEN"] = token;
    e["LC_TEST_RDZV_MS"] = "30000";
    e["LC_TEST_TIMEOUT_MS"] = "30000";
    return e;
  };
  WorkerProcess r0({"spin"}, env(0, "the-job-token-0123"), dir.path(), "r0");
  WorkerProcess r1({"spin"}, env(1, "the-job-token-0123"), dir.path(), "r1");
  const auto up = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < up && !(contains(readFile(dir.path() / "r0.out"), "spinning") &&
                                contains(readFile(dir.path() / "r1.out"), "spinning")))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(contains(readFile(dir.path() / "r1.out"), "spinning")) << readFile(dir.path() / "r1.err");
  WorkerProcess intruder({"allreduce"}, env(1, "not-the-job-token-99"), dir.path(), "intruder");
  const auto status = intruder.waitUntil(Clock::now() + std::chrono::seconds(15));
  ASSERT_TRUE(status.has_value()) << "the intruder is still running";
  EXPECT_NE(*status, 0);
  EXPECT_TRUE(contains(intruder.err(), "refused this process")) << intruder.err();
  EXPECT_TRUE(running(r0.pid()) && running(r1.pid())) << readFile(dir.path() / "r0.err") << readFile(dir.path() / "r1.err");
  EXPECT_FALSE(contains(readFile(dir.path() / "r0.err") + readFile(dir.path() / "r1.err"), "error"));
}

// Identity from Slurm's variables alone (no RANK/WORLD_SIZE).
TEST(Multiprocess, SlurmEnvironment) {
  expectAllreduceWithEnv(
      [](int r) {
        return Env{{"SLURM_PROCID", std::to_string(r)},
                   {"SLURM_NTASKS", "2"},
                   {"SLURM_LOCALID", std::to_string(r)},
                   {"SLURM_NTASKS_PER_NODE", "2"}};
      },
      "slurm");
}

// Identity from Open MPI's variables alone (no RANK/WORLD_SIZE).
TEST(Multiprocess, OpenMpiEnvironment) {
  expectAllreduceWithEnv(
      [](int r) {
        return Env{{"OMPI_COMM_WORLD_RANK", std::to_string(r)},
                   {"OMPI_COMM_WORLD_SIZE", "2"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(r)},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
      },
      "openmpi");
}

// Thread pinning: with LOCAL_WORLD_SIZE=2 each worker gets half the hardware threads (>= 1).
TEST(Multiprocess, ThreadsPinnedToLocalShare) {
  std::ostringstream out, err, log;
  ASSERT_EQ(launch::launch(workerJob(2, {"threads"}, out, err), log), 0) << log.str() << err.str();
  const int want = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2);
  for (int r = 0; r < 2; ++r) {
    const std::string line = "[rank " + std::to_string(r) + "] threads=" + std::to_string(want);
    EXPECT_TRUE(contains(out.str(), line)) << "missing '" << line << "' in:\n" << out.str();
  }
}

// Without any launcher variables the worker refuses to start and names what it looked for.
TEST(Multiprocess, NoLauncherEnvironmentIsAConfigError) {
  TempDir dir;
  WorkerProcess p({"allreduce"}, minimalEnv(), dir.path(), "lone");
  const auto status = p.waitUntil(Clock::now() + std::chrono::seconds(15));
  ASSERT_TRUE(status.has_value()) << "worker still running after 15 s";
  EXPECT_NE(*status, 0);
  const std::string e = p.err();
  EXPECT_TRUE(contains(e, "RANK")) << e;
  EXPECT_TRUE(contains(e, "WORLD_SIZE")) << e;
}

}  // namespace
}  // namespace lowcomm
