// Worker process start-up: identity from the launcher's environment, LibTorch thread pinning,
// TCPStore rendezvous and the world Communicator. Passed explicitly; nothing global.
#pragma once

#include <chrono>
#include <memory>

#include "lowcomm/comm/communicator.h"
#include "lowcomm/net/env.h"
#include "lowcomm/net/transport.h"
#include "lowcomm/runtime/tcp_store.h"

namespace lowcomm::runtime {

struct WorkerOptions {
  comm::CommOptions comm;            // group_size 0 means LOCAL_WORLD_SIZE
  net::TransportOptions transport;   // iface / address to bind
  std::chrono::milliseconds rendezvous_timeout{std::chrono::seconds(300)};
  bool pin_threads = true;           // LibTorch intra-op threads = cores / LOCAL_WORLD_SIZE
};

struct Worker {
  net::WorkerEnv env;
  std::shared_ptr<TcpStore> store;
  std::shared_ptr<comm::Communicator> comm;
};

// Throws ConfigError when no launcher environment is found (names the variables looked for),
// TimeoutError when ranks are missing at rendezvous (names them).
Worker initWorker(const WorkerOptions& opts);

// Sets LibTorch's intra-op threads to max(1, hardware threads / local_world); returns it.
int pinTorchThreads(int local_world);

}  // namespace lowcomm::runtime
