// Decentralised gossip averaging (`strategy.name = "gossip"`; D-PSGD, Lian et al. 2017; one-peer
// exponential graphs, Ying et al. 2021): every rank steps on its own gradients, then mixes its
// parameters with its graph neighbours' over point-to-point messages; no collective runs during
// training.
//   ring:         x_r ← (x_{r−1} + x_r + x_{r+1}) / 3 every `period` steps (2 messages sent);
//   exponential:  at the k-th mixing, x_r ← (x_r + x_{r−2^j}) / 2 with j = k mod log2(n) (one
//                 message sent; n a power of two).
// Both mixing matrices are doubly stochastic, so the ranks' mean follows SGD on the mean
// gradient and the ranks drift around it by the *consensus distance*
//   sqrt(mean_r ||x_r − x̄||²), measured every `consensus_every` mixings (a collective of its
//   own, traffic phase "consensus", 0 = never) and reported in step records and the summary.
// Floating-point buffers are mixed like parameters. At the end one global average makes every
// rank hold x̄ (phase "final-average"). Each rank's checkpoint keeps its own weights; the state
// section holds the step count, so a resume continues bit for bit.
#pragma once

#include <memory>
#include <string>

#include "lowcomm/base/schema.h"
#include "lowcomm/parallel/strategy.h"

namespace lowcomm::parallel {

struct GossipOptions {
  std::string topology = "ring";  // ring | exponential
  int64_t period = 1;             // steps between mixings (>= 1)
  int64_t consensus_every = 10;   // mixings between consensus-distance measurements; 0 = never
};

// Throws ConfigError naming the `gossip.*` key (world: the run's size, for the topology).
// The [gossip] config section: every key declared once (src/parallel/gossip_spec.cpp).
schema::Section<GossipOptions> gossipSection();
void validateGossipOptions(const GossipOptions& o, int world);

std::unique_ptr<Strategy> makeGossipStrategy(const StrategyContext& ctx, const GossipOptions& o);

}  // namespace lowcomm::parallel
