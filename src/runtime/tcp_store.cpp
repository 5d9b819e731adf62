#include "lowcomm/runtime/tcp_store.h"

#include "lowcomm/base/error.h"

namespace lowcomm::runtime {

TcpStore::TcpStore(const std::string& host, int port, bool is_server, int world, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(port);
  o.isServer = is_server;
  o.numWorkers = static_cast<size_t>(world);
  o.waitWorkers = false;  // our rendezvous waits itself and names the missing ranks
  o.timeout = timeout;
  try {
    store_ = c10::make_intrusive<c10d::TCPStore>(host, o);
  } catch (const std::exception& e) {
    const std::string where = host + ":" + std::to_string(port);
    if (is_server)
      throw ConfigError("rank 0 cannot host the rendezvous store on " + where + ": " + e.what());
    throw TimeoutError("cannot reach the rendezvous store at " + where + " within " +
                       std::to_string(timeout.count()) + " ms (is rank 0 running?): " + e.what());
  }
}

void TcpStore::set(const std::string& key, const net::Bytes& value) { store_->set(key, value); }

net::Bytes TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  try {
    store_->wait({key}, timeout);
  } catch (const std::exception& e) {
    throw TimeoutError("store: key '" + key + "' not set within " + std::to_string(timeout.count()) +
                       " ms: " + e.what());
  }
  return store_->get(key);
}

bool TcpStore::check(const std::string& key) { return store_->check({key}); }

int64_t TcpStore::add(const std::string& key, int64_t delta) { return store_->add(key, delta); }

}  // namespace lowcomm::runtime
