#include "shm_node.h"

#include <algorithm>
#include <cstring>

#include "algo/algorithms.h"

namespace lowcomm::comm {

void ShmNode::reduceToLeader(char* buf, size_t count, DType dt, ReduceOp op) {
  if (d_.size() == 1) return;  // a group of one: buf is its sum
  shmReduce(d_, buf, count, dt, op, /*all_out=*/false, deadline_);
  record(nodeReduceBytes(count, dtypeSize(dt), d_.size(), d_.rank(), d_.piece(), /*all_out=*/false));
}

// Per piece: the leader copies it into the segment's result, the others copy it out.
void ShmNode::broadcastFromLeader(char* buf, size_t count, DType dt) {
  if (d_.size() == 1) return;
  const int me = d_.rank();
  const size_t es = dtypeSize(dt), piece = d_.piece() / es;
  for (size_t off = 0; off < count; off += piece) {
    const size_t len = std::min(piece, count - off);
    const uint64_t epoch = d_.nextEpoch();
    if (me == 0) std::memcpy(d_.result(epoch), buf + off * es, len * es);
    d_.arrive(epoch);
    d_.waitArrived(epoch, deadline_, "allreduce");
    if (me != 0) std::memcpy(buf + off * es, d_.result(epoch), len * es);
    d_.done(epoch);
    d_.waitDone(epoch, deadline_, "allreduce");
  }
  record(nodeBroadcastBytes(count, es, d_.size(), me));
}

void ShmNode::record(const NodeBytes& b) {
  if (b.sent > 0) meter_.recordSend("allreduce", phase_, b.sent, /*same_host=*/true);
  if (b.got > 0) meter_.recordRecv("allreduce", phase_, b.got, /*same_host=*/true);
}

}  // namespace lowcomm::comm
