// The automatic allreduce choice, shared by the communicator (Communicator::chooseAllreduce) and
// the simulator (lowcomm simulate predict), so that a prediction runs what a real run would.
#pragma once

#include <cstddef>

#include "lowcomm/comm/communicator.h"

namespace lowcomm::comm {

// The automatic allreduce over TCP (no shared memory, not deterministic, nothing forced) for a
// buffer of `bytes` on `world` ranks in groups of `group_size` (a node's ranks; <= 1: none):
// hierarchical across groups, else by size (halving-doubling for small buffers, the ring for
// large ones).
Algo autoAllreduce(size_t bytes, int world, int group_size);

}  // namespace lowcomm::comm
