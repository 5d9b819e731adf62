// Worker process start-up: identity from the launcher's environment, LibTorch thread pinning,
// the authenticated rendezvous (rank 0 hosts it; every rank proves LOWCOMM_JOB_TOKEN) and the
// world Communicator. Passed explicitly; nothing global.
#pragma once

#include <chrono>
#include <memory>

#include "lowcomm/comm/communicator.h"
#include "lowcomm/net/env.h"
#include "lowcomm/net/transport.h"
#include "lowcomm/runtime/launcher_watch.h"
#include "lowcomm/net/rdzv_store.h"

namespace lowcomm::runtime {

struct WorkerOptions {
  comm::CommOptions comm;            // group_size 0 means LOCAL_WORLD_SIZE
  net::TransportOptions transport;   // iface / address to bind
  std::chrono::milliseconds rendezvous_timeout{0};  // 0 = comm.timeout (the config's comm.timeout_s)
  bool pin_threads = true;           // LibTorch intra-op threads = cores / LOCAL_WORLD_SIZE
};

struct Worker {
  net::WorkerEnv env;
  std::shared_ptr<LauncherWatch> watch;     // started by lowcomm launch: exit when it dies
  std::shared_ptr<net::RdzvServer> server;  // rank 0 only
  std::shared_ptr<net::Store> store;
  std::shared_ptr<comm::Communicator> comm;
};

// LOWCOMM_JOB_TOKEN (set by lowcomm launch; exported by hand under torchrun, srun or mpirun).
// A job of one rank without it gets a random one; a larger job without it is a ConfigError.
std::string jobTokenFromEnv(int world);

// Throws ConfigError when no launcher environment is found (names the variables looked for),
// TimeoutError when ranks are missing at rendezvous (names them), AuthError when this process's
// job token is not the job's. Keep the Worker alive while
// the process works: its LauncherWatch ends the process when `lowcomm launch` dies.
Worker initWorker(const WorkerOptions& opts);

// Sets LibTorch's intra-op threads to max(1, hardware threads / local_world); returns it.
int pinTorchThreads(int local_world);

}  // namespace lowcomm::runtime
