// One rank's part of a collective call on an Exchange (private to the sim layer): the same
// algorithm functions the communicator calls (lowcomm/comm/algorithms.h), for simulated
// collectives and for replayed timelines alike.
#pragma once

#include "lowcomm/comm/exchange.h"
#include "lowcomm/sim/replay.h"
#include "sim_exchange.h"

namespace lowcomm::sim {

// `buf` and `out` hold at least c.bytes; `default_group` is hier's group size when c.group_size
// is 0 (ranks per node). Waits for every message of the call. On a platform with in-network
// aggregation an allreduce over ranks of more than one node goes through the switch instead.
// Whether `c` runs hier's node version (each group's part in its node's memory), as the
// communicator decides it: an allreduce with c.node_piece > 0 whose every group of `gs` (c's, or
// `default_group`) contiguous members is on one node, not through an in-network switch.
bool runsInNodeMemory(SimNetwork& net, const comm::Group& g, const CallSpec& c, int default_group);

void runCall(SimExchange& ex, const comm::Group& g, const CallSpec& c, int default_group, char* buf, char* out,
             comm::Scratch& scratch);

}  // namespace lowcomm::sim
