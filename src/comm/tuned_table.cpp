#include "lowcomm/comm/tuned_table.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <tuple>

#include "lowcomm/base/error.h"
#include "lowcomm/comm/algorithm_table.h"
#include "lowcomm/comm/exchange.h"
#include "lowcomm/comm/selector.h"

namespace lowcomm::comm {

namespace {

int shapeGroup(int group_size) { return std::max(1, group_size); }

std::string ruleName(const TunedRule& r) {
  return "rule (world " + std::to_string(r.world) + ", group_size " + std::to_string(r.group_size) +
         (r.max_bytes == SIZE_MAX ? std::string(", no max_bytes") : ", max_bytes " + std::to_string(r.max_bytes)) + ")";
}

}  // namespace

TunedTable TunedTable::fromRules(std::vector<TunedRule> rules, const std::string& where) {
  for (auto& r : rules) {
    r.group_size = shapeGroup(r.group_size);
    if (r.world < 1 || r.world > kMaxRanks)
      throw ConfigError(where + ": " + ruleName(r) + ": world must be in [1, " + std::to_string(kMaxRanks) + "]");
    if (!networkAllreduce(r.algo))
      throw ConfigError(where + ": " + ruleName(r) + ": algorithm '" + algoName(r.algo) +
                        "' is not a network allreduce (" + networkAllreduceNames() + ")");
    if (!shapeFits(r.algo, r.world, r.group_size))
      throw ConfigError(where + ": " + ruleName(r) + ": " + algoName(r.algo) +
                        " needs groups of several ranks and more than one group");
  }
  std::stable_sort(rules.begin(), rules.end(), [](const TunedRule& a, const TunedRule& b) {
    return std::tie(a.world, a.group_size, a.max_bytes) < std::tie(b.world, b.group_size, b.max_bytes);
  });
  for (size_t i = 0; i < rules.size(); ++i) {
    const bool last_of_shape = i + 1 == rules.size() || rules[i + 1].world != rules[i].world ||
                               rules[i + 1].group_size != rules[i].group_size;
    if (!last_of_shape && rules[i + 1].max_bytes == rules[i].max_bytes)
      throw ConfigError(where + ": two rules for the same sizes: " + ruleName(rules[i]));
    if (last_of_shape && rules[i].max_bytes != SIZE_MAX)
      throw ConfigError(where + ": " + ruleName(rules[i]) +
                        " is its shape's largest: it needs no max_bytes (larger buffers would have no rule)");
  }
  TunedTable t;
  t.rules_ = std::move(rules);
  return t;
}

TunedTable TunedTable::load(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw ConfigError("cannot read tuning file '" + path + "'");
  nlohmann::json j;
  try {
    f >> j;
  } catch (const std::exception& e) {
    throw ConfigError("tuning file '" + path + "' is not JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("rules") || !j["rules"].is_array())
    throw ConfigError("tuning file '" + path + "': no array 'rules'");
  std::vector<TunedRule> rules;
  for (size_t i = 0; i < j["rules"].size(); ++i) {
    const auto& e = j["rules"][i];
    const std::string at = "tuning file '" + path + "': rules[" + std::to_string(i) + "]";
    auto integer = [&](const char* key) -> int64_t {
      if (!e.contains(key) || !e[key].is_number_integer() || e[key].get<int64_t>() < 0)
        throw ConfigError(at + ": '" + key + "' must be a non-negative integer");
      return e[key].get<int64_t>();
    };
    if (!e.is_object() || !e.contains("algo") || !e["algo"].is_string())
      throw ConfigError(at + ": needs a string 'algo'");
    TunedRule r;
    r.world = static_cast<int>(std::min<int64_t>(integer("world"), INT32_MAX));
    r.group_size = static_cast<int>(std::min<int64_t>(integer("group_size"), INT32_MAX));
    r.max_bytes = e.contains("max_bytes") ? static_cast<size_t>(integer("max_bytes")) : SIZE_MAX;
    try {
      r.algo = parseAlgo(e["algo"].get<std::string>());
    } catch (const ConfigError& err) {
      throw ConfigError(at + ": " + err.what());
    }
    rules.push_back(r);
  }
  return fromRules(std::move(rules), "tuning file '" + path + "'");
}

Algo TunedTable::choose(size_t bytes, int world, int group_size) const {
  const int g = shapeGroup(group_size);
  for (const auto& r : rules_)
    if (r.world == world && r.group_size == g && bytes <= r.max_bytes) return r.algo;
  return Algo::automatic;
}

std::string TunedTable::json(const std::string& setting) const {
  nlohmann::json rules = nlohmann::json::array();
  for (const auto& r : rules_) {
    nlohmann::json e = {{"world", r.world}, {"group_size", r.group_size}, {"algo", algoName(r.algo)}};
    if (r.max_bytes != SIZE_MAX) e["max_bytes"] = r.max_bytes;
    rules.push_back(e);
  }
  return nlohmann::json{{"setting", setting}, {"rules", rules}}.dump(1) + "\n";
}

}  // namespace lowcomm::comm
