// One collective call simulated on a platform: every rank is a SimGrid actor that runs the same
// algorithm code as the communicator (lowcomm/comm/algorithms.h) over a simulated Exchange, so
// the messages (peer, size, order) are the real ones by construction; only their timing comes
// from the network model. Local reductions and copies cost bytes / reduce_Bps on the host's
// cores; no data moves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lowcomm/comm/communicator.h"
#include "lowcomm/comm/dtype.h"
#include "lowcomm/sim/platform.h"

namespace lowcomm::sim {

struct CollectiveSpec {
  std::string op = "allreduce";  // allreduce | allgather | reduce_scatter | broadcast | alltoall | barrier
  // An algorithm of `op` the simulator runs (simulatedAlgorithms). Broadcast: one that does not
  // run broadcast (this default) runs the tree (comm::defaultAlgorithm).
  comm::Algo algo = comm::Algo::ring;
  size_t bytes = 1 << 20;        // the buffer (allreduce, broadcast, reduce_scatter input, allgather output,
                                 // alltoall send buffer) in bytes; a multiple of the element size
  comm::DType dtype = comm::DType::f32;
  size_t segment_bytes = comm::CommOptions{}.segment_bytes;
  int group_size = 0;            // hier, rails, sites: ranks per group (0: defaultGroupSize)
  size_t node_piece = 0;         // hier: each node's part in its shared memory, pieces of this size (0: TCP)
  int root = 0;                  // broadcast
};

struct CollectiveResult {
  double time_s = 0;                    // until the last rank finished
  std::vector<double> finish_s;         // per rank
  std::vector<uint64_t> bytes_sent, bytes_recv;  // per rank, as the traffic meter counts them
  std::vector<uint64_t> messages_sent;  // per rank
  uint64_t inter_node_bytes = 0;        // sent between different hosts, all ranks
  size_t node_piece = 0;                // hier: the spec's piece if each node's part ran in its memory, else 0
};

// Simulates one call. SimGrid keeps one engine per process, so the simulation runs in a child
// process and its result comes back through a pipe. Throws ConfigError for bad input and
// Error when the simulation fails (the child's message). The call runs as one of a back-to-back
// series (bench collectives): PlatformSpec::link_burst_bytes does not apply (link_queue_s does;
// a collective posts its receives before the data flows, so its notices rarely wait).
CollectiveResult simulateCollective(const PlatformSpec& platform, const CollectiveSpec& spec);

// The key of PlatformSpec::call_overhead_s the simulation of `spec` uses ("allreduce/ring";
// allgather runs as "allgatherv/...").
std::string callKey(const CollectiveSpec& spec);

// Algorithms the simulator runs for `op` (for listings and errors).
std::vector<std::string> simulatedAlgorithms(const std::string& op);

// The site layout of the first `members` ranks for comm::autoAllreduce (Topology::siteBlock as
// the communicator over them would see it): the platform's ranks per site when they span sites,
// else 0. With it, predict and tune choose what the real run would.
int siteBlock(const PlatformSpec& p, int members);

// The group size algorithm `a` runs with when the call names none, as the communicator's
// (Communicator::groupFor): a site's ranks for the sites algorithm on a platform of sites, else
// a node's (ppn).
int defaultGroupSize(const PlatformSpec& p, comm::Algo a);

}  // namespace lowcomm::sim
