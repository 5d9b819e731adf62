// The state the replay's actors share (private to lowcomm_sim): replay.cpp runs the ranks'
// programs, replay_coarse.cpp the coarsened calls (CoarseOptions).
#pragma once

#include <simgrid/s4u.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lowcomm/comm/algorithms.h"
#include "lowcomm/sim/replay.h"
#include "run_p2p.h"
#include "sim_exchange.h"

namespace lowcomm::sim::replay_detail {

namespace sg4 = simgrid::s4u;

// A coarsened call (CoarseOptions): each rank of the sample's first node publishes what the
// ranks of its local index then count.
struct CoarseCall {
  std::vector<sg4::SemaphorePtr> done;          // per local index
  sg4::BarrierPtr start;                        // the sample's ranks, before they time the call
  std::map<int, sg4::BarrierPtr> ends;          // per sampled node (hier): its ranks end together
  // Per local index, per rank, scaled to the full call: over the network, in node memory.
  std::vector<uint64_t> sent, messages, node_sent, node_messages;
  void size(int unit) {
    if (static_cast<int>(done.size()) >= unit) return;
    for (int j = static_cast<int>(done.size()); j < unit; ++j) done.push_back(sg4::Semaphore::create(0));
    sent.resize(unit), messages.resize(unit), node_sent.resize(unit), node_messages.resize(unit);
  }
};

struct RankState {
  sg4::SemaphorePtr launched = sg4::Semaphore::create(0);
  sg4::SemaphorePtr finished = sg4::Semaphore::create(0);
  int launches = 0, done = 0;
  // The background thread's (DiLoCo's outer exchanges): launched, and how many have ended.
  sg4::SemaphorePtr bg_launched = sg4::Semaphore::create(0);
  sg4::SemaphorePtr bg_finished = sg4::Semaphore::create(0);
  int bg_done = 0;
  std::map<std::string, uint32_t> calls_in_group;  // the next call's number, per group
  int coarse_calls[3] = {0, 0, 0};  // per thread (0: compute, 1: communication, 2: background)
  std::vector<double> step_s;
  double step_start = 0, first_begin = -1, last_end = 0;
};

struct Shared {
  const PlatformSpec& platform;
  const std::vector<RankProgram>& programs;
  SimNetwork& net;
  std::vector<RankState> state;
  std::unique_ptr<char[]> buf, out;
  comm::Scratch scratch;
  std::map<std::string, uint32_t> group_ids;
  CoarseOptions coarse;
  // By thread and the call's number among that thread's coarsened ones: every rank's thread
  // issues the same sequence, whatever the two threads' interleaving.
  std::map<std::pair<int, int>, CoarseCall> coarse_calls;
  std::string error;
  uint64_t calls = 0, coarsened = 0;
  std::vector<P2PRank> p2p;  // per rank
  P2PChannels channels;
};

// What a call sent: over the network, and in node memory (hier's node steps).
struct CallBytes {
  uint64_t sent = 0, messages = 0, node_sent = 0, node_messages = 0;
  double node_s = 0;  // time in node-memory steps
};

// The sequence number of `rank`'s next call of c's group on `thread` (0 compute, 1 communication,
// 2 background):
// calls of different groups must not share slots, so the group's number goes into it; nor the
// calls of the two threads, which a run makes on communicators of their own (DDP's buckets on a
// split of the world's) and which the replay interleaves by simulated time, not as recorded.
uint32_t nextSeq(Shared& sh, int rank, int thread, const CallSpec& c);

// Runs `c` on `rank` (its group's or the world's) and returns the bytes and messages it sent;
// `count`: whether they go into the network's counters.
CallBytes runGroupCall(Shared& sh, int rank, int thread, const CallSpec& c, bool count = true);

// Whether `c` runs coarsened (CoarseOptions): on a sample of the ranks, its time and bytes scaled.
bool coarsens(Shared& sh, const CallSpec& c);

// The call on every k-th rank (hier: every k-th node), scaled; the others wait for it and count
// what their sample twin sent (replay_coarse.cpp says how).
void runCoarse(Shared& sh, int rank, int thread, const CallSpec& c);

// rails over more than max_ring nodes, sampled on every k-th node (replay_coarse.cpp).
void runCoarseRails(Shared& sh, int rank, int thread, const CallSpec& c);

}  // namespace lowcomm::sim::replay_detail
