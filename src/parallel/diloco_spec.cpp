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
      .flag("nesterov", &O::nesterov, "Nesterov outer momentum")
      .choice("scope", &O::scope, {"world", "site", "node"},
              "replica groups: every rank (world), or the ranks of a site or node kept equal by an inner DDP")
      .integer("fragments", &O::fragments, 1, 65536, "streaming: parameter fragments synced on a staggered schedule")
      .integer("overlap_steps", &O::overlap_steps, 0, 2147483647, "streaming: inner steps a fragment's exchange overlaps (< period)")
      .number("mix", &O::mix, schema::Range::halfOpen(0, 1), "streaming: weight of the local weights when a fragment lands")
      .choice("final_sync", &O::final_sync, {"outer", "average"},
              "the blocking sync at the end: an outer step, or the replicas' average (no outer lr or momentum)")
      .check([](const O& o) {
        if (o.fragments > o.period)
          throw schema::KeyError("diloco.fragments", "is " + std::to_string(o.fragments) + ", more than diloco.period = " +
                                                         std::to_string(o.period) + " (a fragment syncs once per period)");
        if (o.overlap_steps > 0 && o.overlap_steps >= o.period)
          throw schema::KeyError("diloco.overlap_steps", "is " + std::to_string(o.overlap_steps) + ", not below diloco.period = " +
                                                             std::to_string(o.period) + " (an exchange must land before its fragment leaves again)");
      });
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
  // The outer state fits the same period, groups, fragments and overlap (the outer hyper-parameters
  // and mix may change on resume).
  s.resume_key = [](const std::any& options, int) {
    const auto& d = std::any_cast<const DilocoOptions&>(options);
    std::string key = "diloco/" + std::to_string(d.period);
    if (d.scope != "world" || d.fragments != 1 || d.overlap_steps != 0)
      key += "/" + d.scope + "/" + std::to_string(d.fragments) + "/" + std::to_string(d.overlap_steps);
    return key;
  };
  return s;
}

}  // namespace lowcomm::parallel
