// `strategy.zero = 1|2` on `ddp`: optimizer state (and for stage 2 gradients) sharded over the
// ranks, reduce-scatter + allgather (contract in lowcomm/parallel/zero.h).
#include <cmath>

#include "lowcomm/base/error.h"
#include "lowcomm/parallel/sharded_model.h"
#include "lowcomm/parallel/zero.h"

namespace lowcomm::parallel {
namespace {

// Reduce-scatters a bucket (average) into this rank's block of it.
class ReduceScatterHook : public BucketHook {
 public:
  explicit ReduceScatterHook(const std::vector<torch::Tensor>* grads) : grads_(grads) {}
  std::string name() const override { return "reduce-scatter"; }
  // In place in the bucket (no copy of it), then this rank's block into its shard gradient.
  void run(comm::Communicator& comm, GradBucket& bucket) override {
    const torch::Tensor& g = (*grads_)[bucket.index];
    auto block = bucket.flat.narrow(0, comm.rank() * g.numel(), g.numel());
    comm.reduceScatter(bucket.flat.data_ptr<float>(), block.data_ptr<float>(), static_cast<size_t>(g.numel()),
                       comm::DType::f32, comm::ReduceOp::avg);
    g.copy_(block);
  }

 private:
  const std::vector<torch::Tensor>* grads_;
};

// Copies elements [lo, lo + flat.numel()) of a bucket's layout between the parameters and `flat`
// (the padding past the last parameter is left alone).
void copyRange(const GradBucket& b, const std::vector<torch::Tensor>& params, int64_t lo, torch::Tensor flat,
               bool to_params) {
  const int64_t hi = lo + flat.numel();
  for (size_t k = 0; k < b.params.size(); ++k) {
    const int64_t start = b.offsets[k], end = b.offsets[k + 1];
    const int64_t a = std::max(lo, start), z = std::min(hi, end);
    if (a >= z) continue;
    auto p = params[b.params[k]].view({-1}).narrow(0, a - start, z - a);
    auto f = flat.narrow(0, a - lo, z - a);
    if (to_params) p.copy_(f);
    else f.copy_(p);
  }
}

DdpOptions zeroDdpOptions(DdpOptions o, int stage, int world) {
  o.grads_to_params = false;
  o.release_grads = stage == 2;
  o.pad_to = world;
  return o;
}

class ZeroStrategy : public Strategy {
 public:
  ZeroStrategy(const StrategyContext& ctx, int stage)
      : model_(ctx.model), shard_(ctx.shard), stage_(stage), rank_(ctx.world->rank()), size_(ctx.world->size()),
        hook_(std::make_shared<ReduceScatterHook>(&grads_)),
        ddp_(ctx.world, ctx.model, zeroDdpOptions(ctx.ddp, stage, ctx.world->size()), hook_, ctx.trace),
        params_(ddp_.parameters()) {
    if (stage != 1 && stage != 2) throw ConfigError("strategy.zero must be 0, 1 or 2, not " + std::to_string(stage));
    for (const auto& p : params_) LC_ENFORCE(p.is_contiguous(), "ZeRO needs contiguous parameters");
    for (size_t b = 0; b < ddp_.buckets().size(); ++b) {
      const int64_t block = ddp_.bucketElems(b) / size_;
      shards_.push_back(torch::zeros({block}, torch::kFloat32));
      grads_.push_back(torch::zeros({block}, torch::kFloat32));
      shards_.back().mutable_grad() = grads_.back();
    }
    refreshShards();
    auto& groups = ctx.optimizer->param_groups();
    LC_ENFORCE(groups.size() == 1 && ctx.optimizer->state().empty(),
               "ZeRO rebinds an optimizer with one parameter group and no state yet");
    groups[0].params() = shards_;
  }

  std::string beginStep(int64_t) override { return "ddp"; }
  torch::Tensor forward(const torch::Tensor& x) override { return model_->forward(x); }
  void setSync(bool sync) override { ddp_.setSync(sync); }

  void afterBackward() override {
    ddp_.finish();
    // Once: a resume loads the model's parameters after construction. From then on the shards are
    // the truth and afterOptimizerStep() copies them into the model.
    if (!shards_fresh_) refreshShards(), shards_fresh_ = true;
    for (size_t b = 0; b < shards_.size(); ++b) shards_[b].mutable_grad() = grads_[b];
  }

