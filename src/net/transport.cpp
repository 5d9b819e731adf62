#include "lowcomm/net/transport.h"

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

std::shared_ptr<gloo::transport::Device> makeDevice(const TransportOptions& opts) {
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
  // Gloo waits up to 5x the context timeout for pairs to connect; keep the total near `timeout`.
  ctx->setTimeout(std::max(std::chrono::milliseconds(1000), timeout / 5));
  GlooStoreAdapter adapter(std::make_shared<PrefixStore>(store, prefix + "/gloo"), timeout);
  auto dev = device;
  try {
    ctx->connectFullMesh(adapter, dev);
  } catch (const gloo::IoException& e) {
    throw PeerError(-1, std::string("rendezvous: connecting the full mesh failed: ") + e.what());
  } catch (const gloo::Exception& e) {
    throw PeerError(-1, std::string("rendezvous: connecting the full mesh failed: ") + e.what());
  }
  return ctx;
}

}  // namespace lowcomm::net
