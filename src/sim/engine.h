// A SimGrid engine with the platform built (private to the sim layer). One per process: SimGrid
// keeps global state, so every simulation runs in its own child process (isolated.h).
#pragma once

#include <simgrid/s4u.hpp>

#include <memory>
#include <vector>

#include "lowcomm/sim/platform.h"

namespace lowcomm::sim {

struct SimPlatform {
  std::unique_ptr<simgrid::s4u::Engine> engine;
  std::vector<simgrid::s4u::Host*> hosts;  // one per rank (the ranks of a node share its host but on "rail")
  simgrid::s4u::Host* switch_host = nullptr;  // in-network aggregation only
};

// Network model: max-min fair sharing of every link (SimGrid's CM02 without cross-traffic),
// links at link_Bps × bandwidth_factor, a loopback link of loopback_Bps per node for its ranks'
// traffic; a host's speed is reduce_Bps per core.
SimPlatform buildPlatform(const PlatformSpec& p);

}  // namespace lowcomm::sim
