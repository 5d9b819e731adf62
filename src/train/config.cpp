// Loading a configuration: defaults, the file, the overrides, then validation of every section
// and of the rules across them.
#include "lowcomm/train/config.h"

#include <map>
#include <sstream>
#include <toml++/toml.h>

#include "config_schema.h"
#include "config_toml.h"
#include "lowcomm/base/error.h"

namespace lowcomm::train {

namespace {

std::shared_ptr<const parallel::StrategyRegistry> orBuiltin(std::shared_ptr<const parallel::StrategyRegistry> r) {
  return r ? r : parallel::builtinStrategies();
}

// Every key's section, for applying values.
class Keys {
 public:
  explicit Keys(const std::vector<BoundSection>& sections) : sections_(sections) {
    for (const auto& s : sections_)
      for (const auto& k : s.keys) owner_[k.key] = &s;
  }
  void set(TrainConfig& c, const std::string& key, const schema::Value& v) const {
    const auto it = owner_.find(key);
    if (it == owner_.end()) throw schema::KeyError(key, "is unknown (valid keys: `lowcomm config keys`)");
    it->second->set(c, key, v);
  }

 private:
  const std::vector<BoundSection>& sections_;
  std::map<std::string, const BoundSection*> owner_;
};

void walk(TrainConfig& c, const Keys& keys, const toml::table& t, const std::string& prefix) {
  for (const auto& [k, v] : t) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const auto* sub = v.as_table()) {
      if (!prefix.empty()) throw schema::KeyError(key, "is nested too deeply");
      walk(c, keys, *sub, key);
    } else {
      keys.set(c, key, tomlValue(key, v));
    }
  }
}

void applyOverride(TrainConfig& c, const Keys& keys, const std::string& o) {
  const auto eq = o.find('=');
  if (eq == std::string::npos || eq == 0) throw ConfigError("--set expects section.key=value, got '" + o + "'");
  const std::string key = o.substr(0, eq), value = o.substr(eq + 1);
  toml::table t;
  try {
    t = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    t = toml::table{{"v", value}};  // a bare word is a string
  }
  keys.set(c, key, tomlValue(key, *t.get("v")));
}

}  // namespace

void addStrategyDefaults(TrainConfig& c) {
  for (const auto& spec : c.strategies->specs()) c.strategy_options[spec.options.name] = spec.options.defaults();
}

std::vector<BoundSection> allSections(const parallel::StrategyRegistry& strategies) {
  auto out = commonSections(strategies);
  for (const auto& spec : strategies.specs()) {
    const auto& o = spec.options;
    out.push_back(BoundSection{
        o.name, o.doc, o.keys,
        [o](TrainConfig& c, const std::string& k, const schema::Value& v) { o.set(c.strategy_options.at(o.name), k, v); },
        [o](const TrainConfig& c, const std::string& k) { return o.get(c.strategy_options.at(o.name), k); },
        [o](const TrainConfig& c) { o.validate(c.strategy_options.at(o.name)); }});
  }
  return out;
}

const parallel::StrategySpec& strategySpec(const TrainConfig& c) { return orBuiltin(c.strategies)->at(c.strategy.name); }

const std::any& strategyOptions(const TrainConfig& c) { return c.strategy_options.at(strategySpec(c).options.name); }

int64_t runSteps(double value, int64_t total_steps) { return schema::RunSteps(value).of(total_steps); }

TrainConfig loadConfig(const std::string& path, const std::vector<std::string>& overrides,
                       std::shared_ptr<const parallel::StrategyRegistry> strategies) {
  TrainConfig c;
  c.strategies = orBuiltin(std::move(strategies));
  addStrategyDefaults(c);
  const auto sections = allSections(*c.strategies);
  const Keys keys(sections);
  std::string where = "--set";
  try {
    if (!path.empty()) {
      where = path;
      walk(c, keys, parseTomlFile(path), "");
    }
    where = "--set";
    for (const auto& o : overrides) applyOverride(c, keys, o);
    where = path.empty() ? "config" : path;
    for (const auto& s : sections) s.validate(c);
    validateAcrossSections(c);
  } catch (const schema::KeyError& e) {
    throw ConfigError(where + ": " + e.what());
  }
  return c;
}

std::vector<schema::KeyInfo> configKeyInfo(std::shared_ptr<const parallel::StrategyRegistry> strategies) {
  std::vector<schema::KeyInfo> out;
  for (const auto& s : allSections(*orBuiltin(std::move(strategies))))
    out.insert(out.end(), s.keys.begin(), s.keys.end());
  return out;
}

std::vector<std::string> configKeys() {
  std::vector<std::string> out;
  for (const auto& k : configKeyInfo()) out.push_back(k.key);
  return out;
}

}  // namespace lowcomm::train
