// The configuration's sections bound into TrainConfig (private to lowcomm_train): the common
// sections declared in config_keys.cpp, each registered strategy's section from its spec, and
// the rules across sections (config_rules.cpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "lowcomm/base/schema.h"
#include "lowcomm/parallel/strategy_spec.h"
#include "lowcomm/train/config.h"

namespace lowcomm::train {

// One declared section (or part of one: [compress] binds three structs) as functions on the whole
// config. Keys are full ("model.dim").
struct BoundSection {
  std::string name;
  std::string doc;
  std::vector<schema::KeyInfo> keys;
  std::function<void(TrainConfig&, const std::string& key, const schema::Value&)> set;  // checks the value
  std::function<schema::Value(const TrainConfig&, const std::string& key)> get;
  std::function<void(const TrainConfig&)> validate;  // every key's value and the section's own rules
};

// The common sections, in the order the resolved TOML and the docs list them; strategy.name's
// choices are the registry's names.
std::vector<BoundSection> commonSections(const parallel::StrategyRegistry& strategies);
// commonSections() followed by every registered strategy's section (over c.strategy_options).
std::vector<BoundSection> allSections(const parallel::StrategyRegistry& strategies);
// c.strategy_options filled with every registered strategy's defaults.
void addStrategyDefaults(TrainConfig& c);

// Rules across sections (model and data, parallel grid and strategy, codec and optimizer, ...);
// throws schema::KeyError naming the key at fault.
void validateAcrossSections(const TrainConfig& c);

// A section of TrainConfig reached through `part`.
template <class S>
BoundSection bindSection(schema::Section<S> section, std::function<S&(TrainConfig&)> part) {
  auto s = std::make_shared<const schema::Section<S>>(std::move(section));
  return BoundSection{
      s->name(), s->doc(), s->keys(),
      [s, part](TrainConfig& c, const std::string& k, const schema::Value& v) { s->set(part(c), k, v); },
      [s, part](const TrainConfig& c, const std::string& k) { return s->get(part(const_cast<TrainConfig&>(c)), k); },
      [s, part](const TrainConfig& c) { s->validate(part(const_cast<TrainConfig&>(c))); }};
}

}  // namespace lowcomm::train
