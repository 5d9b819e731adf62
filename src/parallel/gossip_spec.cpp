// `strategy.name = "gossip"`: the [gossip] section's keys and the spec the trainer reads.
#include "lowcomm/parallel/gossip.h"
#include "lowcomm/parallel/strategy_spec.h"

namespace lowcomm::parallel {

schema::Section<GossipOptions> gossipSection() {
  using O = GossipOptions;
  schema::Section<O> s("gossip", "gossip: each rank mixes its parameters with its graph neighbours'");
  s.choice("topology", &O::topology, {"ring", "exponential"}, "the mixing graph (exponential: power-of-two worlds)")
      .integer("period", &O::period, 1, 2147483647, "steps between mixings")
      .integer("consensus_every", &O::consensus_every, 0, 2147483647,
               "mixings between consensus-distance measurements; 0 = never");
  return s;
}

StrategySpec gossipSpec() {
  StrategySpec s;
  s.name = "gossip";
  s.doc = "gossip: decentralised averaging with neighbours (ring or exponential graph), no global collective";
  s.options = optionsSection(gossipSection());
  s.make = [](const StrategyContext& ctx, const std::any& options, const StrategyRun&) {
    return makeGossipStrategy(ctx, std::any_cast<const GossipOptions&>(options));
  };
  s.resume_key = [](const std::any& options, int) {
    const auto& o = std::any_cast<const GossipOptions&>(options);
    return "gossip/" + o.topology + "/" + std::to_string(o.period);
  };
  return s;
}

}  // namespace lowcomm::parallel
