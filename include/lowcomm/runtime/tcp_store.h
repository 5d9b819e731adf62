// Rendezvous store across processes: c10d::TCPStore (torchrun's convention: rank 0 hosts it at
// MASTER_ADDR:MASTER_PORT), seen as a lowcomm::net::Store.
#pragma once

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "lowcomm/net/store.h"

namespace lowcomm::runtime {

class TcpStore : public net::Store {
 public:
  // The server (rank 0) listens on host:port; clients connect, retrying until `timeout`, and
  // throw TimeoutError naming the address when it never comes up.
  TcpStore(const std::string& host, int port, bool is_server, int world, std::chrono::milliseconds timeout);
  void set(const std::string& key, const net::Bytes& value) override;
  net::Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  bool check(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  // The underlying c10d store (e.g. for c10d::ProcessGroupGloo in baselines).
  c10::intrusive_ptr<c10d::Store> c10dStore() const { return store_; }

 private:
  template <typename F>
  auto guarded(const char* what, const std::string& key, F&& f);

  std::string where_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
};

}  // namespace lowcomm::runtime
