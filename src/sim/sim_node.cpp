#include "sim_node.h"

#include <algorithm>

namespace lowcomm::sim {

namespace sg4 = simgrid::s4u;

SimNode::SimNode(SimExchange& ex, const comm::Group& g, int group_size, size_t piece_bytes)
    : ex_(ex), piece_((std::max<size_t>(piece_bytes, 4096) + 4095) / 4096 * 4096) {  // as ShmDomain rounds it
  const int n = g.size();
  const int gs = std::max(1, std::min(group_size, n)), first = g.me / gs * gs;
  me_ = g.me - first;
  size_ = std::min(n, first + gs) - first;
  peer_ = g.ranks[first + (me_ == 0 && size_ > 1 ? 1 : 0)];
  // One barrier per call and node: the call's sequence number and the node leader's rank.
  const uint64_t key = (static_cast<uint64_t>(ex.seq()) << 32) | static_cast<uint64_t>(g.ranks[first]);
  barrier_ = ex.network().barrier(key, size_);
}

void SimNode::reduceToLeader(char*, size_t count, comm::DType dt, comm::ReduceOp) {
  if (size_ == 1 || count == 0) return;
  const double t0 = sg4::Engine::get_clock();
  const double bytes = ex_.network().nodeMemoryWork(static_cast<double>(count * comm::dtypeSize(dt)));
  sg4::this_actor::execute(bytes);  // into its slot
  barrier_->wait();
  sg4::this_actor::execute(bytes);  // its share (bytes / size) copied, then size - 1 sums into it
  barrier_->wait();
  if (me_ == 0) sg4::this_actor::execute(bytes);  // the sum out
  ex_.addNodeTime(sg4::Engine::get_clock() - t0);  // the node's step, its ranks' waits for each other included
  record(comm::nodeReduceBytes(count, comm::dtypeSize(dt), size_, me_, piece_, /*all_out=*/false));
}

void SimNode::broadcastFromLeader(char*, size_t count, comm::DType dt) {
  if (size_ == 1 || count == 0) return;
  double t0 = sg4::Engine::get_clock();
  const double bytes = ex_.network().nodeMemoryWork(static_cast<double>(count * comm::dtypeSize(dt)));
  if (me_ == 0) sg4::this_actor::execute(bytes);
  barrier_->wait();
  if (me_ != 0) t0 = sg4::Engine::get_clock();  // a member waited for its leader's ring, not the node
  if (me_ != 0) sg4::this_actor::execute(bytes);
  barrier_->wait();
  ex_.addNodeTime(sg4::Engine::get_clock() - t0);
  record(comm::nodeBroadcastBytes(count, comm::dtypeSize(dt), size_, me_));
}

// As ShmNode: one record per step and direction that moved bytes.
void SimNode::record(const comm::NodeBytes& b) {
  if (b.sent > 0) ex_.countNode(peer_, b.sent);
  ex_.network().recv[ex_.rank()] += b.got;
}

}  // namespace lowcomm::sim
