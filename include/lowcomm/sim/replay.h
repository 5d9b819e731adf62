// Replaying a training run's timeline on a simulated platform (`lowcomm simulate replay`,
// `lowcomm simulate validate`). A run written with `lowcomm train --timeline T` records, per
// rank, its steps (lane 2), its compute (lane 0), every collective call with its arguments
// (Communicator::setTrace) and, for DDP's buckets, when each became ready and what its hook did
// on the communication thread (lane 1). The replay keeps what the rank did between collectives
// as measured time (forward, backward, optimizer, codecs, data loading) and reruns every
// collective with the communicator's own algorithm code on the simulated network, with the
// same dependencies: a bucket's calls start once it was ready and the communication thread is
// free; "wait for gradients" waits for every bucket launched so far.
//
// DiLoCo's outer exchanges that ran on their own thread (lane 3, "outer-sync") run on a third
// actor per rank, launched when the strategy queued them, and the compute thread waits for one
// where it waited on the timeline ("outer-wait" with background 1).
//
// What is not replayed (counted in `unsupported`): point-to-point traffic (send/recv/exchange:
// pipeline, gossip, the parameter server), which the timeline does not record.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lowcomm/comm/communicator.h"
#include "lowcomm/comm/dtype.h"
#include "lowcomm/sim/platform.h"

