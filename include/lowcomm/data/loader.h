// Batch loader: (data set, distributed sampler, batch size, augmentation) -> {x, y} batches.
//
// Contract:
// - Batch b of epoch e on rank r holds the samples at sampler positions [b B, (b+1) B) of that
//   epoch's shard (DistributedSampler with the loader's seed), gathered with index_select;
//   x is float32 [B, C, H, W], y int64 [B]; for a language-modelling data set x and y are int64
//   [B, T] (tokens and next tokens), which takes no augmentation.
// - Augmentation of that batch is seeded from (seed, e, r, b) alone, so the stream is
//   reproducible and any position can be reproduced without replaying earlier batches.
// - dropLast (default) drops the final partial batch, so every rank sees the same number of
//   batches; with dropLast=false it is produced (evaluation: world 1, shuffle off and
//   dropLast off visits every sample exactly once).
// - Checkpoint/resume: position() is the next batch to be produced; after seek(p) the loader
//   yields exactly what an uninterrupted run would from p. The loader starts at {0, 0}.
//
//   BatchLoader::Position at = resuming ? saved : BatchLoader::Position{0, 0};
//   for (int64_t e = at.epoch; e < epochs; ++e) {
//     loader.seek(e == at.epoch ? at : BatchLoader::Position{e, 0});
//     for (Batch b; loader.next(b);) { step(b); saved = loader.position(); }
//   }
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "lowcomm/data/augment.h"
#include "lowcomm/data/dataset.h"
#include "lowcomm/data/sampler.h"

namespace lowcomm::data {

struct Batch {
  torch::Tensor x;  // float32 [B, C, H, W]; language modelling: int64 [B, T]
  torch::Tensor y;  // int64 [B]; language modelling: int64 [B, T]
};

class BatchLoader {
 public:
  struct Position {
    int64_t epoch = 0;
    int64_t batch = 0;  // index of the next batch within the epoch, 0..batchesPerEpoch()
    bool operator==(const Position& o) const { return epoch == o.epoch && batch == o.batch; }
  };

  // Keeps a shallow copy of `data` (tensors share storage). Crop padding takes
  // data.blackValue() (0 when the data set records no normalisation). Throws ConfigError for batch < 1,
  // a bad rank/world, an invalid Augment, or a shard too small for one batch.
  BatchLoader(const Dataset& data, int rank, int world, int64_t batch, uint64_t seed, Augment augment = {},
              bool shuffle = true, bool dropLast = true);

  // Same as seek({epoch, 0}).
  void startEpoch(int64_t epoch);
  // Fills `out` with the next batch and advances; false (out untouched) at the end of the epoch.
  bool next(Batch& out);
  // Number of batches per epoch, equal on every rank.
  int64_t batchesPerEpoch() const;
  Position position() const { return pos_; }
  // Throws ConfigError unless epoch >= 0 and 0 <= batch <= batchesPerEpoch() (a checkpoint
  // taken with another batch size or world size fails here).
  void seek(Position p);

  const Dataset& dataset() const { return data_; }
  const DistributedSampler& sampler() const { return sampler_; }
  int64_t batchSize() const { return batch_; }

 private:
  Dataset data_;
  DistributedSampler sampler_;
  int64_t batch_;
  uint64_t seed_;
  Augment augment_;
  bool dropLast_;
  std::vector<float> fill_;
  Position pos_;
};

}  // namespace lowcomm::data
