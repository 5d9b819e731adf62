// `strategy.name = "ddp"`: one DataParallel over the world, the model's own forward.
#include "lowcomm/parallel/strategy.h"

namespace lowcomm::parallel {
namespace {

class DdpStrategy : public Strategy {
 public:
  explicit DdpStrategy(const StrategyContext& ctx)
      : model_(ctx.model), ddp_(ctx.world, ctx.model, ctx.ddp, ctx.hooks ? ctx.hooks() : nullptr, ctx.trace) {}

  std::string beginStep(int64_t) override { return "ddp"; }
  torch::Tensor forward(const torch::Tensor& x) override { return model_->forward(x); }
  void setSync(bool sync) override { ddp_.setSync(sync); }
  void afterBackward() override { ddp_.finish(); }
  void beforeEval() override { ddp_.averageBuffers(); }
  BucketHook* hook() override { return &ddp_.hook(); }
  comm::Communicator* replicas() override { return &ddp_.comm(); }
  DdpStats stats() const override { return ddp_.stats(); }
  size_t buckets() const override { return ddp_.buckets().size(); }
  int64_t bufferBytes() const override { return ddp_.bufferBytes(); }

 private:
  std::shared_ptr<nn::Model> model_;
  DataParallel ddp_;
};

}  // namespace

std::unique_ptr<Strategy> makeDdpStrategy(const StrategyContext& ctx) { return std::make_unique<DdpStrategy>(ctx); }

}  // namespace lowcomm::parallel
