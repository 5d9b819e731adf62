// `strategy.name = "diloco"` (contract in diloco.h).
#include <chrono>

#include "lowcomm/base/error.h"
#include "lowcomm/parallel/diloco.h"
#include "timed_comm.h"

namespace lowcomm::parallel {

void validateDilocoOptions(const DilocoOptions& o) { dilocoSection().validate(o); }

namespace {


class DilocoStrategy : public Strategy {
 public:
  DilocoStrategy(const StrategyContext& ctx, const DilocoOptions& o)
      : model_(ctx.model), o_(o), trace_(ctx.trace) {
    validateDilocoOptions(o_);
    comm_ = ctx.world->split(0, ctx.world->rank());
    broadcastModel(*comm_, *model_);
    hook_ = ctx.hooks ? ctx.hooks() : nullptr;
    if (!hook_) hook_ = std::make_shared<AllreduceHook>();
    torch::NoGradGuard no_grad;
    int64_t elems = 0;
    for (const auto& p : model_->named_parameters()) {
      anchor_.push_back(p.value().detach().clone());
      momentum_.push_back(torch::zeros_like(p.value()));
      bucket_.params.push_back(static_cast<int>(bucket_.params.size()));
      bucket_.offsets.push_back(elems);
      bucket_.names.push_back(p.key());
      bucket_.shapes.push_back(p.value().sizes().vec());
      elems += p.value().numel();
    }
    bucket_.offsets.push_back(elems);
    bucket_.flat = torch::zeros({elems}, torch::kFloat32);
  }

  std::string beginStep(int64_t) override { return "local"; }
  std::vector<nlohmann::json> takeEvents() override { return std::exchange(events_, {}); }
  torch::Tensor forward(const torch::Tensor& x) override { return model_->forward(x); }
  void setSync(bool) override {}  // inner steps never communicate
  void afterBackward() override {}

  void afterOptimizerStep(int64_t step) override {
    step_ = step + 1;
    if (step_ % o_.period == 0) outerStep();
  }

  void beforeEval() override {}
  nlohmann::json evalFields() const override { return {{"steps_since_outer", sinceOuter()}}; }
  bool finish(int64_t step) override {
    step_ = step;
    if (sinceOuter() == 0) return false;
    outerStep();
    events_.push_back({{"type", "diloco"}, {"event", "final-outer-step"}, {"step", step}});
    return true;
  }

  std::function<void(torch::serialize::OutputArchive&)> stateWriter() override {
    return [this](torch::serialize::OutputArchive& ar) {
      ar.write("step", torch::tensor(step_, torch::kInt64));
      ar.write("outer_steps", torch::tensor(outer_steps_, torch::kInt64));
      for (size_t i = 0; i < anchor_.size(); ++i) {
        ar.write("anchor." + std::to_string(i), anchor_[i]);
        ar.write("momentum." + std::to_string(i), momentum_[i]);
      }
    };
  }
  std::function<void(torch::serialize::InputArchive&)> stateReader() override {
    return [this](torch::serialize::InputArchive& ar) {
      auto read = [&ar](const std::string& key) {
        torch::Tensor t;  // a fresh tensor per key: read() re-points it at the stored storage
        ar.read(key, t);
        return t;
      };
      step_ = read("step").item<int64_t>();
      outer_steps_ = read("outer_steps").item<int64_t>();
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < anchor_.size(); ++i) {
        for (auto* dst : {&anchor_[i], &momentum_[i]}) {
          const auto t = read((dst == &anchor_[i] ? "anchor." : "momentum.") + std::to_string(i));
          if (!t.sizes().equals(dst->sizes()))
            throw DataError("DiLoCo checkpoint state: tensor " + std::to_string(i) + " has another shape than the model's");
          dst->copy_(t);
        }
      }
    };
  }

  BucketHook* hook() override { return hook_.get(); }
  comm::Communicator* replicas() override { return sinceOuter() == 0 ? comm_.get() : nullptr; }
  DdpStats stats() const override { return DdpStats{outer_s_, outer_s_, outer_steps_}; }
  size_t buckets() const override { return 1; }
  nlohmann::json stepFields() const override {
    return {{"outer_steps", outer_steps_}, {"steps_since_outer", sinceOuter()}};
  }
  nlohmann::json summary() const override {
    return {{"period", o_.period}, {"outer_lr", o_.outer_lr}, {"outer_momentum", o_.outer_momentum},
            {"nesterov", o_.nesterov}, {"outer_steps", outer_steps_}, {"pseudo_gradient_hook", hook_->name()},
            {"outer_s", outer_s_}};
  }

 private:
  int64_t sinceOuter() const { return step_ % o_.period; }

  // Δ_r = θ − θ_r through the hook (average over the ranks), then the outer SGD step; every rank
  // computes the same θ from the same averaged Δ.
  void outerStep() {
    CommTimer timer(trace_, "outer-step", outer_s_);
    torch::NoGradGuard no_grad;
    const auto params = model_->parameters();
    for (size_t i = 0; i < params.size(); ++i)
      bucket_.flat.narrow(0, bucket_.offsets[i], params[i].numel()).copy_((anchor_[i] - params[i]).reshape({-1}));
    {
      PhaseGuard phase(*comm_, "outer");
      hook_->run(*comm_, bucket_);
      std::vector<torch::Tensor> buffers;
      for (auto& b : model_->buffers())
        if (b.scalar_type() == torch::kFloat32) buffers.push_back(b);
      reduceTensors(*comm_, buffers, comm::ReduceOp::avg);
    }
    const double mu = o_.outer_momentum;
    for (size_t i = 0; i < params.size(); ++i) {
      const auto delta = bucket_.flat.narrow(0, bucket_.offsets[i], params[i].numel()).view(params[i].sizes());
      momentum_[i].mul_(mu).add_(delta);
      const auto update = o_.nesterov ? delta + mu * momentum_[i] : momentum_[i];
      anchor_[i].sub_(o_.outer_lr * update);
      params[i].copy_(anchor_[i]);
    }
    ++outer_steps_;
  }

  std::shared_ptr<nn::Model> model_;
  DilocoOptions o_;
  Trace* trace_;
  std::shared_ptr<comm::Communicator> comm_;
  std::shared_ptr<BucketHook> hook_;
  std::vector<torch::Tensor> anchor_, momentum_;
  GradBucket bucket_;
  int64_t step_ = 0, outer_steps_ = 0;
  double outer_s_ = 0;
  std::vector<nlohmann::json> events_;
};

}  // namespace

std::unique_ptr<Strategy> makeDilocoStrategy(const StrategyContext& ctx, const DilocoOptions& o) {
  return std::make_unique<DilocoStrategy>(ctx, o);
}

}  // namespace lowcomm::parallel
