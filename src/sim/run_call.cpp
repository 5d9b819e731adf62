#include "run_call.h"

#include <simgrid/s4u/Actor.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "ina.h"
#include "sim_node.h"
#include "lowcomm/base/error.h"
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

void allreduce(SimExchange& ex, const comm::Group& g, const CallSpec& c, int default_group, char* buf,
               comm::Scratch& scratch) {
  const size_t count = c.bytes / comm::dtypeSize(c.dtype);
  switch (c.algo) {
    case Algo::halving_doubling:
      comm::allreduceHalvingDoubling(ex, g, buf, count, c.dtype, comm::ReduceOp::sum, 0, scratch);
      break;
    case Algo::hierarchical: {
      const int gs = c.group_size > 0 ? c.group_size : default_group;
      if (runsInNodeMemory(ex.network(), g, c, default_group)) {  // the node's part in its shared memory
        SimNode node(ex, g, gs, c.node_piece);
        comm::allreduceHierarchicalNode(ex, g, gs, node, buf, count, c.dtype, comm::ReduceOp::sum, c.segment_bytes,
                                        scratch);
      } else {
        comm::allreduceHierarchical(ex, g, gs, buf, count, c.dtype, comm::ReduceOp::sum, c.segment_bytes, scratch);
      }
      break;
    }
    case Algo::rails:
      comm::allreduceRails(ex, g, c.group_size > 0 ? c.group_size : default_group, buf, count, c.dtype,
                           comm::ReduceOp::sum, c.segment_bytes, scratch);
      break;
    case Algo::ordered:
      comm::allreduceOrdered(ex, g, buf, count, c.dtype, comm::ReduceOp::sum, c.segment_bytes, scratch);
      break;
    default:  // ring; shared memory (shm) is not simulated: its calls run as a ring on the node's loopback
      comm::allreduceRing(ex, g, buf, count, c.dtype, comm::ReduceOp::sum, c.segment_bytes, 0, scratch);
  }
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
    if (c.algo == Algo::hierarchical)
      comm::allgatherHierarchical(ex, g, c.group_size > 0 ? c.group_size : default_group, buf, off, c.segment_bytes);
    else
      comm::ringAllgather(ex, g, buf, off, c.segment_bytes, 0);
  } else if (c.op == "reduce_scatter") {
    const size_t per = c.bytes / es / n;
    std::vector<size_t> off(n + 1);
    for (int i = 0; i <= n; ++i) off[i] = per * i;
    comm::ringReduceScatter(ex, g, buf, off, c.dtype, comm::ReduceOp::sum,
                            comm::segmentElems(c.segment_bytes, es, per), 0,
                            scratch.get(comm::ringScratchBytes(off, es)));
  } else if (c.op == "broadcast") {
    if (c.algo == comm::Algo::chain) comm::broadcastChain(ex, g, buf, c.bytes, c.root, c.segment_bytes, 0);
    else comm::broadcastTree(ex, g, buf, c.bytes, c.root, c.segment_bytes, 0);
  } else if (c.op == "alltoall") {
    comm::alltoallPairwise(ex, g, buf, out, c.bytes / n, 0);
  } else if (c.op == "barrier") {
    comm::barrierDissemination(ex, g, 0);
  } else {
    throw ConfigError("simulate: collective '" + c.op + "' is not simulated");
  }
  ex.waitAll();
}

}  // namespace lowcomm::sim
