#include "lowcomm/net/transport.h"

#include <arpa/inet.h>
#include <signal.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include "gloo_store.h"
#include "lowcomm/base/error.h"

namespace lowcomm::net {

namespace {
std::shared_ptr<gloo::transport::Device> tryDevice(const gloo::transport::tcp::attr& attr, const std::string& what) {
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw ConfigError("cannot bind the Gloo TCP transport to " + what + ": " + e.what());
  }
}
}  // namespace

// A UDP socket connected to the host: the kernel picks the route and its source address, and no
// packet is sent.
std::string localAddressTowards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || !res) return "";
  std::string out;
  const int fd = ::socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_storage self{};
  socklen_t len = sizeof(self);
  char text[INET6_ADDRSTRLEN] = {0};
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len) == 0) {
    const void* a = self.ss_family == AF_INET6 ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&self)->sin6_addr)
                                               : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&self)->sin_addr);
    if (::inet_ntop(self.ss_family, a, text, sizeof(text))) out = text;
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  return out;
}

// Gloo writes with writev, which raises SIGPIPE (default: death) when the peer has closed: a
// survivor writing to a dead or aborted peer must get an error it can handle instead. Only the
// default disposition is replaced; a handler the program installed stays.
void ignoreSigpipe() {
  struct sigaction old {};
  if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL && !(old.sa_flags & SA_SIGINFO))
    ::signal(SIGPIPE, SIG_IGN);
}

std::shared_ptr<gloo::transport::Device> makeDevice(const TransportOptions& opts) {
  ignoreSigpipe();
  std::string iface = opts.iface;
  if (iface.empty() && opts.address.empty()) {
    if (const char* env = std::getenv("GLOO_SOCKET_IFNAME"); env && *env) iface = env;
  }
  if (!iface.empty()) {
    gloo::transport::tcp::attr attr;
    attr.iface = iface;
    return tryDevice(attr, "interface '" + iface + "'");
  }
  if (!opts.address.empty()) return tryDevice(gloo::transport::tcp::attr(opts.address.c_str()), "address '" + opts.address + "'");
  if (!opts.route_to.empty()) {
    const std::string local = localAddressTowards(opts.route_to);
    if (!local.empty())
      return tryDevice(gloo::transport::tcp::attr(local.c_str()),
                       "address " + local + " (the one this host reaches MASTER_ADDR " + opts.route_to + " from)");
  }
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) == 0 && host[0]) {
    try {
      return gloo::transport::tcp::CreateDevice(gloo::transport::tcp::attr(host));
    } catch (const std::exception&) {
      // The hostname does not resolve to a bindable address (common in containers).
    }
  }
  return tryDevice(gloo::transport::tcp::attr("127.0.0.1"), "127.0.0.1");
}

void waitForRanks(Store& store, const std::string& prefix, int size, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> missing;
  for (int r = 0; r < size; ++r) missing.push_back(r);
  auto sleep = std::chrono::milliseconds(1);
  auto listMissing = [&] {
    std::string list;
    for (size_t i = 0; i < missing.size(); ++i) list += (i ? ", " : "") + std::to_string(missing[i]);
    return list;
  };
  while (true) {
    std::vector<int> still;
    try {
      for (int r : missing)
        if (!store.check(prefix + "/arrived/" + std::to_string(r))) still.push_back(r);
    } catch (const PeerError& e) {
      throw PeerError(e.rank(), "rendezvous: lost the store while waiting for ranks; missing ranks: " +
                                    listMissing() + ": " + e.what());
    }
    missing.swap(still);
    if (missing.empty()) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      const std::string list = listMissing();
      throw TimeoutError("rendezvous: " + std::to_string(missing.size()) + " of " + std::to_string(size) +
                         " ranks did not arrive within " + std::to_string(timeout.count()) +
                         " ms; missing ranks: " + list);
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::milliseconds(50));
  }
}

std::shared_ptr<gloo::Context> connectMesh(const std::shared_ptr<Store>& store, const std::string& prefix,
                                           int rank, int size,
                                           const std::shared_ptr<gloo::transport::Device>& device,
                                           std::chrono::milliseconds timeout) {
  LC_ENFORCE(size >= 1 && rank >= 0 && rank < size, "rank ", rank, " world ", size);
  store->set(prefix + "/arrived/" + std::to_string(rank), toBytes("1"));
  waitForRanks(*store, prefix, size, timeout);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  // Gloo waits up to 5x the context timeout for each pair to connect. Every rank has arrived, so
  // a pair that takes longer is broken (its peer failed, or a stranger took its port): fail it
  // within kPairConnectTime, so the mesh can be tried again (comm/mesh.h).
  ctx->setTimeout(std::max(std::chrono::milliseconds(200), std::min(timeout, kPairConnectTime) / 5));
  GlooStoreAdapter adapter(std::make_shared<PrefixStore>(store, prefix + "/gloo"), timeout);
  auto dev = device;
  try {
    ctx->connectFullMesh(adapter, dev);
  } catch (const gloo::IoException& e) {
    throw PeerError(-1, std::string("rendezvous: connecting the full mesh failed: ") + e.what());
  } catch (const gloo::Exception& e) {
    throw PeerError(-1, std::string("rendezvous: connecting the full mesh failed: ") + e.what());
  }
  ctx->setTimeout(std::max(std::chrono::milliseconds(1000), timeout / 5));  // for later waits without their own
  return ctx;
}

}  // namespace lowcomm::net
