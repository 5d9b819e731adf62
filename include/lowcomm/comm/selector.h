// The automatic allreduce, broadcast and allgather choices, shared by the communicator
// (Communicator::chooseAllreduce, chooseAllgather) and the simulator (lowcomm simulate predict), so that a prediction runs what a real run would.
#pragma once

#include <cstddef>
#include <string>

#include "lowcomm/comm/communicator.h"

namespace lowcomm::comm {

// The automatic allreduce over TCP (no shared memory, not deterministic, nothing forced) for a
// buffer of `bytes` on `world` ranks in groups of `group_size` (a node's ranks; <= 1: none) and
// sites of `site_block` ranks (Topology::siteBlock: contiguous sites; <= 0: no sites, or sites
// the sites algorithm cannot group):
// - across sites (0 < site_block < world): the sites algorithm, whatever the size: one WAN
//   exchange per call, the fewest WAN round trips and WAN bytes of the algorithms;
// - else hierarchical across groups, else by size (halving-doubling for small buffers, the ring
//   for large ones).
// Communicator::chooseAllreduce puts deterministic mode, a forced algorithm and shared memory
// first, as before; a tuned table (simulate tune, whose rules know world and group size only)
// is consulted only when the ranks do not span sites in the sites layout.
Algo autoAllreduce(size_t bytes, int world, int group_size, int site_block);

// The automatic broadcast of `bytes` on `world` ranks with pipelining segments of `seg_bytes`:
// the pipelined chain once it has at least 2 (world - 1) segments (chainSegmentBytes), where
// its (k + n - 2) segment times beat the tree's log2(n) copies from the root; the binomial
// tree for smaller buffers (fewer latency-bound hops) and for 2 ranks (the same messages).
Algo autoBroadcast(size_t bytes, int world, size_t seg_bytes);

// The automatic allgather(v) on `world` ranks in groups of `group_size` (a node's ranks) and
// sites of `site_block` ranks (as autoAllreduce; AllgatherChoice: communicator.h):
// - across sites of several ranks (1 < site_block < world): hierarchical with the SITE as the
//   group: blocks gathered on each site's leader, the leaders' ring (S - 1 WAN steps for S
//   sites; one exchange for 2), then the site's broadcast: every site's blocks cross the WAN
//   once per other site, against the flat ring's n - 1 latency-bound steps, several crossing;
// - else hierarchical across node groups (each group's blocks cross the network once, through
//   its leader), else the ring; group_size is returned as given.
// A forced hierarchical allgather keeps grouping by node (CommOptions::group_size).
AllgatherChoice autoAllgather(int world, int group_size, int site_block);

}  // namespace lowcomm::comm
