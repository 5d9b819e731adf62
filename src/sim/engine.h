// A SimGrid engine with the platform built (private to the sim layer). One per process: SimGrid
// keeps global state, so every simulation runs in its own child process (isolated.h).
#pragma once

#include <simgrid/s4u.hpp>

#include <memory>
#include <vector>

#include "lowcomm/sim/platform.h"

namespace lowcomm::sim {

// In-network aggregation's hosts: where a rank's chunks leave from and arrive at (its node's host
// on a star; on a fat-tree a stand-in whose routes to its leaf's switch are its node's own links),
// the summing switches by leaf (a star's one switch), and the spines above the leaves (fat-tree
// with more than one leaf; the routes between a leaf and spine s are the leaf's links to the
// spine that the fat-tree's own routes take to a leaf's s-th host: shared with all other traffic).
struct InaHosts {
  std::vector<simgrid::s4u::Host*> port;   // per rank
  std::vector<int> leaf_of;                // per rank
  std::vector<simgrid::s4u::Host*> leaf;   // per leaf switch
  std::vector<simgrid::s4u::Host*> spine;  // per spine switch (empty with one leaf)
};

struct SimPlatform {
  std::unique_ptr<simgrid::s4u::Engine> engine;
  std::vector<simgrid::s4u::Host*> hosts;  // one per rank (the ranks of a node share its host but on "rail")
  InaHosts ina;                            // in-network aggregation only
};

// Network model: max-min fair sharing of every link (SimGrid's CM02 without cross-traffic),
// links at link_Bps × bandwidth_factor, a loopback link of loopback_Bps per node for its ranks'
// traffic; a host's speed is reduce_Bps per core.
SimPlatform buildPlatform(const PlatformSpec& p);

}  // namespace lowcomm::sim
