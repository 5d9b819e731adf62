// Gloo TCP transport set-up: which address to bind, and a connected full-mesh context.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "lowcomm/net/store.h"

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace lowcomm::net {

struct TransportOptions {
  // Bind to this interface (e.g. "eth0"); empty: GLOO_SOCKET_IFNAME, else `address`.
  std::string iface;
  // Bind to this address or hostname; empty: the hostname's address, else 127.0.0.1.
  std::string address;
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

// Creates the TCP device the options name. Throws ConfigError when the interface or address
// cannot be used.
std::shared_ptr<gloo::transport::Device> makeDevice(const TransportOptions& opts);

// Rendezvous of `size` ranks through `store` (keys under `prefix`): each rank announces itself,
// waits for all others (TimeoutError listing the missing ranks), then Gloo connects every pair.
std::shared_ptr<gloo::Context> connectMesh(const std::shared_ptr<Store>& store, const std::string& prefix,
                                           int rank, int size,
                                           const std::shared_ptr<gloo::transport::Device>& device,
                                           std::chrono::milliseconds timeout);

// Waits until keys `prefix/arrived/<r>` exist for every r in [0, size); on timeout throws
// TimeoutError("... missing ranks: 2, 5").
void waitForRanks(Store& store, const std::string& prefix, int size, std::chrono::milliseconds timeout);

}  // namespace lowcomm::net