namespace lowcomm::sim {

// One collective call as recorded.
struct CallSpec {
  // allreduce | allgatherv | reduce_scatter | broadcast | alltoall | barrier (collectives), or
  // point-to-point: send | recv | exchange (blocking: returns when every message of it completed),
  // isend | irecv (posted; completed at the "wait" naming the same req) and wait.
  std::string op;
  comm::Algo algo = comm::Algo::ring;
  uint64_t bytes = 0;               // the whole buffer (allgatherv: the gathered total)
  comm::DType dtype = comm::DType::f32;
  size_t segment_bytes = comm::CommOptions{}.segment_bytes;
  int group_size = 0;               // hier
  size_t node_piece = 0;            // hier: each node's part in shared memory, in pieces of this size (0: over TCP)
  int root = 0;                     // broadcast
  std::vector<int> ranks;           // members (root-communicator ranks); empty = every rank
  std::vector<uint64_t> rank_bytes; // allgatherv: each member's bytes
  // Point-to-point: (peer as a root rank, bytes) of each message sent and received, the tag,
  // the communicator it ran on (its id on the timeline), and a posted request's id (isend,
  // irecv, wait).
  std::vector<std::pair<int, uint64_t>> sends, recvs;
  uint32_t tag = 0;
  std::string comm, req;
  bool p2p() const {
    return op == "send" || op == "recv" || op == "exchange" || op == "isend" || op == "irecv" || op == "wait";
  }
};

// A rank's program. main: the compute thread; buckets: what the communication thread ran for
// each bucket, in launch order; background: what a second communication thread ran for each
// exchange launched to run behind the compute (DiLoCo's streamed outer syncs, timeline lane 3),
// in launch order. launch_bg starts the next background exchange; wait_bg waits until the one
// numbered `index` (0-based among the program's background exchanges) and all before it are done.
struct ReplayItem {
  enum Kind { sleep, call, launch, wait_buckets, step_begin, step_end, launch_bg, wait_bg } kind = sleep;
  double seconds = 0;  // sleep
  int index = -1;      // call: index into RankProgram::calls; wait_bg: the exchange waited for
};

struct RankProgram {
  std::vector<ReplayItem> main;
  std::vector<std::vector<ReplayItem>> buckets;     // sleep and call items
  std::vector<std::vector<ReplayItem>> background;  // sleep and call items
  std::vector<CallSpec> calls;
  std::vector<double> measured_step_s;  // the replayed steps' durations in the timeline
  int unsupported_calls = 0;            // collectives on the communication thread outside a bucket
};

// The steps replayed. From step 0 the replay also takes in what the run did before its first
// step (the model's broadcast), and through the last step what it did after (the final
// evaluation), so that its bytes are the whole run's.
struct ReplayOptions {
  int first_step = 0;  // index of the first step span replayed (0-based)
  int steps = 0;       // how many; 0: all from first_step
};

// Reads a Chrome trace written by `lowcomm train --timeline` into one program per rank.
// Throws ConfigError naming the file for anything else (no step spans, ranks with different
// numbers of steps, a collective the simulator does not know).
std::vector<RankProgram> readTimeline(const std::string& path, const ReplayOptions& opts);

// What a run with `--timeline` sends after its timeline closed, which its traffic meter counts
// and the timeline cannot record: writeTimeline's gather (src/train/metrics.cpp), the origin
// broadcast (8 bytes from rank 0), the allgather of each rank's event bytes (8 each) and the
// allgatherv of the events themselves, each rank's share the compact JSON of its events in
// `path` (within a few bytes of what it sent). Appended to every program's main thread after its
// last item, the allgathers with the algorithm of the run's last recorded allgatherv (the ring
// when it has none), the broadcast with comm::autoBroadcast's. For comparing a replay through the
// last step with the run's meter or wire counters (simulate validate).
void appendTimelineGather(std::vector<RankProgram>& programs, const std::string& path);

struct ReplayResult {
  int ranks = 0, steps = 0;
  double measured_step_s = 0, predicted_step_s = 0;  // means over ranks and steps (the step spans)
  // From the first step's start to the last one's end over the steps, mean over ranks: the step
  // spans and what ran between them (e.g. AB-training's syncs, taken before a step begins).
  double predicted_cycle_s = 0;
  std::vector<double> measured_step_by_rank, predicted_step_by_rank;
  std::vector<uint64_t> bytes_sent;        // per rank, as the traffic meter counts them
  std::vector<uint64_t> inter_node_sent;   // per rank, the part sent to another node
  std::vector<uint64_t> inter_leaf_sent;   // per rank, the part sent under another leaf switch (fat-tree)
  std::vector<uint64_t> inter_site_sent;   // per rank, the part sent to another site (PlatformSpec::sites)
  double wall_s = 0;                       // the simulation's own run time
  std::vector<uint64_t> messages_sent;     // per rank
  uint64_t calls = 0;                      // collectives replayed, all ranks
  uint64_t coarse_calls = 0;               // of which run on a sample of the ranks (CoarseOptions)
  int unsupported_calls = 0;
};

// Coarsening of long rings (`simulate predict --coarse-ring`): a ring over the whole world of
// more than `max_ring` ranks (allreduce with the ring algorithm, allgatherv) costs world x steps
// messages, world^2 in all. Instead every k-th rank (k = ceil(world / max_ring)) runs the same
// algorithm with the same chunk per step (a buffer scaled by the sample's share), so each
// step's flows load the links as the full ring's do; its time and each rank's bytes and messages
// are scaled by (world - 1) / (sample - 1), the ratio of the steps, and the other ranks wait for
// the sample. A rank's bytes count as inter-node (cross-leaf) when its ring successor is on
// another node (leaf). The hierarchical allreduce over more than `max_ring` nodes whose node
// parts run in node memory (PlatformSpec node_piece > 0) is coarsened alike over nodes: every
// k-th node (all its ranks) runs it, its leaders' ring with the same chunk per step, and every
// rank counts what its sample twin (same local index) sent, scaled: over the network (only the
// leaders send) by the ring's steps, in node memory by the buffer ratio. The node steps'
// copies and sums ran on the sample's buffer, m / units of the real one: their time is scaled
// by units / m, the rest of the call's by the ring's steps; a node's ranks end together. The
// sample's ranks start together (rings too), so the wait for the last is not scaled. The rails
// allreduce over more than `max_ring` nodes is coarsened over nodes too: every k-th node runs its
// node steps whole and its per-rail rings with the same chunk per step, their time and bytes
// scaled by the rings' steps; every rank counts its sample twin's. 0: off.
struct CoarseOptions {
  int max_ring = 0;
};

// Replays the programs on the platform (world = programs.size(); must equal platform.world()).
// Runs in a child process (SimGrid keeps one engine per process).
ReplayResult replay(const PlatformSpec& platform, const std::vector<RankProgram>& programs,
                    const CoarseOptions& coarse = {});

}  // namespace lowcomm::sim
