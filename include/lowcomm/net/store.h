// Key-value store used for rendezvous (like c10d::Store, minus what we do not need).
//
// Implementations: MemoryStore (ranks as threads in one process), PrefixStore (namespacing),
// and the authenticated TCP store in lowcomm/net/rdzv_store.h (ranks as processes).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace lowcomm::net {

using Bytes = std::vector<uint8_t>;

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Blocks until `key` exists; throws TimeoutError naming the key after `timeout`.
  virtual Bytes get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // True when `key` exists; never blocks.
  virtual bool check(const std::string& key) = 0;
  // Atomically adds `delta` to the integer at `key` (0 when absent); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // A store over the same keys for another thread to use at the same time as this one, so that
  // their round trips overlap (a rendezvous client opens a connection of its own; comm/mesh
  // connects a communicator's stream meshes at once this way). nullptr: use this one (its calls
  // are safe from several threads, one after the other).
  virtual std::shared_ptr<Store> fork() { return nullptr; }
};

// store->fork(), or the store itself when it has no other connection to give.
std::shared_ptr<Store> forkOrShare(const std::shared_ptr<Store>& store);

class MemoryStore : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  bool check(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> data_;
};

class PrefixStore : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, std::string prefix)
      : base_(std::move(base)), prefix_(std::move(prefix) + "/") {}
  void set(const std::string& key, const Bytes& value) override { base_->set(prefix_ + key, value); }
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    return base_->get(prefix_ + key, timeout);
  }
  bool check(const std::string& key) override { return base_->check(prefix_ + key); }
  int64_t add(const std::string& key, int64_t delta) override { return base_->add(prefix_ + key, delta); }
  std::shared_ptr<Store> fork() override {
    auto b = base_->fork();
    return b ? std::make_shared<PrefixStore>(std::move(b), prefix_.substr(0, prefix_.size() - 1)) : nullptr;
  }

 private:
  std::shared_ptr<Store> base_;
  std::string prefix_;
};

Bytes toBytes(const std::string& s);
std::string toString(const Bytes& b);

}  // namespace lowcomm::net
