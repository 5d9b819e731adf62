// `strategy.name = "ssp"`: the [ssp] section's keys and the spec the trainer reads.
#include "lowcomm/parallel/ssp.h"
#include "lowcomm/parallel/strategy_spec.h"

namespace lowcomm::parallel {

schema::Section<SspOptions> sspSection() {
  using O = SspOptions;
  schema::Section<O> s("ssp", "stale-synchronous parallel: sharded parameter servers, bounded staleness");
  s.integer("staleness", &O::staleness, -1, 2147483647,
            "steps a rank may run ahead of the slowest; -1 = unbounded (asynchronous)")
      .flag("overlap", &O::overlap, "with staleness != 0: a step's push and pull run during the next step");
  return s;
}

StrategySpec sspSpec() {
  StrategySpec s;
  s.name = "ssp";
  s.doc = "SSP / asynchronous: parameter-server shards on every rank, a slow rank does not stop the others";
  s.options = optionsSection(sspSection());
  s.make = [](const StrategyContext& ctx, const std::any& options, const StrategyRun&) {
    return makeSspStrategy(ctx, std::any_cast<const SspOptions&>(options));
  };
  // The servers' shards and clocks fit any staleness bound.
  s.resume_key = [](const std::any&, int) { return std::string("ssp"); };
  return s;
}

}  // namespace lowcomm::parallel
