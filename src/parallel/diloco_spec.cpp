// `strategy.name = "diloco"`: the [diloco] section's keys and the spec the trainer reads.
#include "lowcomm/parallel/diloco.h"
#include "lowcomm/parallel/strategy_spec.h"

namespace lowcomm::parallel {

schema::Section<DilocoOptions> dilocoSection() {
  using O = DilocoOptions;
  schema::Section<O> s("diloco", "DiLoCo: inner steps alone, an outer Nesterov step on the averaged pseudo-gradient");
  s.integer("period", &O::period, 1, 2147483647, "inner steps between outer steps")
      .number("outer_lr", &O::outer_lr, schema::Range::above(0), "outer SGD learning rate on the averaged pseudo-gradient")
      .number("outer_momentum", &O::outer_momentum, schema::Range::halfOpen(0, 1), "outer momentum")
      .flag("nesterov", &O::nesterov, "Nesterov outer momentum");
  return s;
}

StrategySpec dilocoSpec() {
  StrategySpec s;
  s.name = "diloco";
  s.doc = "DiLoCo: outer optimizer steps every period inner steps (pseudo-gradient through any codec)";
  s.options = optionsSection(dilocoSection());
  s.make = [](const StrategyContext& ctx, const std::any& options, const StrategyRun&) {
    return makeDilocoStrategy(ctx, std::any_cast<const DilocoOptions&>(options));
  };
  // The outer state only fits the same period (the outer hyper-parameters may change on resume).
  s.resume_key = [](const std::any& options, int) {
    return "diloco/" + std::to_string(std::any_cast<const DilocoOptions&>(options).period);
  };
  return s;
}

}  // namespace lowcomm::parallel
