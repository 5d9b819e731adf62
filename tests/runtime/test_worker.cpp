// lowcomm_test_worker: a worker process for the multi-process tests (multiprocess_test.cpp).
//
// Usage: lowcomm_test_worker MODE [args]
//   allreduce  sum a float vector of value rank+1 over all ranks, check every element is
//              n(n+1)/2, print "rank R of N source=S local=L/LW ok"
//   crash K    rank K exits with status 7 right after rendezvous; the others run allreduces
//              until they fail (their dead peer) or the launcher stops them
//   threads    print "threads=T", LibTorch's intra-op threads after pinning
//   elastic K N  under `lowcomm launch --elastic`: rounds of allreduce (the round number's max,
//              and a count of the members) until round N; slot K's first worker SIGKILLs itself
//              at round N/3; an aborted round is healed by joining the next epoch. Prints
//              "slot S epoch E members M round R" at each epoch and "slot S done R" at the end,
//              and "slot S aborted after X ms" for each abort (since its last completed round)
// Environment: LC_TEST_RDZV_MS (rendezvous timeout), LC_TEST_TIMEOUT_MS (collective timeout).
// Any exception: "rank R: error: <what>" on stderr, exit status 1.
#include <ATen/Parallel.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "lowcomm/base/error.h"
#include "lowcomm/net/env.h"
#include "lowcomm/runtime/worker.h"

namespace {

using namespace lowcomm;

constexpr size_t kCount = 100003;  // odd and above one segment: exercises chunking

std::optional<std::chrono::milliseconds> msFromEnv(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const long ms = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || ms <= 0)
    throw ConfigError(std::string(name) + "='" + v + "' is not a positive number of milliseconds");
  return std::chrono::milliseconds(ms);
}

void allreduceOnce(runtime::Worker& w) {
  const int n = w.env.world;
  std::vector<float> buf(kCount, static_cast<float>(w.env.rank + 1));
  w.comm->allreduce(buf.data(), buf.size(), comm::DType::f32, comm::ReduceOp::sum);
  const float want = static_cast<float>(n) * static_cast<float>(n + 1) / 2.0f;
  for (size_t i = 0; i < buf.size(); ++i)
    if (buf[i] != want)
      throw Error("allreduce: element " + std::to_string(i) + " is " + std::to_string(buf[i]) +
                  ", expected " + std::to_string(want));
}

int runAllreduce(runtime::Worker& w) {
  allreduceOnce(w);
  std::cout << "rank " << w.env.rank << " of " << w.env.world << " source=" << w.env.source
            << " local=" << w.env.local_rank << "/" << w.env.local_world << " ok" << std::endl;
  return 0;
}

int runCrash(runtime::Worker& w, int victim) {
  if (w.env.rank == victim) std::_Exit(7);  // no unwinding, no goodbye to the peers
  // Bounded so a bug that lets collectives go on without rank K cannot hang the test.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < until) allreduceOnce(w);
  throw Error("allreduces went on for 60 s although rank " + std::to_string(victim) + " exited");
}

// Allreduces for up to 60 s after printing "spinning": a worker busy in collectives.
int runSpin(runtime::Worker& w) {
  std::cout << "rank " << w.env.rank << " spinning" << std::endl;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < until) allreduceOnce(w);
  return 0;
}

// One round: max of the round numbers (a replacement takes the members' round) and the member count.
int64_t elasticRound(runtime::Worker& w, int64_t round) {
  int64_t v[2] = {round, 1};
  w.comm->allreduce(&v[0], 1, comm::DType::i64, comm::ReduceOp::max);
  w.comm->allreduce(&v[1], 1, comm::DType::i64, comm::ReduceOp::sum);
  if (v[1] != static_cast<int64_t>(w.epoch.members.size()))
    throw Error("epoch " + std::to_string(w.epoch.number) + ": " + std::to_string(v[1]) + " ranks answered, " +
                std::to_string(w.epoch.members.size()) + " are members");
  return v[0];
}

int runElastic(runtime::Worker& w, int victim, int64_t rounds) {
  const auto& me = w.membership->env();
  const auto timeout = w.comm_options.rendezvousTimeout();
  if (me.joining()) {
    w.membership->announceReady();
    runtime::joinNextEpoch(w, 0, timeout);
  }
  auto say = [&](int64_t round) {
    std::cout << "slot " << me.slot << " epoch " << w.epoch.number << " members " << w.epoch.members.size() << " round "
              << round << std::endl;
  };
  int64_t round = me.joining() ? -1 : 0;
  say(round);
  auto last = std::chrono::steady_clock::now();
  while (round < rounds) {
    try {
      round = elasticRound(w, round) + 1;
      last = std::chrono::steady_clock::now();
      if (me.slot == victim && me.incarnation == 0 && round == rounds / 3) ::raise(SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a step's compute
    } catch (const Error& e) {  // aborted by the monitor, or the dead peer's closed sockets came first
      if (!dynamic_cast<const AbortedError*>(&e) && !dynamic_cast<const PeerError*>(&e)) throw;
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - last);
      std::cout << "slot " << me.slot << " aborted after " << ms.count() << " ms" << std::endl;
      runtime::joinNextEpoch(w, w.epoch.number, timeout);
      say(round);
    }
  }
  std::cout << "slot " << me.slot << " done " << round << std::endl;
  return 0;
}

int runThreads() {
  std::cout << "threads=" << at::get_num_threads() << std::endl;
  return 0;
}

int usage() {
  std::cerr << "usage: lowcomm_test_worker allreduce | crash K | threads | spin | elastic K N" << std::endl;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string mode = argv[1];
  if (!(mode == "allreduce" || mode == "threads" || mode == "spin" || (mode == "crash" && argc == 3) ||
        (mode == "elastic" && argc == 4)))
    return usage();
  std::string rank = "?";
  try {
    runtime::WorkerOptions opts;
    if (auto ms = msFromEnv("LC_TEST_RDZV_MS")) opts.rendezvous_timeout = *ms;
    if (auto ms = msFromEnv("LC_TEST_TIMEOUT_MS")) opts.comm.timeout = *ms;
    if (auto env = net::detectWorkerEnv()) rank = std::to_string(env->rank);
    runtime::Worker w = runtime::initWorker(opts);
    if (mode == "allreduce") return runAllreduce(w);
    if (mode == "threads") return runThreads();
    if (mode == "spin") return runSpin(w);
    if (mode == "elastic") return runElastic(w, std::stoi(argv[2]), std::stoll(argv[3]));
    return runCrash(w, std::stoi(argv[2]));
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank << ": error: " << e.what() << std::endl;
    return 1;
  }
}
