// The algorithm table (lowcomm/comm/algorithm_table.h): one row per algorithm.
#include "lowcomm/comm/algorithm_table.h"

#include <algorithm>
#include <iterator>
#include <sstream>

#include "lowcomm/base/error.h"
#include "lowcomm/comm/algorithms.h"

namespace lowcomm::comm {

namespace {

constexpr AlgorithmSpec kTable[] = {
    {Algo::ring, "ring", "", Runs{}.allreduce(allreduceRing).allgather(ringAllgather).reduceScatter(ringReduceScatter),
     Algo::ring, Needs::nothing,
     "pipelined ring (reduce-scatter, allgather): each rank sends 2(n-1)/n of the buffer, for large buffers"},
    {Algo::halving_doubling, "hd", "halving_doubling rabenseifner", Runs{}.allreduce(allreduceHalvingDoubling),
     Algo::halving_doubling, Needs::nothing,
     "Rabenseifner's recursive halving and doubling: log2(n) steps each way, for small buffers"},
    {Algo::hierarchical, "hier", "hierarchical",
     Runs{}.allreduce(allreduceHierarchical).allgather(allgatherHierarchical), Algo::hierarchical, Needs::groups,
     "two levels: inside each group (a node; in its shared memory when mapped), then across the group leaders"},
    {Algo::rails, "rails", "", Runs{}.allreduce(allreduceRails), Algo::rails, Needs::groups,
     "two levels per rail: every rank of a group crosses the network with 1/group_size of the buffer"},
    {Algo::sites, "sites", "wan", Runs{}.allreduce(allreduceSites), Algo::sites, Needs::groups,
     "groups as sites joined by a WAN: pipelined pieces, each rank's chunk crosses in one direct exchange"},
    {Algo::ordered, "ordered", "deterministic", Runs{}.allreduce(allreduceOrdered), Algo::ordered, Needs::nothing,
     "rank-ordered sums (comm.deterministic): the same bits whatever the timing, algorithm or topology"},
    {Algo::shm, "shm", "", Runs{}.allreduce(nullptr), Algo::ring, Needs::one_host,
     "shared memory when every rank is on this host, rank-ordered sums (simulated as the ring)"},
    {Algo::tree, "tree", "", Runs{}.broadcast(broadcastTree), Algo::tree, Needs::nothing,
     "segmented binomial tree: few latency-bound hops, for small buffers"},
    {Algo::chain, "chain", "", Runs{}.broadcast(broadcastChain), Algo::chain, Needs::nothing,
     "pipelined chain in rank order from the root: each link carries the buffer once, for large buffers"},
    {Algo::pairwise, "pairwise", "", Runs{}.alltoall(alltoallPairwise), Algo::pairwise, Needs::nothing,
     "pairwise exchange: every rank sends each block straight to its owner"},
    {Algo::dissemination, "dissemination", "", Runs{}.barrier(barrierDissemination), Algo::dissemination,
     Needs::nothing, "dissemination barrier: ceil(log2(n)) rounds of one message"},
};

// Every algorithm has exactly one row, and the selector's `automatic` none.
constexpr bool oneRowPerAlgorithm() {
  for (int a = 0; a < static_cast<int>(Algo::kCount); ++a) {
    int rows = 0;
    for (const auto& r : kTable) rows += static_cast<int>(r.algo) == a ? 1 : 0;
    if (rows != (a == static_cast<int>(Algo::automatic) ? 0 : 1)) return false;
  }
  return true;
}
static_assert(std::size(kTable) + 1 == static_cast<size_t>(Algo::kCount), "one row per Algo value but automatic");
static_assert(oneRowPerAlgorithm(), "every Algo value but automatic has exactly one row in kTable");

constexpr const char* kOpNames[] = {"allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall", "barrier"};
static_assert(std::size(kOpNames) == static_cast<size_t>(Op::kCount), "a name per Op");

bool hasAlias(const char* aliases, const std::string& s) {
  std::istringstream in(aliases);
  std::string a;
  while (in >> a)
    if (a == s) return true;
  return false;
}

}  // namespace

const char* opName(Op op) { return kOpNames[static_cast<size_t>(op)]; }

std::optional<Op> opNamed(const std::string& s) {
  if (s == "allgatherv") return Op::allgather;
  for (size_t i = 0; i < std::size(kOpNames); ++i)
    if (s == kOpNames[i]) return static_cast<Op>(i);
  return std::nullopt;
}

const std::vector<AlgorithmSpec>& algorithmTable() {
  static const std::vector<AlgorithmSpec> table(std::begin(kTable), std::end(kTable));
  return table;
}

const AlgorithmSpec& algorithmSpec(Algo a) {
  for (const auto& r : kTable)
    if (r.algo == a) return r;
  throw ConfigError("the automatic algorithm choice has no row: resolve it first (selector.h)");
}

const char* algoName(Algo a) { return a == Algo::automatic ? "auto" : algorithmSpec(a).name; }

Algo parseAlgo(const std::string& s) {
  if (s == "auto") return Algo::automatic;
  std::string known = "auto";
  for (const auto& r : kTable) {
    if (s == r.name || hasAlias(r.aliases, s)) return r.algo;
    known += std::string(", ") + r.name;
  }
  throw ConfigError("unknown algorithm '" + s + "' (expected one of " + known + ")");
}

bool algoRuns(Op op, Algo a) { return a == Algo::automatic || algorithmSpec(a).runsOp(op); }

bool algoRuns(const std::string& op, Algo a) {
  const auto o = opNamed(op);
  return o && algoRuns(*o, a);
}

std::vector<std::string> algorithmChoices(Op op) {
  std::vector<std::string> out = {"auto"};
  for (const auto& r : kTable)
    if (r.runsOp(op)) out.push_back(r.name);
  return out;
}

Algo defaultAlgorithm(Op op) {
  for (const auto& r : kTable)
    if (r.runsOp(op)) return r.algo;
  throw ConfigError(std::string("no algorithm runs ") + opName(op));
}

bool networkAllreduce(Algo a) { return a != Algo::automatic && algorithmSpec(a).runs.allreduce_fn != nullptr; }

std::string networkAllreduceNames() {
  std::string out;
  for (const auto& r : kTable)
    if (r.runs.allreduce_fn) out += (out.empty() ? "" : ", ") + std::string(r.name);
  return out;
}

bool shapeFits(Algo a, int world, int group_size) {
  return a == Algo::automatic || algorithmSpec(a).needs != Needs::groups || grouped(world, group_size);
}

}  // namespace lowcomm::comm
