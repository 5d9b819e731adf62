// Predicting a training run at another scale (`lowcomm simulate predict`): one rank's program of
// a measured run (lowcomm/sim/replay.h: its compute as measured, its collectives as called) is
// run by every rank of a larger simulated cluster, on any topology (lowcomm/sim/platform.h).
//
// What carries over: per-step compute, DDP's bucket order and overlap, codec time and payloads
// (PowerSGD's factors, top-k's values and indices: the same per rank at any world size), the
// collectives over the whole world, those of equal contiguous groups (AB-training's, DiLoCo's
// sites) and of every s-th rank (DiLoCo's cross-site groups; see PredictOptions::groups), and
// DiLoCo's outer exchanges behind the compute (RankProgram::background). What does not: other
// sub-groups (ConfigError); point-to-point traffic (pipelines, gossip, the parameter server),
// which the timeline does not record.
#pragma once

#include <string>
#include <vector>

#include "lowcomm/comm/communicator.h"
#include "lowcomm/sim/platform.h"
#include "lowcomm/sim/replay.h"

namespace lowcomm::sim {

struct PredictOptions {
  // Allreduce algorithm at the new size: "auto" (what the communicator would choose there:
  // comm::autoAllreduce with the node's ranks as groups), "recorded", or an allreduce algorithm the
  // simulator runs (simulatedAlgorithms("allreduce"): ring, hd, hier, rails, ordered).
  // Allgather(v) calls take "recorded" or a simulated allgather algorithm (ring, hier) as named
  // (hier grouped by node), else comm::autoAllgather (across sites: hier grouped by site).
  std::string algo = "auto";
  // Divides every recorded duration besides the collectives (compute, codecs): "what if the
  // ranks computed this much faster" (e.g. accelerators instead of this machine's cores).
  double compute_speedup = 1;
  // A call of a sub-group, recorded on rank 0 over a block 0 .. g-1 (AB-training's groups,
  // DiLoCo's sites) or over every s-th rank 0, s, 2s, .. (DiLoCo's cross-site groups: one rank
  // of each block of s): at the new world the blocks are of "fixed" g (or s) ranks (more blocks),
  // "proportional" g x world / recorded world ranks (as many blocks as recorded), or "site": the
  // platform's sites (ranks per site); every rank runs the call over its own block, or over the
  // ranks at its position in every block. A strided call's bytes scale by the recorded block over
  // the new one: what a rank sends across is its share of what its block holds (DiLoCo's carried
  // part of a fragment, split among a site's ranks; a grid's shard).
  std::string groups = "fixed";
  // Hier allreduces run each node's part in shared memory in pieces of this size when they were
  // not recorded with one (the communicator's default with comm.shm = auto:
  // CommOptions::shm_piece_bytes) and keep a recorded piece; 0: every hier allreduce over TCP
  // (comm.shm = off). --algo "recorded" keeps every call as recorded.
  size_t node_piece = comm::CommOptions{}.shm_piece_bytes;
};

// `rank0`, rewritten for every rank of `platform`: a collective over the whole recorded world
// (`recorded_world` ranks) becomes one over the new world with the same buffer (allgatherv:
// every rank contributes the recorded mean share); one over a group, over the rank's group.
// Throws ConfigError naming the call for a group that cannot be mapped, or when the new world
// exceeds what the communicator supports.
std::vector<RankProgram> extrapolate(const RankProgram& rank0, int recorded_world, const PlatformSpec& platform,
                                     const PredictOptions& opts);

// Per step of the program, from its recorded durations (not simulated): the compute thread's
// work between collectives from the first step's start to the last one's end (forward,
// backward, optimizer, data loading and whatever ran between the steps) and the communication
// thread's work besides collectives (codecs).
struct StepWork {
  double compute_s = 0, codec_s = 0;
};
StepWork stepWork(const RankProgram& p);

}  // namespace lowcomm::sim
