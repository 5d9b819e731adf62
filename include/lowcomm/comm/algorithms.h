// Collective algorithms over an Exchange: the one description of each algorithm that the real
// communicator (Gloo) and the simulator (SimGrid) both execute. One algorithm per file in
// src/comm/algo.
//
// Every function is called by all members of `g` with matching arguments. `sub` (0..63) is the
// slot namespace of this invocation inside the call, so composed algorithms never share slots.
// Reductions never divide: the Communicator applies avg once at the end.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "lowcomm/comm/dtype.h"
#include "lowcomm/comm/exchange.h"

namespace lowcomm::comm {

// Balanced split of `count` elements into n chunks; returns n+1 offsets.
std::vector<size_t> evenOffsets(size_t count, int n);
// Elements per pipelining segment for `es`-byte elements, keeping segments per chunk bounded.
size_t segmentElems(size_t segment_bytes, size_t es, size_t max_chunk_elems);

// Receives are posted before anything is sent: Gloo moves data only once the receiver has
// posted (its TCP pairs rendezvous per message), so early posting removes a round trip per
// message and keeps the pipeline full.

// Ring reduce-scatter: chunk c of buf (elements [off[c], off[c+1])) ends reduced on member c.
// `tmp` holds ringScratchBytes() bytes. Sends may still be pending on return (ex.waitAll()).
size_t ringScratchBytes(const std::vector<size_t>& off, size_t es);
void ringReduceScatter(Exchange& ex, const Group& g, char* buf, const std::vector<size_t>& off, DType dt,
                       ReduceOp op, size_t seg_elems, uint32_t sub, char* tmp);

// Ring allgather: member c's block (bytes [off[c], off[c+1]) of buf) ends on every member.
// Receives can be posted early (postRingAllgather) when the caller knows no earlier step still
// reads the regions they land in; ringAllgather then uses them.
using Posted = std::vector<std::vector<int>>;
Posted postRingAllgather(Exchange& ex, const Group& g, char* buf, const std::vector<size_t>& off_bytes,
                         size_t seg_bytes, uint32_t sub);
void ringAllgather(Exchange& ex, const Group& g, char* buf, const std::vector<size_t>& off_bytes,
                   size_t seg_bytes, uint32_t sub, const Posted* posted = nullptr);
// Two-level allgather(v) (src/comm/algo/allgather_hierarchical.cpp): blocks gathered on each
// group's leader, the leaders' ring over group blocks, then a broadcast inside each group; only
// leaders cross group boundaries.
void allgatherHierarchical(Exchange& ex, const Group& g, int group_size, char* buf,
                           const std::vector<size_t>& off_bytes, size_t seg_bytes);  // uses subs 0..2

void allreduceRing(Exchange& ex, const Group& g, char* buf, size_t count, DType dt, ReduceOp op,
                   size_t seg_bytes, uint32_t sub, Scratch& scratch);  // uses sub and sub+1
void allreduceHalvingDoubling(Exchange& ex, const Group& g, char* buf, size_t count, DType dt, ReduceOp op,
                              uint32_t sub, Scratch& scratch);
void allreduceHierarchical(Exchange& ex, const Group& g, int group_size, char* buf, size_t count, DType dt,
                           ReduceOp op, size_t seg_bytes, Scratch& scratch);  // uses subs 0..7

// The memory the members of one group (a node) share, for allreduceHierarchicalNode: a
// shared-memory segment in the communicator (src/comm/shm_node.h), host copies and a barrier in
// the simulator (src/sim/sim_node.h).
class NodeMemory {
 public:
  virtual ~NodeMemory() = default;
  // The sum of every member's `buf` (count elements) into the leader's (group rank 0) buf; the
  // others' buf unchanged.
  virtual void reduceToLeader(char* buf, size_t count, DType dt, ReduceOp op) = 0;
  // The leader's buf into every member's.
  virtual void broadcastFromLeader(char* buf, size_t count, DType dt) = 0;
};
// Two-level allreduce whose group part runs in `node` (this rank's group of `group_size`
// contiguous members of g): only the group leaders use `ex`, for a ring over the leaders,
// pipelined over nodePipelineChunks() chunks of the buffer (the group's sum of the next chunk and
// the copy out of the previous one run during a chunk's ring).
// src/comm/algo/allreduce_hierarchical_node.cpp.
inline constexpr size_t kNodePipelineChunks = 16;
static_assert(2 + 2 * kNodePipelineChunks <= 64, "each chunk's ring takes two of the 64 subs");
// Chunks of `bytes` for `leaders` group leaders: at least half a segment per leader and a segment
// per chunk (each chunk's ring costs 2 (leaders - 1) steps of latency), at most kNodePipelineChunks.
size_t nodePipelineChunks(size_t bytes, size_t seg_bytes, int leaders);
void allreduceHierarchicalNode(Exchange& ex, const Group& g, int group_size, NodeMemory& node, char* buf,
                               size_t count, DType dt, ReduceOp op, size_t seg_bytes,
                               Scratch& scratch);  // uses subs 2..2 + 2 * kNodePipelineChunks - 1
// What a node-memory step moves between this member's memory and the others', counted as
// same-host traffic by both executors: `sent` what the others read of this member's memory, `got`
// what it reads of theirs. The sum runs per piece of `piece_bytes` (the segment's unit), each
// member summing its share of the piece; `all_out`: every member copies the sum out, else the
// leader only.
struct NodeBytes {
  uint64_t sent = 0, got = 0;
};
NodeBytes nodeReduceBytes(size_t count, size_t es, int n, int me, size_t piece_bytes, bool all_out);
NodeBytes nodeBroadcastBytes(size_t count, size_t es, int n, int me);
// Per-rail two-level allreduce (src/comm/algo/allreduce_rails.cpp): every local rank crosses the
// network with 1/group_size of the buffer.
void allreduceRails(Exchange& ex, const Group& g, int group_size, char* buf, size_t count, DType dt, ReduceOp op,
                    size_t seg_bytes, Scratch& scratch);  // uses subs 0..7
void allreduceOrdered(Exchange& ex, const Group& g, char* buf, size_t count, DType dt, ReduceOp op,
                      size_t seg_bytes, Scratch& scratch);  // uses subs 0..1


// Segmented binomial-tree broadcast from member `root`.
void broadcastTree(Exchange& ex, const Group& g, char* buf, size_t bytes, int root, size_t seg_bytes,
                   uint32_t sub);
// Pipelined chain broadcast from member `root` (src/comm/algo/broadcast_chain.cpp): segments of
// chainSegmentBytes() stream down the members in rank order from the root, each link carrying
// the buffer once; for bandwidth-bound sizes, where the tree's root sends it log2(n) times.
inline constexpr size_t kChainMinSegment = 64 << 10;
size_t chainSegmentBytes(size_t bytes, int n, size_t seg_bytes);
void broadcastChain(Exchange& ex, const Group& g, char* buf, size_t bytes, int root, size_t seg_bytes,
                    uint32_t sub);
// Pairwise exchange: block j (block_bytes) of send goes to member j's recv block me.
void alltoallPairwise(Exchange& ex, const Group& g, const char* send, char* recv, size_t block_bytes,
                      uint32_t sub);
void barrierDissemination(Exchange& ex, const Group& g, uint32_t sub);

}  // namespace lowcomm::comm
