// Communicator::split and splitRoles (lowcomm/comm/communicator.h): new communicators over a
// subset of the ranks, or two roles per process, sharing the parent's device and traffic meter.
#include <algorithm>
#include <exception>
#include <thread>

#include "link.h"
#include "mesh.h"
#include "lowcomm/comm/communicator.h"
#include "shm_domain.h"

namespace lowcomm::comm {

std::shared_ptr<Communicator> Communicator::split(int color, int key) {
  std::vector<int32_t> mine = {color, key, rank_};
  std::vector<int32_t> all(3 * size_);
  allgatherImpl(mine.data(), 3, all.data(), std::vector<size_t>(size_, 3), DType::i32, "setup", {Algo::ring, 0});
  const uint64_t id = splits_++;
  if (color < 0) return nullptr;
  std::vector<std::pair<int, int>> members;  // (key, rank)
  for (int i = 0; i < size_; ++i)
    if (all[3 * i] == color) members.emplace_back(all[3 * i + 1], all[3 * i + 2]);
  std::sort(members.begin(), members.end());
  int new_rank = 0;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i].second == rank_) new_rank = static_cast<int>(i);
  const int new_size = static_cast<int>(members.size());
  const std::string prefix = prefix_ + "/split" + std::to_string(id) + "/color" + std::to_string(color);
  std::shared_ptr<Communicator> child(new Communicator(
      store_, prefix, new_rank, new_size, opts_, meter_,
      connectLink(store_, prefix, new_rank, new_size, link_->device(), opts_.auth_token, opts_.rendezvousTimeout(),
                  opts_.congestion_control)));
  child->link_->shareAbort(link_->sharedAbortState());  // one abort ends the parent's and its splits' waits
  // The child's own locality exchange is metered: classify its peers from what this one knows.
  std::vector<bool> same(new_size);
  std::vector<int> sites(new_size);
  for (int i = 0; i < new_size; ++i) {
    same[i] = link_->sameHost(members[i].second) || members[i].second == rank_;
    sites[i] = topology_.site_of[members[i].second];
  }
  child->link_->setSameHost(std::move(same));
  child->detectLocality(std::move(sites));
  child->trace_ = trace_;
  // Ranks of the root communicator, for the timeline (empty: all of the root's, in its order).
  bool identity = true;
  std::vector<int> roots(new_size);
  for (int i = 0; i < new_size; ++i) {
    const int parent = members[i].second;
    roots[i] = world_ranks_.empty() ? parent : world_ranks_[parent];
    identity = identity && roots[i] == i;
  }
  if (!(identity && new_size == size_ && world_ranks_.empty())) child->world_ranks_ = std::move(roots);
  return child;
}

// The child's locality exchange runs over 2n ranks, so both roles of a process join at once.
std::shared_ptr<Communicator> Communicator::joinRole(const std::string& prefix, int rank, int size) {
  std::shared_ptr<Communicator> child(
      new Communicator(store_, prefix, rank, size, opts_, meter_,
                       connectLink(store_, prefix, rank, size, link_->device(), opts_.auth_token,
                                   opts_.rendezvousTimeout(), opts_.congestion_control)));
  child->link_->shareAbort(link_->sharedAbortState());
  std::vector<bool> same(size);
  std::vector<int> sites(size);
  for (int i = 0; i < size; ++i) {
    same[i] = link_->sameHost(i % size_) || i % size_ == rank_;
    sites[i] = topology_.site_of[i % size_];
  }
  child->link_->setSameHost(std::move(same));
  child->detectLocality(std::move(sites));
  // Not traced: 2n ranks in n processes have no place on a per-process timeline.
  return child;
}

std::pair<std::shared_ptr<Communicator>, std::shared_ptr<Communicator>> Communicator::splitRoles() {
  const std::string prefix = prefix_ + "/roles" + std::to_string(splits_++);
  std::shared_ptr<Communicator> second;
  std::exception_ptr error;
  std::thread other([&] {
    try {
      second = joinRole(prefix, size_ + rank_, 2 * size_);
    } catch (...) {
      error = std::current_exception();
    }
  });
  std::shared_ptr<Communicator> first;
  try {
    first = joinRole(prefix, rank_, 2 * size_);
  } catch (...) {
    other.join();
    throw;
  }
  other.join();
  if (error) std::rethrow_exception(error);
  return {first, second};
}

}  // namespace lowcomm::comm
