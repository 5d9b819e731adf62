// torch's c10d::Store (the one init_process_group made: TCPStore, FileStore, a PrefixStore over
// them) seen as lowcomm's rendezvous store, so the backend meets its peers where torch does.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "lowcomm/base/error.h"
#include "lowcomm/net/store.h"

namespace lowcomm::torchdist {

class C10dStore : public net::Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const net::Bytes& value) override { store_->set(key, value); }
  net::Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    try {
      store_->wait({key}, timeout);
    } catch (const std::exception& e) {
      throw TimeoutError("rendezvous: key '" + key + "' did not appear in torch's store within " +
                         std::to_string(timeout.count()) + " ms: " + e.what());
    }
    return store_->get(key);
  }
  bool check(const std::string& key) override { return store_->check({key}); }
  int64_t add(const std::string& key, int64_t delta) override { return store_->add(key, delta); }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace lowcomm::torchdist
