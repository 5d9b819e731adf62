// `strategy.name = "local_sgd"`: the [local_sgd] section's keys and the spec the trainer reads.
#include "lowcomm/parallel/local_sgd.h"
#include "lowcomm/parallel/strategy_spec.h"

namespace lowcomm::parallel {

schema::Section<LocalSgdOptions> localSgdSection() {
  using O = LocalSgdOptions;
  schema::Section<O> s("local_sgd", "local SGD: replicas step alone and average their parameters every period");
  s.integer("period", &O::period, 1, 2147483647, "local steps between parameter averagings")
      .steps("start_step", &O::start_step, 0, "DDP steps first (post-local SGD)")
      .flag("average_optimizer", &O::average_optimizer, "average the optimizer's moments with the parameters")
      .flag("hierarchical", &O::hierarchical, "DDP inside each node every step, averaging across nodes");
  return s;
}

StrategySpec localSgdSpec() {
  StrategySpec s;
  s.name = "local_sgd";
  s.doc = "local SGD (post-local, hierarchical): parameter averaging every period steps";
  s.options = optionsSection(localSgdSection());
  s.make = [](const StrategyContext& ctx, const std::any& options, const StrategyRun& run) {
    auto o = std::any_cast<const LocalSgdOptions&>(options);
    o.start_step = static_cast<double>(o.start_step.of(run.total_steps));
    return makeLocalSgdStrategy(ctx, o);
  };
  // Which ranks hold which weights depends on all four keys.
  s.resume_key = [](const std::any& options, int) {
    const auto& l = std::any_cast<const LocalSgdOptions&>(options);
    return "local_sgd/" + std::to_string(l.period) + "/" + std::to_string(l.start_step.value) + "/" +
           (l.average_optimizer ? "opt" : "params") + (l.hierarchical ? "/hier" : "");
  };
  return s;
}

}  // namespace lowcomm::parallel
