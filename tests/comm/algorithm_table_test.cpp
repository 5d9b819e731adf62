// The algorithm table: a row for every algorithm, whose functions match the ops it claims, and
// the lists read from it (config choices, names, aliases) as they were written by hand before.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "lowcomm/base/error.h"
#include "lowcomm/comm/algorithm_table.h"
#include "lowcomm/comm/algorithms.h"

using namespace lowcomm;
using namespace lowcomm::comm;

namespace {

std::vector<Algo> everyAlgorithm() {
  std::vector<Algo> out;
  for (int a = static_cast<int>(Algo::automatic) + 1; a < static_cast<int>(Algo::kCount); ++a)
    out.push_back(static_cast<Algo>(a));
  return out;
}

std::vector<Op> everyOp() {
  std::vector<Op> out;
  for (int o = 0; o < static_cast<int>(Op::kCount); ++o) out.push_back(static_cast<Op>(o));
  return out;
}

bool hasFunction(const AlgorithmSpec& s, Op op) {
  switch (op) {  // no default: a new Op must be added here (-Wswitch)
    case Op::allreduce: return s.runs.allreduce_fn != nullptr;
    case Op::allgather: return s.runs.allgather_fn != nullptr;
    case Op::reduce_scatter: return s.runs.reduce_scatter_fn != nullptr;
    case Op::broadcast: return s.runs.broadcast_fn != nullptr;
    case Op::alltoall: return s.runs.alltoall_fn != nullptr;
    case Op::barrier: return s.runs.barrier_fn != nullptr;
    case Op::kCount: break;
  }
  return false;
}

}  // namespace

TEST(AlgorithmTable, EveryAlgoValueHasItsRow) {
  EXPECT_EQ(algorithmTable().size(), everyAlgorithm().size());
  std::set<std::string> names;
  for (Algo a : everyAlgorithm()) {
    const AlgorithmSpec& s = algorithmSpec(a);
    EXPECT_EQ(s.algo, a);
    EXPECT_EQ(parseAlgo(algoName(a)), a) << algoName(a);
    EXPECT_TRUE(names.insert(s.name).second) << "two rows named " << s.name;
    EXPECT_NE(s.runs.ops, 0u) << s.name << " runs no op";
    EXPECT_GT(std::string(s.doc).size(), 10u) << s.name;
  }
  EXPECT_STREQ(algoName(Algo::automatic), "auto");
  EXPECT_EQ(parseAlgo("auto"), Algo::automatic);
  EXPECT_THROW(algorithmSpec(Algo::automatic), ConfigError);
  EXPECT_THROW(parseAlgo("bogus"), ConfigError);
}

// An op a row claims has the function that runs it over an Exchange, except shared memory's
// allreduce (the communicator runs it on its segment), and no function stands for an op the row
// does not claim.
TEST(AlgorithmTable, FunctionsMatchTheOpsARowRuns) {
  for (const auto& s : algorithmTable())
    for (Op op : everyOp()) {
      SCOPED_TRACE(std::string(s.name) + " " + opName(op));
      const bool over_exchange = s.runsOp(op) && s.needs != Needs::one_host;
      EXPECT_EQ(hasFunction(s, op), over_exchange);
    }
}

// The simulator runs a row's twin: one that runs the same ops over an Exchange, as itself.
TEST(AlgorithmTable, SimulatorTwinsRunTheSameOps) {
  for (const auto& s : algorithmTable()) {
    const AlgorithmSpec& twin = algorithmSpec(s.sim);
    EXPECT_TRUE(twin.simulated()) << s.name;
    for (Op op : everyOp())
      EXPECT_TRUE(!s.runsOp(op) || hasFunction(twin, op)) << s.name << " " << opName(op);
  }
  EXPECT_EQ(algorithmSpec(Algo::shm).sim, Algo::ring);
}

TEST(AlgorithmTable, EveryOpHasAnAlgorithmAndAName) {
  for (Op op : everyOp()) {
    EXPECT_TRUE(opNamed(opName(op)) == op) << opName(op);
    EXPECT_TRUE(algoRuns(op, defaultAlgorithm(op))) << opName(op);
    EXPECT_TRUE(algoRuns(op, Algo::automatic));
  }
  EXPECT_TRUE(opNamed("allgatherv") == Op::allgather);
  EXPECT_FALSE(opNamed("gather").has_value());
  EXPECT_FALSE(algoRuns("gather", Algo::ring));
  EXPECT_EQ(defaultAlgorithm(Op::broadcast), Algo::tree);
  EXPECT_EQ(defaultAlgorithm(Op::allgather), Algo::ring);
}

// The lists config validation, the selector and the tuners wrote by hand before the table.
TEST(AlgorithmTable, ListsReadFromTheTable) {
  EXPECT_EQ(algorithmChoices(Op::allreduce),
            (std::vector<std::string>{"auto", "ring", "hd", "hier", "rails", "sites", "ordered", "shm"}));
  EXPECT_EQ(algorithmChoices(Op::allgather), (std::vector<std::string>{"auto", "ring", "hier"}));
  EXPECT_EQ(algorithmChoices(Op::broadcast), (std::vector<std::string>{"auto", "tree", "chain"}));
  EXPECT_EQ(networkAllreduceNames(), "ring, hd, hier, rails, sites, ordered");
  EXPECT_FALSE(networkAllreduce(Algo::shm));
  EXPECT_FALSE(networkAllreduce(Algo::automatic));
  EXPECT_FALSE(networkAllreduce(Algo::tree));
  EXPECT_TRUE(algoRuns("allgatherv", Algo::hierarchical));
  EXPECT_FALSE(algoRuns("allreduce", Algo::chain));
  EXPECT_EQ(parseAlgo("halving_doubling"), Algo::halving_doubling);
  EXPECT_EQ(parseAlgo("rabenseifner"), Algo::halving_doubling);
  EXPECT_EQ(parseAlgo("hierarchical"), Algo::hierarchical);
  EXPECT_EQ(parseAlgo("deterministic"), Algo::ordered);
}

TEST(AlgorithmTable, ShapeRules) {
  EXPECT_TRUE(shapeFits(Algo::hierarchical, 4, 2));
  EXPECT_FALSE(shapeFits(Algo::hierarchical, 4, 4));  // one group
  EXPECT_FALSE(shapeFits(Algo::rails, 4, 1));         // groups of one
  EXPECT_TRUE(shapeFits(Algo::ring, 4, 0));
  EXPECT_TRUE(shapeFits(Algo::automatic, 4, 0));
}
