// Allreduce algorithm selection: a small alpha-beta cost table, overridden by options.
#include <cmath>

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
// Per-message latency and per-byte time of a TCP link on loopback, measured order of magnitude.
constexpr double kAlpha = 40e-6;
constexpr double kBeta = 1.0 / 1.0e9;

double ringCost(int n, double bytes) { return 2.0 * (n - 1) * kAlpha + 2.0 * (n - 1) / n * bytes * kBeta; }
double hdCost(int n, double bytes) {
  int p = 1, logp = 0;
  while (p * 2 <= n) p *= 2, ++logp;
  const double fold = (p == n) ? 0.0 : 2.0 * (kAlpha + bytes * kBeta);
  return fold + 2.0 * logp * kAlpha + 2.0 * (p - 1) / p * bytes * kBeta;
}
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
  return hdCost(size_, static_cast<double>(bytes)) < ringCost(size_, static_cast<double>(bytes))
             ? Algo::halving_doubling
             : Algo::ring;
}

}  // namespace lowcomm::comm
