// Named binary blobs for compressor state in checkpoints (residuals, PowerSGD factors, step
// counters). The training layer stores each blob as a tensor; this layer stays torch-free.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "lowcomm/base/error.h"

namespace lowcomm::compress {

using StateMap = std::map<std::string, std::vector<uint8_t>>;

template <typename T>
void putState(StateMap& s, const std::string& key, const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  s[key] = std::move(b);
}

// Missing key: false (state from a run without it). Wrong size: DataError naming the key.
template <typename T>
bool getState(const StateMap& s, const std::string& key, std::vector<T>& v) {
  auto it = s.find(key);
  if (it == s.end()) return false;
  if (it->second.size() % sizeof(T) != 0)
    throw DataError("compressor state '" + key + "' has " + std::to_string(it->second.size()) +
                    " bytes, not a multiple of " + std::to_string(sizeof(T)));
  v.resize(it->second.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), it->second.data(), it->second.size());
  return true;
}

}  // namespace lowcomm::compress
