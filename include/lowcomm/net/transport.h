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
  // Bind to this address or hostname; empty: see `route_to`.
  std::string address;
  // With neither of the above: bind to the local address this host reaches `route_to` from (the
  // rendezvous host, MASTER_ADDR), so a job told to rendezvous on 127.0.0.1 listens on loopback
  // only and one rendezvousing on a cluster network listens on that network only. Empty (or not
  // routable): the hostname's address, else 127.0.0.1.
  std::string route_to;
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

// Creates the TCP device the options name. Throws ConfigError when the interface or address
// cannot be used.
// Precedence: iface; GLOO_SOCKET_IFNAME (unless `address`); address; route_to; the hostname.
// Side effect: SIGPIPE's default disposition becomes "ignore" (process-wide, as in Python), so a
// write to a peer that closed is an error, not the death of the writer.
std::shared_ptr<gloo::transport::Device> makeDevice(const TransportOptions& opts);

// How long one pair may take to connect once every rank has arrived (at most `timeout`).
constexpr std::chrono::milliseconds kPairConnectTime{30000};

// Rendezvous of `size` ranks through `store` (keys under `prefix`): each rank announces itself,
// waits for all others (TimeoutError listing the missing ranks), then Gloo connects every pair,
// each within min(timeout, kPairConnectTime) (PeerError otherwise).
std::shared_ptr<gloo::Context> connectMesh(const std::shared_ptr<Store>& store, const std::string& prefix,
                                           int rank, int size,
                                           const std::shared_ptr<gloo::transport::Device>& device,
                                           std::chrono::milliseconds timeout);

// Waits until keys `prefix/arrived/<r>` exist for every r in [0, size); on timeout throws
// TimeoutError("... missing ranks: 2, 5").
// The local address whose route reaches `host` ("" when it does not resolve or has no route).
std::string localAddressTowards(const std::string& host);

void waitForRanks(Store& store, const std::string& prefix, int size, std::chrono::milliseconds timeout);

}  // namespace lowcomm::net
