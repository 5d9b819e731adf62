// The automatic allreduce and broadcast choices, shared by the communicator (Communicator::chooseAllreduce) and
// the simulator (lowcomm simulate predict), so that a prediction runs what a real run would.
#pragma once

#include <cstddef>
#include <string>

#include "lowcomm/comm/communicator.h"

namespace lowcomm::comm {

// The automatic allreduce over TCP (no shared memory, not deterministic, nothing forced) for a
// buffer of `bytes` on `world` ranks in groups of `group_size` (a node's ranks; <= 1: none):
// hierarchical across groups, else by size (halving-doubling for small buffers, the ring for
// large ones).
Algo autoAllreduce(size_t bytes, int world, int group_size);

// The automatic broadcast of `bytes` on `world` ranks with pipelining segments of `seg_bytes`:
// the pipelined chain once it has at least 2 (world - 1) segments (chainSegmentBytes), where
// its (k + n - 2) segment times beat the tree's log2(n) copies from the root; the binomial
// tree for smaller buffers (fewer latency-bound hops) and for 2 ranks (the same messages).
Algo autoBroadcast(size_t bytes, int world, size_t seg_bytes);

// The automatic allgather(v) on `world` ranks in groups of `group_size`: hierarchical across
// groups (each group's blocks cross the network once, through its leader), else the ring.
Algo autoAllgather(int world, int group_size);

}  // namespace lowcomm::comm
