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

class NodeMemory;
using Posted = std::vector<std::vector<int>>;

// One options struct per operation (as Gloo's AllreduceOptions): the buffers of one call and how
// to run it. An algorithm ignores the fields it does not read; pointers are not owned.

// Allreduce of `count` elements of `buf` in place.
struct AllreduceOptions {
  char* buf = nullptr;
  size_t count = 0;
  DType dt = DType::f32;
  ReduceOp op = ReduceOp::sum;
  size_t segment_bytes = 0;    // pipelining granularity (ring, hier, rails, ordered): must be > 0 for them
  int group_size = 0;          // hier, rails: ranks per group; sites: per site (contiguous members of g)
  uint32_t sub = 0;            // ring (uses sub and sub + 1), hd; the others use the fixed subs below
  Scratch* scratch = nullptr;  // required
  NodeMemory* node = nullptr;  // hier: this rank's group's shared memory (the node version); nullptr: TCP
};

// Reduce-scatter over chunks: chunk c of buf (elements [(*off)[c], (*off)[c+1])) ends reduced on
// member c.
struct ReduceScatterOptions {
  char* buf = nullptr;
  const std::vector<size_t>* off = nullptr;  // n + 1 element offsets
  DType dt = DType::f32;
  ReduceOp op = ReduceOp::sum;
  size_t seg_elems = 1;  // segmentElems()
  uint32_t sub = 0;
  char* tmp = nullptr;   // ringScratchBytes(*off, es) bytes
};

// Allgather(v): member c's block (bytes [(*off_bytes)[c], (*off_bytes)[c+1]) of buf) ends on
// every member.
struct AllgatherOptions {
  char* buf = nullptr;
  const std::vector<size_t>* off_bytes = nullptr;  // n + 1 byte offsets
  size_t segment_bytes = 0;  // must be > 0
  int group_size = 0;        // hier: ranks per group
  uint32_t sub = 0;          // ring; hier uses subs 0..2
  const Posted* posted = nullptr;  // ring: receives posted earlier by postRingAllgather
};

// Broadcast of `bytes` of buf from member `root`.
struct BroadcastOptions {
  char* buf = nullptr;
  size_t bytes = 0;
  int root = 0;
  size_t segment_bytes = 0;  // must be > 0
  uint32_t sub = 0;
};

// All-to-all: block j (block_bytes) of send goes to member j's recv block me.
struct AlltoallOptions {
  const char* send = nullptr;
  char* recv = nullptr;
  size_t block_bytes = 0;
  uint32_t sub = 0;
};

struct BarrierOptions {
  uint32_t sub = 0;
};

// Ring reduce-scatter. Sends may still be pending on return (ex.waitAll()).
size_t ringScratchBytes(const std::vector<size_t>& off, size_t es);
void ringReduceScatter(Exchange& ex, const Group& g, const ReduceScatterOptions& o);

// Ring allgather. Receives can be posted early (postRingAllgather) when the caller knows no
// earlier step still reads the regions they land in; ringAllgather then uses them (o.posted).
// ringAllgather waits for its own messages only: the caller's other requests (e.g. the sites
// allreduce's later pieces still crossing the WAN) stay pending and their ids stay valid.
Posted postRingAllgather(Exchange& ex, const Group& g, const AllgatherOptions& o);
void ringAllgather(Exchange& ex, const Group& g, const AllgatherOptions& o);
// Two-level allgather(v) (src/comm/algo/allgather_hierarchical.cpp): blocks gathered on each
// group's leader, the leaders' ring over group blocks, then a broadcast inside each group; only
// leaders cross group boundaries.
void allgatherHierarchical(Exchange& ex, const Group& g, const AllgatherOptions& o);  // uses subs 0..2

void allreduceRing(Exchange& ex, const Group& g, const AllreduceOptions& o);  // uses sub and sub+1
void allreduceHalvingDoubling(Exchange& ex, const Group& g, const AllreduceOptions& o);
// With o.node, the group part runs in node memory (allreduceHierarchicalNode); else over `ex`.
void allreduceHierarchical(Exchange& ex, const Group& g, const AllreduceOptions& o);  // uses subs 0..7

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
// Two-level allreduce whose group part runs in *o.node (this rank's group of o.group_size
// contiguous members of g): only the group leaders use `ex`, for a ring over the leaders,
// pipelined over nodePipelineChunks() chunks of the buffer (the group's sum of the next chunk and
// the copy out of the previous one run during a chunk's ring).
// src/comm/algo/allreduce_hierarchical_node.cpp.
inline constexpr size_t kNodePipelineChunks = 16;
static_assert(2 + 2 * kNodePipelineChunks <= 64, "each chunk's ring takes two of the 64 subs");
// Chunks of `bytes` for `leaders` group leaders: at least half a segment per leader and a segment
// per chunk (each chunk's ring costs 2 (leaders - 1) steps of latency), at most kNodePipelineChunks.
size_t nodePipelineChunks(size_t bytes, size_t seg_bytes, int leaders);
// Uses subs 2..2 + 2 * kNodePipelineChunks - 1.
void allreduceHierarchicalNode(Exchange& ex, const Group& g, const AllreduceOptions& o);
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
void allreduceRails(Exchange& ex, const Group& g, const AllreduceOptions& o);  // uses subs 0..7
// Pipelined allreduce for sites joined by a WAN (src/comm/algo/allreduce_sites.cpp): per piece
// of the buffer, reduce-scatter inside the site (group of group_size contiguous members), a
// direct exchange of each rank's chunk with the ranks holding it in the other sites (one WAN
// message latency), sums in site order, allgather inside the site; the LAN phases of other
// pieces overlap each piece's WAN transfer. Every rank gets the same bits.
inline constexpr size_t kSitesMaxPieces = 16;
inline constexpr size_t kSitesMinPieceBytes = 1 << 20;
static_assert(2 * kSitesMaxPieces + 1 <= 64, "a reduce-scatter and an allgather sub per piece, one WAN sub");
// Pieces for a buffer of `bytes`: one per kSitesMinPieceBytes, at least 1, at most kSitesMaxPieces.
size_t sitesPieces(size_t bytes);
void allreduceSites(Exchange& ex, const Group& g, const AllreduceOptions& o);  // uses subs 0..32
void allreduceOrdered(Exchange& ex, const Group& g, const AllreduceOptions& o);  // uses subs 0..1

// Segmented binomial-tree broadcast from member o.root.
void broadcastTree(Exchange& ex, const Group& g, const BroadcastOptions& o);
// Pipelined chain broadcast from member o.root (src/comm/algo/broadcast_chain.cpp): segments of
// chainSegmentBytes() stream down the members in rank order from the root, each link carrying
// the buffer once; for bandwidth-bound sizes, where the tree's root sends it log2(n) times.
inline constexpr size_t kChainMinSegment = 64 << 10;
size_t chainSegmentBytes(size_t bytes, int n, size_t seg_bytes);
void broadcastChain(Exchange& ex, const Group& g, const BroadcastOptions& o);
// Pairwise exchange.
void alltoallPairwise(Exchange& ex, const Group& g, const AlltoallOptions& o);
void barrierDissemination(Exchange& ex, const Group& g, const BarrierOptions& o);

}  // namespace lowcomm::comm
