// Allreduce and broadcast algorithm selection: a small alpha-beta cost table, overridden by options.
#include <cstdint>

#include "lowcomm/base/error.h"
#include "lowcomm/comm/communicator.h"
#include "lowcomm/comm/algorithms.h"
#include "lowcomm/comm/selector.h"
#include "lowcomm/comm/tuned_table.h"

namespace lowcomm::comm {

const char* algoName(Algo a) {
  switch (a) {
    case Algo::automatic: return "auto";
    case Algo::ring: return "ring";
    case Algo::halving_doubling: return "hd";
    case Algo::hierarchical: return "hier";
    case Algo::ordered: return "ordered";
    case Algo::shm: return "shm";
    case Algo::tree: return "tree";
    case Algo::pairwise: return "pairwise";
    case Algo::rails: return "rails";
    case Algo::chain: return "chain";
  }
  return "?";
}

Algo parseAlgo(const std::string& s) {
  for (Algo a : {Algo::automatic, Algo::ring, Algo::halving_doubling, Algo::hierarchical, Algo::ordered,
                 Algo::shm, Algo::tree, Algo::pairwise, Algo::rails, Algo::chain})
    if (s == algoName(a)) return a;
  if (s == "halving_doubling" || s == "rabenseifner") return Algo::halving_doubling;
  if (s == "hierarchical") return Algo::hierarchical;
  if (s == "deterministic") return Algo::ordered;
  throw ConfigError("unknown algorithm '" + s + "' (expected auto, ring, hd, hier, rails, ordered or shm; broadcast: tree or chain)");
}

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
}  // namespace

Algo Communicator::chooseAllreduce(size_t bytes, Algo forced) const {
  const bool shm_ok = all_local_ && opts_.shm != ShmMode::off;
  // Both sum in rank order: identical bits whichever runs.
  if (opts_.deterministic) return shm_ok ? Algo::shm : Algo::ordered;
  if (forced == Algo::automatic) forced = opts_.allreduce_algo;
  if (forced != Algo::automatic) {
    if (!algoRuns("allreduce", forced))
      throw ConfigError(std::string("algorithm '") + algoName(forced) + "' cannot run allreduce");
    if (forced == Algo::shm && !shm_ok)
      throw ConfigError(opts_.shm == ShmMode::off ? "algorithm 'shm' requested but shared memory is off"
                                                  : "algorithm 'shm' needs every rank on this host (same network namespace)");
    return forced;
  }
  if (shm_ok && size_ > 1) return Algo::shm;
  if (opts_.tuned) {
    const Algo tuned = opts_.tuned->choose(bytes, size_, opts_.group_size);
    if (tuned != Algo::automatic) return tuned;
  }
  return autoAllreduce(bytes, size_, opts_.group_size);
}

Algo autoAllreduce(size_t bytes, int world, int group_size) {
  if (group_size > 1 && group_size < world) return Algo::hierarchical;
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

Algo autoAllgather(int world, int group_size) {
  return group_size > 1 && group_size < world ? Algo::hierarchical : Algo::ring;
}

bool algoRuns(const std::string& op, Algo a) {
  if (a == Algo::automatic) return true;
  if (op == "allreduce")
    return a == Algo::ring || a == Algo::halving_doubling || a == Algo::hierarchical || a == Algo::rails ||
           a == Algo::ordered || a == Algo::shm;
  if (op == "broadcast") return a == Algo::tree || a == Algo::chain;
  if (op == "allgather" || op == "allgatherv") return a == Algo::ring || a == Algo::hierarchical;
  if (op == "alltoall") return a == Algo::pairwise;
  return false;
}

}  // namespace lowcomm::comm
