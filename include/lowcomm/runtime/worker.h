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
#include "lowcomm/runtime/membership.h"
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
  std::shared_ptr<net::RdzvServer> server;  // rank 0 only (not with --elastic: the launcher hosts it)
  std::shared_ptr<net::Store> store;
  std::shared_ptr<comm::Communicator> comm;  // with --elastic: epoch `epoch`'s; null for a replacement
  // --elastic (LOWCOMM_ELASTIC=1; docs/elastic.md): the membership monitor, a factory of fresh
  // store clients (one per epoch's rendezvous, abortable), and the communicator's options.
  std::shared_ptr<MembershipMonitor> membership;
  MembershipMonitor::Connect connect;
  std::shared_ptr<net::RdzvClient> epoch_store;  // the rendezvous client of `comm`'s epoch
  net::Epoch epoch;  // of `comm`
  comm::CommOptions comm_options;
  net::TransportOptions transport;
};

// --elastic: joins the newest membership epoch after `after` that lists this worker's slot
// (waiting up to `timeout`; NotAMemberError when it does not list it) and sets w.comm, w.epoch
// and w.epoch_store; the monitor aborts them when the epoch moves on. A rendezvous aborted so (a
// member died while the others connected) is tried again at the next epoch.
void joinNextEpoch(Worker& w, int64_t after, std::chrono::milliseconds timeout);

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
