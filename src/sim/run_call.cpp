#include "run_call.h"

#include <simgrid/s4u/Actor.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "ina.h"
#include "sim_node.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/algorithm_table.h"
#include "lowcomm/comm/algorithms.h"
#include "lowcomm/comm/communicator.h"

namespace lowcomm::sim {

using comm::Algo;

namespace {

// Whether every group of `gs` contiguous members of g is on one simulated node (else the real
// communicator runs every group's part over TCP: the same answer on every rank).
bool groupsOnOneNode(SimNetwork& net, const comm::Group& g, int gs) {
  for (int i = 0; i < g.size(); ++i)
    if (!net.sameNode(g.ranks[i], g.ranks[i / gs * gs])) return false;
  return true;
}

// The allreduce through the algorithm table: the row's simulator twin (itself, or the ring for
// shared memory, which is not simulated: its calls run on the node's loopback).
void allreduce(SimExchange& ex, const comm::Group& g, const CallSpec& c, int default_group, char* buf,
               comm::Scratch& scratch) {
  if (c.algo == Algo::automatic || !comm::algoRuns(comm::Op::allreduce, c.algo))
    throw ConfigError(std::string("simulate: algorithm '") + comm::algoName(c.algo) + "' cannot run allreduce");
  const comm::AlgorithmSpec& spec = comm::algorithmSpec(comm::algorithmSpec(c.algo).sim);
  comm::AllreduceOptions o;
  o.buf = buf;
  o.count = c.bytes / comm::dtypeSize(c.dtype);
  o.dt = c.dtype;
  o.op = comm::ReduceOp::sum;
  o.segment_bytes = c.segment_bytes;
  o.group_size = c.group_size > 0 ? c.group_size : default_group;
  o.scratch = &scratch;
  if (runsInNodeMemory(ex.network(), g, c, default_group)) {  // hier's node part in its shared memory
    SimNode node(ex, g, o.group_size, c.node_piece);
    o.node = &node;
    spec.runs.allreduce_fn(ex, g, o);
  } else {
    spec.runs.allreduce_fn(ex, g, o);
  }
}

// Allgather(v) and broadcast through the algorithm table: the twin of the call's algorithm, or,
// when that does not run the op (a spec that names none: CollectiveSpec's ring for a
// broadcast), the op's first row (comm::defaultAlgorithm: the ring, the tree).
const comm::AlgorithmSpec& simulatedRow(Algo a, comm::Op op) {
  const Algo run = a != Algo::automatic && comm::algoRuns(op, a) ? a : comm::defaultAlgorithm(op);
  return comm::algorithmSpec(comm::algorithmSpec(run).sim);
}

void allgather(SimExchange& ex, const comm::Group& g, const CallSpec& c, int default_group, char* buf,
               const std::vector<size_t>& off) {
  comm::AllgatherOptions o;
  o.buf = buf;
  o.off_bytes = &off;
  o.segment_bytes = c.segment_bytes;
  o.group_size = c.group_size > 0 ? c.group_size : default_group;
  simulatedRow(c.algo, comm::Op::allgather).runs.allgather_fn(ex, g, o);
}

void broadcast(SimExchange& ex, const comm::Group& g, const CallSpec& c, char* buf) {
  comm::BroadcastOptions o;
  o.buf = buf;
  o.bytes = c.bytes;
  o.root = c.root;
  o.segment_bytes = c.segment_bytes;
  simulatedRow(c.algo, comm::Op::broadcast).runs.broadcast_fn(ex, g, o);
}

bool spansNodes(SimNetwork& net, const comm::Group& g) {
  for (int r : g.ranks)
    if (!net.sameNode(r, g.ranks.front())) return true;
  return false;
}

// How many of g's first members share the first one's node.
int leadingNodeRun(SimNetwork& net, const comm::Group& g) {
  int n = 1;
  while (n < g.size() && net.sameNode(g.ranks[n], g.ranks[0])) ++n;
  return n;
}

// In-network aggregation (ina.h) of an allreduce over ranks of several nodes. Where the call's
// members sit on their nodes in contiguous runs of one size (the first node's: a whole node's
// ranks, or a subgroup's share of each node, e.g. AB-training's groups), they first sum their
// buffers in the node's shared memory (SimNode), the node leaders' sums go through the switches,
// and the leaders hand the total back in node memory: a node's link carries the buffer once each
// way (SHARP-like with a node-local reduce). Else every rank streams its own buffer.
void inaAllreduce(SimExchange& ex, const comm::Group& g, const CallSpec& c, char* buf) {
  SimNetwork& net = ex.network();
  const int gs = leadingNodeRun(net, g);
  if (gs < 2 || !groupsOnOneNode(net, g, gs)) {
    net.ina->allreduce(ex.rank(), g.ranks, c.bytes, ex.seq());
    return;
  }
  const size_t count = c.bytes / comm::dtypeSize(c.dtype);
  SimNode node(ex, g, gs, c.node_piece > 0 ? c.node_piece : comm::CommOptions{}.shm_piece_bytes);
  node.reduceToLeader(buf, count, c.dtype, comm::ReduceOp::sum);
  if (g.me % gs == 0) {
    std::vector<int> leaders;
    for (int i = 0; i < g.size(); i += gs) leaders.push_back(g.ranks[i]);
    net.ina->allreduce(ex.rank(), leaders, c.bytes, ex.seq());
  }
  node.broadcastFromLeader(buf, count, c.dtype);
}

}  // namespace

bool runsInNodeMemory(SimNetwork& net, const comm::Group& g, const CallSpec& c, int default_group) {
  const int gs = std::min(c.group_size > 0 ? c.group_size : default_group, g.size());
  return c.op == "allreduce" && c.algo == Algo::hierarchical && c.node_piece > 0 && gs >= 2 &&
         !(net.ina && spansNodes(net, g)) && groupsOnOneNode(net, g, gs);  // as Communicator::nodeShm
}

void runCall(SimExchange& ex, const comm::Group& g, const CallSpec& c, int default_group, char* buf, char* out,
             comm::Scratch& scratch) {
  const size_t es = comm::dtypeSize(c.dtype);
  const int n = g.size();
  if (const double h = ex.network().callOverhead(c.op + "/" + comm::algoName(c.algo)); h > 0)
    simgrid::s4u::this_actor::sleep_for(h);
  if (c.op == "allreduce" && ex.network().ina && spansNodes(ex.network(), g)) {
    inaAllreduce(ex, g, c, buf);
  } else if (c.op == "allreduce") {
    allreduce(ex, g, c, default_group, buf, scratch);
  } else if (c.op == "allgatherv") {
    std::vector<size_t> off(n + 1, 0);
    if (c.rank_bytes.empty()) {
      for (int i = 0; i <= n; ++i) off[i] = c.bytes / n * i;
    } else {
      if (static_cast<int>(c.rank_bytes.size()) != n)
        throw Error("simulate: allgatherv with " + std::to_string(c.rank_bytes.size()) + " counts in a group of " +
                    std::to_string(n));
      for (int i = 0; i < n; ++i) off[i + 1] = off[i] + c.rank_bytes[i];
    }
    allgather(ex, g, c, default_group, buf, off);
  } else if (c.op == "reduce_scatter") {
    const size_t per = c.bytes / es / n;
    std::vector<size_t> off(n + 1);
    for (int i = 0; i <= n; ++i) off[i] = per * i;
    comm::ReduceScatterOptions o;  // the ring: reduce_scatter's one algorithm
    o.buf = buf;
    o.off = &off;
    o.dt = c.dtype;
    o.op = comm::ReduceOp::sum;
    o.seg_elems = comm::segmentElems(c.segment_bytes, es, per);
    o.tmp = scratch.get(comm::ringScratchBytes(off, es));
    comm::ringReduceScatter(ex, g, o);
  } else if (c.op == "broadcast") {
    broadcast(ex, g, c, buf);
  } else if (c.op == "alltoall") {
    comm::AlltoallOptions o;  // pairwise: alltoall's one algorithm
    o.send = buf;
    o.recv = out;
    o.block_bytes = c.bytes / n;
    comm::alltoallPairwise(ex, g, o);
  } else if (c.op == "barrier") {
    comm::barrierDissemination(ex, g, comm::BarrierOptions{});
  } else {
    throw ConfigError("simulate: collective '" + c.op + "' is not simulated");
  }
  ex.waitAll();
}

}  // namespace lowcomm::sim
