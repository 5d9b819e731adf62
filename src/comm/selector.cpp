// Allreduce algorithm selection: a small alpha-beta cost table, overridden by options.
#include <cstdint>

#include "lowcomm/base/error.h"
#include "lowcomm/comm/communicator.h"

namespace lowcomm::comm {

const char* algoName(Algo a) {
  switch (a) {
    case Algo::automatic: return "auto";
    case Algo::ring: return "ring";
    case Algo::halving_doubling: return "hd";
    case Algo::hierarchical: return "hier";
    case Algo::ordered: return "ordered";
    case Algo::tree: return "tree";
    case Algo::pairwise: return "pairwise";
  }
  return "?";
}

Algo parseAlgo(const std::string& s) {
  for (Algo a : {Algo::automatic, Algo::ring, Algo::halving_doubling, Algo::hierarchical, Algo::ordered,
                 Algo::tree, Algo::pairwise})
    if (s == algoName(a)) return a;
  if (s == "halving_doubling" || s == "rabenseifner") return Algo::halving_doubling;
  if (s == "hierarchical") return Algo::hierarchical;
  if (s == "deterministic") return Algo::ordered;
  throw ConfigError("unknown algorithm '" + s + "' (expected auto, ring, hd, hier or ordered)");
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
  if (opts_.deterministic) return Algo::ordered;
  if (forced == Algo::automatic) forced = opts_.allreduce_algo;
  if (forced != Algo::automatic) {
    if (forced != Algo::ring && forced != Algo::halving_doubling && forced != Algo::hierarchical &&
        forced != Algo::ordered)
      throw ConfigError(std::string("algorithm '") + algoName(forced) + "' cannot run allreduce");
    return forced;
  }
  if (opts_.group_size > 1 && opts_.group_size < size_) return Algo::hierarchical;
  for (const auto& rule : kAllreduceTable)
    if (bytes <= rule.max_bytes) return rule.algo;
  return Algo::ring;
}

}  // namespace lowcomm::comm
