// Allreduce, broadcast and allgather algorithm selection: a small alpha-beta cost table,
// overridden by options; the algorithms and their needs come from the algorithm table.
#include <cstdint>
#include <string>
#include <vector>

#include "lowcomm/base/error.h"
#include "lowcomm/comm/algorithm_table.h"
#include "lowcomm/comm/algorithms.h"
#include "lowcomm/comm/communicator.h"
#include "lowcomm/comm/selector.h"
#include "lowcomm/comm/tuned_table.h"

namespace lowcomm::comm {

ShmMode parseShmMode(const std::string& s) {
  if (s == "auto") return ShmMode::automatic;
  if (s == "on") return ShmMode::on;
  if (s == "off") return ShmMode::off;
  throw ConfigError("unknown shared-memory mode '" + s + "' (expected auto, on or off)");
}

namespace {
// Allreduce choice by message size, from `lowcomm bench collectives` sweeps on loopback (4 B to
// 4 MiB, 2-4 ranks): halving-doubling's log2(n) steps win for small messages; above ~16 KiB the
// ring's segment pipelining (reduction overlapped with transfer) wins.
struct Rule {
  size_t max_bytes;
  Algo algo;
};
constexpr Rule kAllreduceTable[] = {
    {16 << 10, Algo::halving_doubling},
    {SIZE_MAX, Algo::ring},
};

std::string siteList(const std::vector<int>& site_of) {
  std::string out;
  for (size_t r = 0; r < site_of.size() && r < 16; ++r) out += (r ? "," : "") + std::to_string(site_of[r]);
  return "[" + out + (site_of.size() > 16 ? ",...]" : "]");
}
}  // namespace

Algo Communicator::chooseAllreduce(size_t bytes, Algo forced) const {
  const bool shm_ok = all_local_ && opts_.shm != ShmMode::off;
  // Both sum in rank order: identical bits whichever runs.
  if (opts_.deterministic) return shm_ok ? Algo::shm : Algo::ordered;
  if (forced == Algo::automatic) forced = opts_.allreduce_algo;
  if (forced != Algo::automatic) {
    if (!algoRuns(Op::allreduce, forced))
      throw ConfigError(std::string("algorithm '") + algoName(forced) + "' cannot run allreduce");
    if (algorithmSpec(forced).needs == Needs::one_host && !shm_ok)
      throw ConfigError(std::string("algorithm '") + algoName(forced) +
                        (opts_.shm == ShmMode::off ? "' requested but shared memory is off"
                                                   : "' needs every rank on this host (same network namespace)"));
    if (forced == Algo::sites && site_block_ == Topology::kNoSiteBlocks)
      throw ConfigError("algorithm 'sites' needs each site's ranks contiguous in rank order and all sites of one size "
                        "but the last; this communicator's ranks are in sites " + siteList(topology_.site_of) +
                        " (launch the ranks site by site, or choose another algorithm)");
    return forced;
  }
  if (shm_ok && size_ > 1) return Algo::shm;
  // A tuned table's rules know (world, group_size) only: across sites the sites rule comes first.
  if (opts_.tuned && site_block_ <= 0) {
    const Algo tuned = opts_.tuned->choose(bytes, size_, opts_.group_size);
    if (tuned != Algo::automatic) return tuned;
  }
  return autoAllreduce(bytes, size_, opts_.group_size, site_block_);
}

int Communicator::groupFor(Algo a) const { return a == Algo::sites && site_block_ > 0 ? site_block_ : opts_.group_size; }

Algo autoAllreduce(size_t bytes, int world, int group_size, int site_block) {
  if (site_block > 0 && site_block < world) return Algo::sites;
  if (grouped(world, group_size)) return Algo::hierarchical;
  for (const auto& rule : kAllreduceTable)
    if (bytes <= rule.max_bytes) return rule.algo;
  return Algo::ring;
}

Algo autoBroadcast(size_t bytes, int world, size_t seg_bytes) {
  if (world < 3 || bytes == 0) return Algo::tree;
  const size_t seg = chainSegmentBytes(bytes, world, seg_bytes);
  const size_t segments = (bytes + seg - 1) / seg;
  return segments >= 2 * static_cast<size_t>(world - 1) ? Algo::chain : Algo::tree;
}

AllgatherChoice autoAllgather(int world, int group_size, int site_block) {
  if (grouped(world, site_block)) return {Algo::hierarchical, site_block};
  return {grouped(world, group_size) ? Algo::hierarchical : Algo::ring, group_size};
}

AllgatherChoice Communicator::chooseAllgather(Algo forced) const {
  if (forced == Algo::automatic) forced = opts_.allgather_algo;
  if (forced != Algo::automatic) return {forced, opts_.group_size};
  return autoAllgather(size_, opts_.group_size, site_block_);
}

}  // namespace lowcomm::comm