  // The global norm over the dp shards, and on a model-parallel grid over tp and pp too.
  bool clipGradients(double max_norm) override {
    double sq[2] = {0, 0};  // over parameters split over tp, replicated on every tp rank
    if (shard_) {
      for (size_t b = 0; b < shards_.size(); ++b) splitSquares(b, sq);
    } else {
      for (const auto& g : grads_) sq[0] += g.pow(2).sum().item<double>();
    }
    auto& comm = ddp_.comm();
    comm.setPhase("clip");
    comm.allreduce(sq, 2, comm::DType::f64, comm::ReduceOp::sum);
    comm.setPhase("grad");
    const double total = shard_ ? shard_->reduceSquaredNorm(sq[0], sq[1]) : sq[0];
    const double coef = max_norm / (std::sqrt(total) + 1e-6);
    if (coef < 1)
      for (auto& g : grads_) g.mul_(coef);
    return true;
  }

  void afterOptimizerStep(int64_t) override {
    torch::NoGradGuard no_grad;
    auto& comm = ddp_.comm();
    comm.setPhase("params");
    for (size_t b = 0; b < shards_.size(); ++b) {
      // Stage 1 gathers in place in the bucket buffer it keeps anyway; stage 2 in a temporary.
      torch::Tensor full = ddp_.buckets()[b].flat;
      if (!full.defined()) full = torch::empty({ddp_.bucketElems(b)}, torch::kFloat32);
      const int64_t block = shards_[b].numel();
      full.narrow(0, rank_ * block, block).copy_(shards_[b]);
      comm.allgather(full.data_ptr<float>() + rank_ * block, full.data_ptr<float>(), static_cast<size_t>(block),
                     comm::DType::f32);
      copyRange(ddp_.buckets()[b], params_, 0, full, /*to_params=*/true);
    }
    comm.setPhase("grad");
    if (stage_ == 1)  // the trainer's zero_grad() only sees the shards
      for (auto& p : params_)
        if (p.grad().defined()) p.mutable_grad().zero_();
  }

  void beforeEval() override { ddp_.averageBuffers(); }
  BucketHook* hook() override { return hook_.get(); }
  comm::Communicator* replicas() override { return &ddp_.comm(); }
  DdpStats stats() const override { return ddp_.stats(); }
  size_t buckets() const override { return ddp_.buckets().size(); }

  int64_t bufferBytes() const override {
    int64_t n = ddp_.bufferBytes();
    for (const auto& t : shards_) n += 2 * t.numel() * 4;  // shard and its gradient
    return n;
  }

  nlohmann::json summary() const override {
    int64_t elems = 0;
    for (const auto& t : shards_) elems += t.numel();
    return {{"zero_stage", stage_}, {"shard_elements", elems}, {"shards", shards_.size()}};
  }

 private:
  // Adds the squares of this rank's block of bucket b's gradient to sq[0] (parameters split over
  // tp) or sq[1] (replicated), by the parameter each element belongs to.
  void splitSquares(size_t b, double sq[2]) const {
    const GradBucket& bucket = ddp_.buckets()[b];
    const int64_t lo = rank_ * grads_[b].numel(), hi = lo + grads_[b].numel();
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      const int64_t a = std::max(lo, bucket.offsets[k]), z = std::min(hi, bucket.offsets[k + 1]);
      if (a < z) sq[shard_->sharded(bucket.names[k]) ? 0 : 1] += grads_[b].narrow(0, a - lo, z - a).pow(2).sum().item<double>();
    }
  }

  // This rank's block of every bucket, from the model's parameters.
  void refreshShards() {
    torch::NoGradGuard no_grad;
    for (size_t b = 0; b < shards_.size(); ++b)
      copyRange(ddp_.buckets()[b], params_, rank_ * shards_[b].numel(), shards_[b], /*to_params=*/false);
  }

  std::shared_ptr<nn::Model> model_;
  ShardedModel* shard_;
  const int stage_, rank_, size_;
  std::vector<torch::Tensor> shards_, grads_;
  bool shards_fresh_ = false;
  std::shared_ptr<ReduceScatterHook> hook_;
  DataParallel ddp_;
  std::vector<torch::Tensor> params_;
};

}  // namespace

std::unique_ptr<Strategy> makeZeroStrategy(const StrategyContext& ctx, int stage) {
  return std::make_unique<ZeroStrategy>(ctx, stage);
}

}  // namespace lowcomm::parallel
