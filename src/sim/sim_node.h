// A node's shared memory in the simulation (lowcomm/comm/algorithms.h NodeMemory; private to the
// sim layer): what the communicator's segment does (src/comm/shm_node.cpp) as host work and a
// barrier of the node's ranks. Summing: every rank copies its buffer into its slot, the node waits
// for all, each sums its share over the slots, waits, and the leader copies the sum out;
// broadcasting: the leader copies in, the others copy out after a barrier. Copies and sums are
// computations at the node memory's speed (PlatformSpec::node_memory_Bps), whole buffers at once
// (the segment's pieces only pipeline them). Bytes and records as the real meter counts them
// (nodeReduceBytes, nodeBroadcastBytes): on no link.
#pragma once

#include "lowcomm/comm/algorithms.h"
#include "sim_exchange.h"

namespace lowcomm::sim {

class SimNode final : public comm::NodeMemory {
 public:
  // `ex`'s rank in group `g` (its call), groups of `group_size` contiguous members, the segment's
  // pieces of `piece_bytes`.
  SimNode(SimExchange& ex, const comm::Group& g, int group_size, size_t piece_bytes);
  void reduceToLeader(char* buf, size_t count, comm::DType dt, comm::ReduceOp op) override;
  void broadcastFromLeader(char* buf, size_t count, comm::DType dt) override;

 private:
  void record(const comm::NodeBytes& b);
  SimExchange& ex_;
  int me_ = 0, size_ = 1, peer_ = 0;  // rank in the node, node size, another rank of the node
  size_t piece_;
  simgrid::s4u::BarrierPtr barrier_;
};

}  // namespace lowcomm::sim
