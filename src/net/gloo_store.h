// Adapter: our Store seen as gloo::rendezvous::Store (private to the net layer).
#pragma once

#include <gloo/rendezvous/store.h>

#include "lowcomm/net/store.h"

namespace lowcomm::net {

class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(std::shared_ptr<net::Store> store, std::chrono::milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<net::Store> store_;
  std::chrono::milliseconds timeout_;
};

}  // namespace lowcomm::net
