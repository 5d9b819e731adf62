// What the trainer and the command line know about a training strategy, in one place beside
// its code: the name (`strategy.name`), its config section's declared keys, the factory, the
// resume key and the lines its summary block prints as. The trainer and the CLI name no
// strategy: they read a StrategyRegistry. A new strategy is a spec function in src/parallel plus
// one line in builtinStrategies() (or, for a strategy outside the library, registry.add()).
//
// Contract:
// - options: the section parsed and validated (schema::AnySection over the spec's own options
//   struct); the factory and the resume key receive it back as the same std::any.
// - make() is collective over ctx.world.
// - resumeKey(): the part of the checkpoint's resume key that depends on the strategy; its state
//   only fits a run with the same key. "" for a strategy without such state.
// - summaryLines(): (label, text) rows of the summary block the strategy wrote under its name
//   (Strategy::summary()); none when it writes none.
#pragma once

#include <any>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lowcomm/base/schema.h"

namespace lowcomm::parallel {

class Strategy;
struct StrategyContext;

// What a factory gets besides the context and its options.
struct StrategyRun {
  int64_t total_steps = 0;  // optimizer steps of the whole run (fractions in options resolve against it)
  uint64_t seed = 0;        // the run's seed
  int zero_stage = 0;       // strategy.zero (0 unless the spec accepts ZeRO)
};

struct StrategySpec {
  std::string name;
  std::string doc;  // one line: what it does and when to use it
  schema::AnySection options;
  std::function<std::unique_ptr<Strategy>(const StrategyContext&, const std::any& options, const StrategyRun&)> make;
  std::function<std::string(const std::any& options, int zero_stage)> resume_key;  // null: ""
  std::function<std::vector<std::pair<std::string, std::string>>(const nlohmann::json& block)> summary_lines;  // null: none
  // What the common config may combine it with.
  bool accepts_zero = false;         // strategy.zero > 0 (sharded optimizer state)
  bool accepts_interleaved = true;   // parallel.schedule = "interleaved" (its forward is the model's)
};

// The specs by name; a value (no process-wide state): a program or a test adds its own.
class StrategyRegistry {
 public:
  // Throws std::logic_error when the name or its section is taken.
  void add(StrategySpec spec);
  const StrategySpec* find(const std::string& name) const;
  // Throws ConfigError naming `strategy.name` and the valid names.
  const StrategySpec& at(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::vector<StrategySpec>& specs() const { return specs_; }

 private:
  std::vector<StrategySpec> specs_;
};

// ddp (with ZeRO), ab, local_sgd, diloco, gossip, ssp.
std::shared_ptr<const StrategyRegistry> builtinStrategies();

// Each built-in strategy's spec, defined beside its code.
StrategySpec ddpSpec();
StrategySpec abSpec();
StrategySpec localSgdSpec();
StrategySpec dilocoSpec();
StrategySpec gossipSpec();
StrategySpec sspSpec();

// A spec's options section from a typed one.
template <class Options>
schema::AnySection optionsSection(schema::Section<Options> s) {
  return schema::erase(std::move(s));
}

}  // namespace lowcomm::parallel
