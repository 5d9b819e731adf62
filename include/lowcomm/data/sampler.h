// Distributed sampler: splits a data set into equal, disjoint per-rank shards, reshuffled per epoch.
//
// Contract: for a given (size, world, seed, epoch) every rank derives the same permutation P of
// [0, size) (std::mt19937_64 + Fisher-Yates with a portable bounded draw, so it is identical
// across runs, machines and standard libraries; torch's global RNG is not touched). The first
// world * floor(size / world) positions of P are kept (drop-last) and rank r takes positions
// r, r + world, r + 2 world, ... — so shards are disjoint, cover world * floor(size / world)
// samples, and every rank has exactly floor(size / world) of them.
// Without shuffle P is the identity for every epoch.
#pragma once

#include <cstdint>
#include <vector>

namespace lowcomm::data {

class DistributedSampler {
 public:
  // Throws ConfigError unless size >= 0, world >= 1 and 0 <= rank < world. Starts at epoch 0.
  DistributedSampler(int64_t size, int rank, int world, uint64_t seed, bool shuffle = true);

  // Recomputes the shard for `epoch` (>= 0); a no-op when already there. O(size).
  void setEpoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }
  // This rank's sample indices for the current epoch, in visiting order.
  const std::vector<int64_t>& indices() const { return indices_; }
  // floor(size / world), the same on every rank.
  int64_t size() const { return static_cast<int64_t>(indices_.size()); }
  int rank() const { return rank_; }
  int world() const { return world_; }

 private:
  void compute();

  int64_t datasetSize_;
  int rank_;
  int world_;
  uint64_t seed_;
  bool shuffle_;
  int64_t epoch_ = 0;
  std::vector<int64_t> indices_;
};

}  // namespace lowcomm::data
