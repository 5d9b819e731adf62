#include "lowcomm/train/same_job.h"

#include <map>
#include <sstream>

#include "lowcomm/base/error.h"

namespace lowcomm::train {

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

std::map<std::string, std::string> keyValues(const std::string& description) {
  std::map<std::string, std::string> out;
  std::istringstream in(description);
  for (std::string line; std::getline(in, line);) {
    const auto eq = line.find(" = ");
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 3);
  }
  return out;
}

// "optimizer.lr (0.05 on rank 0, 0.1 here)" for every key whose value differs.
std::string differences(const std::string& ref, const std::string& other, int rank) {
  const auto a = keyValues(ref), b = keyValues(other);
  std::string out;
  auto add = [&](const std::string& key, const std::string& va, const std::string& vb) {
    out += (out.empty() ? "" : ", ") + key + " (" + va + " on rank 0, " + vb + " on rank " + std::to_string(rank) + ")";
  };
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    if (it == b.end()) add(k, v, "<missing>");
    else if (it->second != v) add(k, v, it->second);
  }
  for (const auto& [k, v] : b)
    if (!a.count(k)) add(k, "<missing>", v);
  return out.empty() ? "the same keys in another order" : out;
}

}  // namespace

std::string jobDescription(const std::string& resolved_toml, int64_t train_size, int64_t test_size, int world) {
  std::ostringstream out;
  std::istringstream in(resolved_toml);
  std::string section;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') {
      section = line.substr(1, line.find(']') - 1);
      continue;
    }
    const std::string key = section.empty() ? line : section + "." + line;
    bool per_host = false;
    for (const char* k : {"comm.iface ", "comm.address ", "data.dir ", "checkpoint.dir "}) per_host |= key.rfind(k, 0) == 0;
    if (per_host) continue;
    out << key << "\n";
  }
  out << "data.train_size = " << train_size << "\n"
      << "data.test_size = " << test_size << "\n"
      << "world_size = " << world << "\n";
  return out.str();
}

void checkSameJob(comm::Communicator& world, const std::string& description) {
  const int n = world.size();
  const int64_t mine = static_cast<int64_t>(fnv1a(description) >> 1);
  std::vector<int64_t> hashes(n);
  world.allgather(&mine, hashes.data(), 1, comm::DType::i64);
  bool same = true;
  for (int64_t h : hashes) same = same && h == hashes[0];
  if (same) return;
  std::vector<size_t> sizes(n);
  size_t len = description.size();
  world.allgather(&len, sizes.data(), 1, comm::DType::i64);
  size_t total = 0;
  for (size_t s : sizes) total += s;
  std::string all(total, '\0');
  world.allgatherv(description.data(), description.size(), all.data(), sizes, comm::DType::u8);
  std::vector<std::string> texts;
  for (size_t r = 0, at = 0; r < sizes.size(); at += sizes[r], ++r) texts.push_back(all.substr(at, sizes[r]));
  std::string msg = "ranks run different jobs (config, data set or world size differ from rank 0's):";
  for (int r = 1; r < n; ++r)
    if (hashes[r] != hashes[0]) msg += "\n  rank " + std::to_string(r) + ": " + differences(texts[0], texts[r], r);
  throw MismatchError(msg);
}

}  // namespace lowcomm::train
