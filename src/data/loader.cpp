#include "lowcomm/data/loader.h"

#include "lowcomm/base/error.h"
#include "rng.h"

namespace lowcomm::data {

BatchLoader::BatchLoader(const Dataset& data, int rank, int world, int64_t batch, uint64_t seed, Augment augment,
                         bool shuffle, bool dropLast)
    : data_(data),
      sampler_(data.size(), rank, world, seed, shuffle),
      batch_(batch),
      seed_(seed),
      augment_(augment),
      dropLast_(dropLast) {
  if (batch < 1) throw ConfigError("batch size " + std::to_string(batch) + " must be >= 1");
  if (data_.task == Task::language_model) {
    if (!data_.images.defined() || data_.images.dim() != 2 || data_.images.scalar_type() != torch::kInt64 ||
        !data_.labels.defined() || !data_.labels.sizes().equals(data_.images.sizes()))
      throw ConfigError("data set '" + data_.name + "' has no int64 [N, T] tokens with targets of the same shape");
    if (augment_.enabled()) throw ConfigError("augmentation: data set '" + data_.name + "' is text, not images");
  } else {
    if (!data_.images.defined() || data_.images.dim() != 4 || data_.images.scalar_type() != torch::kFloat32) {
      throw ConfigError("data set '" + data_.name + "' has no float32 [N, C, H, W] images");
    }
    if (!data_.labels.defined() || data_.labels.dim() != 1 || data_.labels.size(0) != data_.images.size(0)) {
      throw ConfigError("data set '" + data_.name + "' needs one label per image");
    }
    if (augment_.crop && (augment_.pad < 0 || augment_.pad >= std::min(data_.height(), data_.width()))) {
      throw ConfigError("augmentation: crop padding " + std::to_string(augment_.pad) + " does not fit " +
                        std::to_string(data_.height()) + "x" + std::to_string(data_.width()) + " images");
    }
  }
  if (batchesPerEpoch() == 0) {
    throw ConfigError("data set '" + data_.name + "' of " + std::to_string(data_.size()) + " samples gives " +
                      std::to_string(sampler_.size()) + " per rank over " + std::to_string(world) +
                      " ranks: fewer than one batch of " + std::to_string(batch));
  }
  // index_select needs contiguous storage to stay a plain gather (take() may hand us a view).
  data_.images = data_.images.contiguous();
  if (data_.task == Task::language_model) return;
  fill_ = data_.blackValue();
  // A hand-made Dataset may record no normalisation: its pixels are taken as raw, black = 0.
  if (fill_.size() != static_cast<size_t>(data_.channels())) fill_.assign(data_.channels(), 0.0f);
}

int64_t BatchLoader::batchesPerEpoch() const {
  const int64_t n = sampler_.size();
  return dropLast_ ? n / batch_ : (n + batch_ - 1) / batch_;
}

void BatchLoader::startEpoch(int64_t epoch) { seek({epoch, 0}); }

void BatchLoader::seek(Position p) {
  if (p.epoch < 0 || p.batch < 0 || p.batch > batchesPerEpoch()) {
    throw ConfigError("cannot seek the loader to epoch " + std::to_string(p.epoch) + ", batch " +
                      std::to_string(p.batch) + ": an epoch has " + std::to_string(batchesPerEpoch()) +
                      " batches (batch size or world size changed since the checkpoint?)");
  }
  sampler_.setEpoch(p.epoch);
  pos_ = p;
}

bool BatchLoader::next(Batch& out) {
  if (pos_.batch >= batchesPerEpoch()) return false;
  const int64_t begin = pos_.batch * batch_;
  const int64_t count = std::min(batch_, sampler_.size() - begin);
  // from_blob borrows the sampler's indices; index_select copies the rows out immediately.
  const torch::Tensor idx = torch::from_blob(const_cast<int64_t*>(sampler_.indices().data() + begin), {count},
                                             torch::kInt64);
  torch::NoGradGuard noGrad;
  torch::Tensor x = data_.images.index_select(0, idx);
  if (augment_.enabled()) {
    const uint64_t s = detail::mixSeed(seed_, {detail::kTagAugment, static_cast<uint64_t>(pos_.epoch),
                                               static_cast<uint64_t>(sampler_.rank()),
                                               static_cast<uint64_t>(pos_.batch)});
    x = augmentBatch(x, augment_, fill_, s);
  }
  out.x = std::move(x);
  out.y = data_.labels.index_select(0, idx);
  ++pos_.batch;
  return true;
}

}  // namespace lowcomm::data
