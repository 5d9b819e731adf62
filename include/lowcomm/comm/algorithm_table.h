// The collective algorithms as one table: a row per algorithm holds its name, the operations it
// implements, the functions that run it over an Exchange (the communicator and the simulator
// call the same ones), its simulator twin, what it needs of the world (the selector's validity
// rule) and a doc line. The communicator's dispatch, the simulator's, the selector, the config
// layer's allowed values and every listing read this table.
//
// Adding an algorithm: an Algo value before kCount, its function in src/comm/algo, and its row in
// src/comm/algorithm_table.cpp; an Algo value without exactly one row does not compile.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lowcomm::comm {

enum class Op : uint8_t { allreduce, allgather, reduce_scatter, broadcast, alltoall, barrier, kCount };
const char* opName(Op op);
// The Op named `s` (opName; "allgatherv" is allgather), or nullopt.
std::optional<Op> opNamed(const std::string& s);

// `automatic` is no algorithm: the selector's choice (selector.h), resolved before a dispatch.
enum class Algo : uint8_t {
  automatic,
  ring,
  halving_doubling,
  hierarchical,
  ordered,
  shm,
  tree,
  pairwise,
  rails,
  chain,
  dissemination,
  sites,
  kCount
};

// What an algorithm needs of the communicator besides being asked for an op it runs.
enum class Needs : uint8_t {
  nothing,
  groups,    // contiguous groups of group_size ranks: several ranks per group and several groups
  one_host,  // every rank on this host: runs in shared memory, not over an Exchange
};
// Whether `world` ranks in groups of `group_size` form several groups of several ranks.
inline bool grouped(int world, int group_size) { return group_size > 1 && group_size < world; }

class Exchange;
struct Group;
struct AllreduceOptions;
struct AllgatherOptions;
struct ReduceScatterOptions;
struct BroadcastOptions;
struct AlltoallOptions;
struct BarrierOptions;
using AllreduceFn = void (*)(Exchange&, const Group&, const AllreduceOptions&);
using AllgatherFn = void (*)(Exchange&, const Group&, const AllgatherOptions&);
using ReduceScatterFn = void (*)(Exchange&, const Group&, const ReduceScatterOptions&);
using BroadcastFn = void (*)(Exchange&, const Group&, const BroadcastOptions&);
using AlltoallFn = void (*)(Exchange&, const Group&, const AlltoallOptions&);
using BarrierFn = void (*)(Exchange&, const Group&, const BarrierOptions&);

// The functions of one algorithm, one per operation it runs over an Exchange (nullptr: not that
// op, or not over an Exchange). Built by chaining, e.g. Runs{}.allreduce(allreduceRing).
struct Runs {
  AllreduceFn allreduce_fn = nullptr;
  AllgatherFn allgather_fn = nullptr;
  ReduceScatterFn reduce_scatter_fn = nullptr;
  BroadcastFn broadcast_fn = nullptr;
  AlltoallFn alltoall_fn = nullptr;
  BarrierFn barrier_fn = nullptr;
  uint32_t ops = 0;  // bit 1 << Op per operation it implements

  static constexpr uint32_t bit(Op op) { return 1u << static_cast<unsigned>(op); }
  constexpr Runs allreduce(AllreduceFn f) const {
    Runs r = *this;
    r.allreduce_fn = f;
    r.ops |= bit(Op::allreduce);
    return r;
  }
  constexpr Runs allgather(AllgatherFn f) const {
    Runs r = *this;
    r.allgather_fn = f;
    r.ops |= bit(Op::allgather);
    return r;
  }
  constexpr Runs reduceScatter(ReduceScatterFn f) const {
    Runs r = *this;
    r.reduce_scatter_fn = f;
    r.ops |= bit(Op::reduce_scatter);
    return r;
  }
  constexpr Runs broadcast(BroadcastFn f) const {
    Runs r = *this;
    r.broadcast_fn = f;
    r.ops |= bit(Op::broadcast);
    return r;
  }
  constexpr Runs alltoall(AlltoallFn f) const {
    Runs r = *this;
    r.alltoall_fn = f;
    r.ops |= bit(Op::alltoall);
    return r;
  }
  constexpr Runs barrier(BarrierFn f) const {
    Runs r = *this;
    r.barrier_fn = f;
    r.ops |= bit(Op::barrier);
    return r;
  }
};

struct AlgorithmSpec {
  Algo algo;
  const char* name;     // in configs, flags, timelines and tuning files
  const char* aliases;  // other accepted names, space-separated ("" for none)
  Runs runs;            // its operations and their functions
  // What the simulator runs for it: itself, or the algorithm standing in for it (shared memory
  // is not simulated: the ring over the node's loopback).
  Algo sim;
  Needs needs;
  const char* doc;

  bool runsOp(Op op) const { return (runs.ops & Runs::bit(op)) != 0; }
  bool simulated() const { return sim == algo; }
};

// Every row, in the order listings show them.
const std::vector<AlgorithmSpec>& algorithmTable();
// The row of `a`; ConfigError for Algo::automatic (no row).
const AlgorithmSpec& algorithmSpec(Algo a);

const char* algoName(Algo a);  // "auto" for automatic
// A row's name or alias, or "auto"; ConfigError naming the known ones otherwise.
Algo parseAlgo(const std::string& s);
// Whether `a` runs `op` (automatic runs every op).
bool algoRuns(Op op, Algo a);
bool algoRuns(const std::string& op, Algo a);  // false for an unknown op
// The values a config key naming `op`'s algorithm accepts: "auto", then every algorithm the
// communicator runs for it (comm.algo: allreduce; comm.allgather: allgather).
std::vector<std::string> algorithmChoices(Op op);
// The first row running `op` (ring, tree, pairwise, dissemination): what the simulator runs for
// a call that names no algorithm of `op`.
Algo defaultAlgorithm(Op op);
// Whether `a`, which runs allreduce, does so over the network (an Exchange): all but shm.
bool networkAllreduce(Algo a);
// Their names, "ring, hd, ...", for messages.
std::string networkAllreduceNames();
// Whether `world` ranks in groups of `group_size` meet `a`'s Needs::groups (others: true; one_host
// is the communicator's to check, it knows where its ranks are).
bool shapeFits(Algo a, int world, int group_size);

}  // namespace lowcomm::comm
