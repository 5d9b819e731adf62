#include "lowcomm/runtime/tcp_store.h"

#include "lowcomm/base/error.h"

namespace lowcomm::runtime {

TcpStore::TcpStore(const std::string& host, int port, bool is_server, int world, std::chrono::milliseconds timeout)
    : where_(host + ":" + std::to_string(port)) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(port);
  o.isServer = is_server;
  o.numWorkers = static_cast<size_t>(world);
  o.waitWorkers = false;  // our rendezvous waits itself and names the missing ranks
  o.timeout = timeout;
  try {
    store_ = c10::make_intrusive<c10d::TCPStore>(host, o);
  } catch (const std::exception& e) {
    const std::string& where = where_;
    if (is_server)
      throw ConfigError("rank 0 cannot host the rendezvous store on " + where + ": " + e.what());
    throw TimeoutError("cannot reach the rendezvous store at " + where + " within " +
                       std::to_string(timeout.count()) + " ms (is rank 0 running?): " + e.what());
  }
}

// Rank 0 hosts the store: once it is gone every call fails; say so instead of "Broken pipe".
template <typename F>
auto TcpStore::guarded(const char* what, const std::string& key, F&& f) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw PeerError(0, std::string("rendezvous store at ") + where_ + " (hosted by rank 0) failed during " + what +
                           "('" + key + "'); did rank 0 exit? " + e.what());
  }
}

void TcpStore::set(const std::string& key, const net::Bytes& value) {
  guarded("set", key, [&] { store_->set(key, value); });
}

net::Bytes TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  try {
    store_->wait({key}, timeout);
  } catch (const std::exception& e) {
    throw TimeoutError("store: key '" + key + "' not set within " + std::to_string(timeout.count()) +
                       " ms: " + e.what());
  }
  return guarded("get", key, [&] { return store_->get(key); });
}

bool TcpStore::check(const std::string& key) {
  return guarded("check", key, [&] { return store_->check({key}); });
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  return guarded("add", key, [&] { return store_->add(key, delta); });
}

}  // namespace lowcomm::runtime
