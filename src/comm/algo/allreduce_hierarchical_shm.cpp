// Two-level allreduce with the node's part in shared memory (issue 15): only the node leaders
// use the network. Per piece of the segment, every rank of the node copies its data into its slot
// and sums its share of the piece over all slots (local rank order) into the result, which the
// leader copies out; the leaders run the ring allreduce over TCP on the whole buffer; then, per
// piece again, the leader copies the result into the segment and the others copy it out. No
// loopback TCP inside the node (the TCP version, allreduce_hierarchical.cpp, puts a reduce-scatter,
// a gather and a tree broadcast through the kernel: 2.5 buffers per node of 2 ranks).
//
// Traffic (counted as same-host bytes, as allreduceShm): what other ranks read of this rank's
// slot and what this rank reads of theirs; the leader's result read by the others.
#include <algorithm>
#include <cstring>

#include "../reduce.h"
#include "../shm_domain.h"
#include "algorithms.h"
#include "lowcomm/base/error.h"

namespace lowcomm::comm {

namespace {

// The leader's buf to every rank of the node.
ShmBytes broadcastOnNode(ShmDomain& d, char* buf, size_t count, DType dt, std::chrono::steady_clock::time_point deadline) {
  const int n = d.size(), me = d.rank();
  const size_t es = dtypeSize(dt), piece = d.piece() / es;
  ShmBytes b;
  for (size_t off = 0; off < count; off += piece) {
    const size_t len = std::min(piece, count - off);
    const uint64_t epoch = d.nextEpoch();
    if (me == 0) std::memcpy(d.result(epoch), buf + off * es, len * es);
    d.arrive(epoch);
    d.waitArrived(epoch, deadline, "allreduce");
    if (me != 0) std::memcpy(buf + off * es, d.result(epoch), len * es);
    d.done(epoch);
    d.waitDone(epoch, deadline, "allreduce");
    if (me == 0) b.sent += static_cast<uint64_t>(n - 1) * len * es;
    else b.got += len * es;
  }
  return b;
}

}  // namespace

void allreduceHierarchicalShm(Exchange& ex, const Group& g, int group_size, ShmDomain& node, char* buf,
                              size_t count, DType dt, ReduceOp op, size_t seg_bytes, Scratch& scratch,
                              TrafficMeter& meter, const std::string& phase,
                              std::chrono::steady_clock::time_point deadline) {
  const int n = g.size();
  if (n == 1 || count == 0) return;
  const int gs = std::max(1, std::min(group_size, n));
  LC_ENFORCE(node.rank() == g.me % gs && node.size() == std::min(n, g.me / gs * gs + gs) - g.me / gs * gs,
             "hierarchical allreduce: the node's shared memory does not match group ", g.me / gs);
  const ShmBytes b = shmReduce(node, buf, count, dt, op, /*all_out=*/false, deadline);
  if (node.rank() == 0 && n > gs) {
    Group leaders;
    for (int i = 0; i < n; i += gs) leaders.ranks.push_back(g.ranks[i]);
    leaders.me = g.me / gs;
    allreduceRing(ex, leaders, buf, count, dt, op, seg_bytes, 2, scratch);
  }
  const ShmBytes c = broadcastOnNode(node, buf, count, dt, deadline);
  meter.recordSend("allreduce", phase, b.sent + c.sent, /*same_host=*/true);
  meter.recordRecv("allreduce", phase, b.got + c.got, /*same_host=*/true);
}

}  // namespace lowcomm::comm
