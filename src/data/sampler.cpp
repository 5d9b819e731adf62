#include "lowcomm/data/sampler.h"

#include <numeric>
#include <string>
#include <utility>

#include "lowcomm/base/error.h"
#include "rng.h"

namespace lowcomm::data {

DistributedSampler::DistributedSampler(int64_t size, int rank, int world, uint64_t seed, bool shuffle)
    : datasetSize_(size), rank_(rank), world_(world), seed_(seed), shuffle_(shuffle) {
  if (size < 0) throw ConfigError("sampler: data set size " + std::to_string(size) + " is negative");
  if (world < 1 || rank < 0 || rank >= world) {
    throw ConfigError("sampler: rank " + std::to_string(rank) + " is not in [0, world=" + std::to_string(world) + ")");
  }
  compute();
}

void DistributedSampler::setEpoch(int64_t epoch) {
  if (epoch < 0) throw ConfigError("sampler: epoch " + std::to_string(epoch) + " is negative");
  if (epoch == epoch_) return;
  epoch_ = epoch;
  compute();
}

void DistributedSampler::compute() {
  // Every rank builds the whole permutation: O(size) integers per epoch is cheap next to a
  // training epoch, and needs no communication to agree.
  std::vector<int64_t> perm(static_cast<size_t>(datasetSize_));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  if (shuffle_) {
    std::mt19937_64 gen(detail::mixSeed(seed_, {detail::kTagSampler, static_cast<uint64_t>(epoch_)}));
    for (size_t i = perm.size(); i > 1; --i) {
      std::swap(perm[i - 1], perm[detail::uniformBelow(gen, i)]);
    }
  }
  const int64_t perRank = datasetSize_ / world_;
  indices_.resize(static_cast<size_t>(perRank));
  for (int64_t k = 0; k < perRank; ++k) indices_[k] = perm[static_cast<size_t>(k * world_ + rank_)];
}

}  // namespace lowcomm::data
