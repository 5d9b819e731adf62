// Allreduce through shared memory, for communicators whose ranks all share a host. Per piece:
// each rank copies its data into its slot; once all have arrived, rank r sums share r of the
// piece over all slots in rank order 0..n-1 into the result buffer; once all are done, each
// copies the whole result out. No syscalls, no kernel copies; the sum is rank-ordered, so the
// result equals the `ordered` algorithm's bit for bit.
//
// Traffic counted as the bytes crossing process boundaries through the segment: the parts of
// our slot other ranks read, and our result share they copy (2(n-1)/n of the buffer, as a ring).
#include <cstring>

#include "../reduce.h"
#include "../shm_domain.h"
#include "algorithms.h"

namespace lowcomm::comm {

void shmReduce(ShmDomain& d, char* buf, size_t count, DType dt, ReduceOp op, bool all_out,
               std::chrono::steady_clock::time_point deadline) {
  const int n = d.size(), me = d.rank();
  const size_t es = dtypeSize(dt);
  const size_t piece_elems = d.piece() / es;
  for (size_t off = 0; off < count; off += piece_elems) {
    const size_t len = std::min(piece_elems, count - off);
    const uint64_t epoch = d.nextEpoch();
    std::memcpy(d.slot(me, epoch), buf + off * es, len * es);
    d.arrive(epoch);
    d.waitArrived(epoch, deadline, "allreduce");
    const auto share = evenOffsets(len, n);
    const size_t s0 = share[me], sl = share[me + 1] - share[me];
    char* res = d.result(epoch) + s0 * es;
    std::memcpy(res, d.slot(0, epoch) + s0 * es, sl * es);
    for (int j = 1; j < n; ++j) reduceInto(res, d.slot(j, epoch) + s0 * es, sl, dt, op);
    d.done(epoch);
    d.waitDone(epoch, deadline, "allreduce");
    // result(epoch) is rewritten at epoch + 2 only, after every rank is done with epoch + 1.
    if (all_out || me == 0) std::memcpy(buf + off * es, d.result(epoch), len * es);
  }
}

void allreduceShm(ShmDomain& d, const AllreduceOptions& o, TrafficMeter& meter, const std::string& phase,
                  std::chrono::steady_clock::time_point deadline) {
  shmReduce(d, o.buf, o.count, o.dt, o.op, /*all_out=*/true, deadline);
  const NodeBytes b = nodeReduceBytes(o.count, dtypeSize(o.dt), d.size(), d.rank(), d.piece(), /*all_out=*/true);
  meter.recordSend("allreduce", phase, b.sent, /*same_host=*/true);
  meter.recordRecv("allreduce", phase, b.got, /*same_host=*/true);
}

}  // namespace lowcomm::comm
