// A connected, authenticated full mesh of ranks (private to the comm layer): the one place where
// a communicator's pairs come into being, for the world and for every split.
//
// Gloo's TCP pairs (Debian's 2022 Gloo) each listen on a fresh port and take the first
// connection that arrives as their peer. A stray connection to such a port (a port scan, a
// stranger on the host) so takes a pair's place: the real peer's connect is refused, and the pair
// fails its token check (pair_auth.h). Such a failure heals by connecting again on fresh ports,
// so connectLink tries up to kMeshTries times. Every try ends in a vote through the store: each
// rank publishes whether its pairs connected and authenticated, and all ranks retry together
// unless every vote is yes. A rank whose own try failed drops its pairs at once, so its peers'
// pending handshakes with it fail fast instead of waiting for kPairAuthTime.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "link.h"
#include "lowcomm/net/store.h"

namespace gloo::transport {
class Device;
}

namespace lowcomm::comm {

constexpr int kMeshTries = 3;
// The token handshake of one try: a stray peer that never answers costs at most this.
constexpr std::chrono::milliseconds kPairAuthTime{10000};

// Rendezvous of `size` ranks under `prefix` (tries after the first under prefix + "/tryK"),
// every pair authenticated with `token` (none when empty). When all tries fail: the rank's own
// error if it had one (AuthError naming the peer that failed the token check, PeerError, ...),
// else PeerError naming the first rank that failed and why. TimeoutError when a rank does not vote
// within `timeout`. A non-empty `congestion` is set on every pair socket once the mesh stands
// (congestion.h; ConfigError when the kernel does not offer it).
std::unique_ptr<Link> connectLink(const std::shared_ptr<net::Store>& store, const std::string& prefix, int rank,
                                  int size, const std::shared_ptr<gloo::transport::Device>& device,
                                  const std::string& token, std::chrono::milliseconds timeout,
                                  const std::string& congestion = {});

// fn(0) .. fn(n - 1), each on a thread of its own, all at once; rethrows the first failure once
// every thread ended.
void runAtOnce(size_t n, const std::function<void(size_t)>& fn);

// connectLink for each of `prefixes` at once, each on a thread with a store connection of its own
// (net::forkOrShare): their round trips overlap, so k meshes across a WAN cost about one. Returns
// the links in the order of `prefixes`, or rethrows the first failure once every thread ended.
std::vector<std::unique_ptr<Link>> connectLinks(const std::shared_ptr<net::Store>& store,
                                                const std::vector<std::string>& prefixes, int rank, int size,
                                                const std::shared_ptr<gloo::transport::Device>& device,
                                                const std::string& token, std::chrono::milliseconds timeout,
                                                const std::string& congestion = {});

}  // namespace lowcomm::comm
