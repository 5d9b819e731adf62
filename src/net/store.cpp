#include "lowcomm/net/store.h"

#include "lowcomm/base/error.h"

namespace lowcomm::net {

void MemoryStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
}

Bytes MemoryStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool found = cv_.wait_for(lock, timeout, [&] { return data_.count(key) > 0; });
  if (!found)
    throw TimeoutError("store: key '" + key + "' not set within " + std::to_string(timeout.count()) + " ms");
  return data_[key];
}

bool MemoryStore::check(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.count(key) > 0;
}

int64_t MemoryStore::add(const std::string& key, int64_t delta) {
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& b = data_[key];
    if (!b.empty()) value = std::stoll(toString(b));
    value += delta;
    b = toBytes(std::to_string(value));
  }
  cv_.notify_all();
  return value;
}

std::shared_ptr<Store> forkOrShare(const std::shared_ptr<Store>& store) {
  auto f = store->fork();
  return f ? f : store;
}

Bytes toBytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string toString(const Bytes& b) { return std::string(b.begin(), b.end()); }

}  // namespace lowcomm::net
