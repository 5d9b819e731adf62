#include <algorithm>
#include <stdexcept>

#include "lowcomm/base/error.h"
#include "lowcomm/parallel/strategy_spec.h"

namespace lowcomm::parallel {

void StrategyRegistry::add(StrategySpec spec) {
  for (const auto& s : specs_)
    if (s.name == spec.name || (!spec.options.name.empty() && s.options.name == spec.options.name))
      throw std::logic_error("strategy '" + spec.name + "' (section [" + spec.options.name + "]) registered twice");
  if (!spec.make) throw std::logic_error("strategy '" + spec.name + "' has no factory");
  specs_.push_back(std::move(spec));
}

const StrategySpec* StrategyRegistry::find(const std::string& name) const {
  for (const auto& s : specs_)
    if (s.name == name) return &s;
  return nullptr;
}

const StrategySpec& StrategyRegistry::at(const std::string& name) const {
  if (const auto* s = find(name)) return *s;
  std::string list;
  for (const auto& n : names()) list += (list.empty() ? "" : ", ") + n;
  throw ConfigError("key 'strategy.name' is '" + name + "'; expected one of: " + list);
}

std::vector<std::string> StrategyRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& s : specs_) out.push_back(s.name);
  std::sort(out.begin(), out.end());
  return out;
}

std::shared_ptr<const StrategyRegistry> builtinStrategies() {
  static const std::shared_ptr<const StrategyRegistry> builtin = [] {
    auto r = std::make_shared<StrategyRegistry>();
    r->add(ddpSpec());
    r->add(abSpec());
    r->add(localSgdSpec());
    r->add(dilocoSpec());
    r->add(gossipSpec());
    r->add(sspSpec());
    return r;
  }();
  return builtin;
}

}  // namespace lowcomm::parallel
