// `strategy.name = "diloco"` (contract in diloco.h).
#include <algorithm>

#include "diloco_outer.h"
#include "diloco_plan.h"
#include "diloco_scope.h"
#include "lowcomm/base/error.h"
#include "lowcomm/parallel/diloco.h"
#include "timed_comm.h"

namespace lowcomm::parallel {

void validateDilocoOptions(const DilocoOptions& o) { dilocoSection().validate(o); }

namespace {

std::vector<int64_t> numelsOf(const std::vector<torch::Tensor>& ts) {
  std::vector<int64_t> n;
  for (const auto& t : ts) n.push_back(t.numel());
  return n;
}

class DilocoStrategy : public Strategy {
 public:
  DilocoStrategy(const StrategyContext& ctx, const DilocoOptions& o)
      : model_(ctx.model), o_(o), trace_(ctx.trace), groups_(makeDilocoGroups(*ctx.world, o.scope)) {
    validateDilocoOptions(o_);
    broadcastModel(*groups_.world, *model_);
    std::shared_ptr<BucketHook> hook = ctx.hooks ? ctx.hooks() : nullptr;
    if (!hook) hook = std::make_shared<AllreduceHook>();
    torch::NoGradGuard no_grad;
    std::vector<std::string> names;
    for (const auto& p : model_->named_parameters()) {
      params_.push_back(p.value());
      names.push_back(p.key());
      anchor_.push_back(p.value().detach().clone());
      momentum_.push_back(torch::zeros_like(p.value()));
    }
    for (auto& b : model_->buffers())
      if (b.scalar_type() == torch::kFloat32) buffers_.push_back(b);
    plan_ = planFragments(numelsOf(params_), static_cast<int>(o_.fragments), groups_.group_size);
    last_merge_.assign(plan_.fragments.size(), 0);
    lands_.assign(plan_.fragments.size(), -1);
    exchanges_ = std::make_unique<OuterExchanges>(groups_, plan_, params_, names, hook, trace_);
    hook_view_ = std::make_unique<DrainedHook>(*exchanges_);
    if (groups_.group_ddp) {
      DdpOptions d = ctx.ddp;
      d.broadcast_initial = false;  // the world's broadcast made every rank equal
      d.split_comm = false;
      ddp_ = std::make_unique<DataParallel>(groups_.group_ddp, model_, d, nullptr, trace_);
    }
  }

  std::string beginStep(int64_t) override { return "local"; }
  std::vector<nlohmann::json> takeEvents() override { return std::exchange(events_, {}); }
  torch::Tensor forward(const torch::Tensor& x) override { return model_->forward(x); }
  // Inner steps communicate only inside a group (DDP over the node or site).
  void setSync(bool sync) override {
    if (ddp_) ddp_->setSync(sync);
  }
  void afterBackward() override {
    if (ddp_) ddp_->finish();
  }

  // Landings due now merge first, then the fragments due launch (inline when overlap_steps = 0).
  void afterOptimizerStep(int64_t step) override {
    step_ = step + 1;
    for (size_t f = 0; f < lands_.size(); ++f)
      if (lands_[f] == step_) merge(static_cast<int>(f), o_.mix);
    for (int f = 0; f < fragments(); ++f)
      if (fragmentDue(step_, f, fragments(), o_.period)) launch(f);
  }

  void beforeEval() override {}
  nlohmann::json evalFields() const override { return {{"steps_since_outer", sinceOuter()}}; }

  // Every exchange in flight lands into θ (the local weights keep their steps since it left),
  // then each fragment whose weights are not θ syncs once more, inline, and every rank holds θ.
  bool finish(int64_t step) override {
    step_ = step;
    bool changed = false;
    exchanges_->drain();  // the communication thread idles: the syncs below run on this one
    for (int f = 0; f < fragments(); ++f) {
      const bool in_flight = exchanges_->inFlight(f);
      if (in_flight) outerUpdate(f, exchanges_->land(f), false);
      if (!in_flight && last_merge_[f] == step_ && o_.mix == 0) continue;
      exchanges_->launch(f, anchor_, params_, buffers_, false);
      merge(f, 0.0, o_.final_sync == "average");
      changed = true;
    }
    if (changed) events_.push_back({{"type", "diloco"}, {"event", "final-outer-step"}, {"step", step}});
    return changed;
  }

  // θ, the momentum and the schedule; an exchange in flight is saved as its landed result (every
  // rank waits for it here), so a resume merges it at the same step as the uninterrupted run.
  std::function<void(torch::serialize::OutputArchive&)> stateWriter() override {
    exchanges_->drain();
    return [this](torch::serialize::OutputArchive& ar) {
      ar.write("step", torch::tensor(step_, torch::kInt64));
      ar.write("outer_steps", torch::tensor(outer_steps_, torch::kInt64));
      for (size_t i = 0; i < anchor_.size(); ++i) {
        ar.write("anchor." + std::to_string(i), anchor_[i]);
        ar.write("momentum." + std::to_string(i), momentum_[i]);
      }
      ar.write("last_merge", torch::tensor(last_merge_, torch::kInt64));
      ar.write("lands", torch::tensor(lands_, torch::kInt64));
      for (int f = 0; f < fragments(); ++f)
        if (exchanges_->inFlight(f)) ar.write("in_flight." + std::to_string(f), exchanges_->pendingFlat(f));
    };
  }
  std::function<void(torch::serialize::InputArchive&)> stateReader() override {
    return [this](torch::serialize::InputArchive& ar) { readState(ar); };
  }

  BucketHook* hook() override { return hook_view_.get(); }
  // The members of a group always agree (inner DDP, shared outer results); the whole world right
  // after a blocking outer step of every fragment.
  comm::Communicator* replicas() override {
    bool world = o_.mix == 0;
    for (int f = 0; f < fragments(); ++f) world = world && !exchanges_->inFlight(f) && last_merge_[f] == step_;
    if (world) return groups_.world.get();
    return groups_.group ? groups_.group_ddp.get() : nullptr;
  }
  DdpStats stats() const override {
    DdpStats s{exchanges_->commSeconds(), exchanges_->waitSeconds(), outer_steps_};
    if (ddp_) {
      const auto d = ddp_->stats();
      s.comm_s += d.comm_s, s.wait_s += d.wait_s, s.buckets += d.buckets;
    }
    return s;
  }
  size_t buckets() const override { return ddp_ ? ddp_->buckets().size() : 0; }
  int64_t bufferBytes() const override { return ddp_ ? ddp_->bufferBytes() : 0; }
  nlohmann::json stepFields() const override {
    int in_flight = 0;
    for (int f = 0; f < fragments(); ++f) in_flight += exchanges_->inFlight(f);
    return {{"outer_steps", outer_steps_}, {"steps_since_outer", sinceOuter()}, {"outer_in_flight", in_flight}};
  }
  nlohmann::json summary() const override {
    std::vector<int64_t> sizes;
    for (const auto& fr : plan_.fragments) {
      int64_t n = 0;
      for (int p : fr) n += params_[p].numel();
      sizes.push_back(n);
    }
    return {{"period", o_.period}, {"outer_lr", o_.outer_lr}, {"outer_momentum", o_.outer_momentum},
            {"nesterov", o_.nesterov}, {"scope", o_.scope}, {"groups", groups_.groups},
            {"group_size", groups_.group_size}, {"fragments", o_.fragments}, {"fragment_elems", sizes},
            {"overlap_steps", o_.overlap_steps}, {"mix", o_.mix}, {"final_sync", o_.final_sync}, {"outer_steps", outer_steps_},
            {"pseudo_gradient_hook", hook_view_->name()}, {"outer_s", exchanges_->commSeconds()},
            {"outer_wait_s", exchanges_->waitSeconds()}, {"peak_sync_bytes_sent", exchanges_->peakSyncBytes()}};
  }

 private:
  int fragments() const { return static_cast<int>(plan_.fragments.size()); }
  int64_t sinceOuter() const { return step_ - *std::max_element(last_merge_.begin(), last_merge_.end()); }

  void launch(int f) {
    const bool background = o_.overlap_steps > 0;
    exchanges_->launch(f, anchor_, params_, buffers_, background);
    if (background) {
      lands_[f] = step_ + o_.overlap_steps;
    } else {
      merge(f, o_.mix);
    }
  }

  // The outer SGD step on fragment f's θ from the average of Δ (the same on every rank); with
  // `average`, θ − average(Δ) and the momentum left as it is.
  void outerUpdate(int f, const OuterExchanges::Landed& got, bool average) {
    torch::NoGradGuard no_grad;
    const double mu = o_.outer_momentum;
    for (size_t k = 0; k < plan_.fragments[f].size(); ++k) {
      const int p = plan_.fragments[f][k];
      const auto& delta = got.delta[k];
      if (average) {
        anchor_[p].sub_(delta);
        continue;
      }
      momentum_[p].mul_(mu).add_(delta);
      const auto update = o_.nesterov ? delta + mu * momentum_[p] : momentum_[p];
      anchor_[p].sub_(o_.outer_lr * update);
    }
    for (size_t b = 0; b < got.buffers.size(); ++b) buffers_[b].copy_(got.buffers[b]);
    lands_[f] = -1;
    ++outer_steps_;
  }

  // Lands f, steps θ, and moves the local weights to mix·local + (1 − mix)·θ.
  void merge(int f, double mix, bool average = false) {
    outerUpdate(f, exchanges_->land(f), average);
    torch::NoGradGuard no_grad;
    for (int p : plan_.fragments[f]) {
      if (mix == 0) {
        params_[p].copy_(anchor_[p]);
      } else {
        params_[p].mul_(mix).add_(anchor_[p], 1 - mix);
      }
    }
    last_merge_[f] = step_;
  }

  void readState(torch::serialize::InputArchive& ar) {
    auto read = [&ar](const std::string& key) {
      torch::Tensor t;  // a fresh tensor per key: read() re-points it at the stored storage
      if (!ar.try_read(key, t)) throw DataError("DiLoCo checkpoint state has no '" + key + "'");
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
    torch::Tensor last, lands;
    if (!ar.try_read("last_merge", last)) {  // written before streaming: one fragment, nothing in flight
      last = torch::tensor(std::vector<int64_t>{step_ - step_ % o_.period}, torch::kInt64);
      lands = torch::tensor(std::vector<int64_t>{-1}, torch::kInt64);
    } else {
      lands = read("lands");
    }
    last = last.contiguous(), lands = lands.contiguous();
    if (last.numel() != fragments() || lands.numel() != fragments())
      throw DataError("DiLoCo checkpoint state: " + std::to_string(last.numel()) + " fragments, the run has " +
                      std::to_string(fragments()));
    for (int f = 0; f < fragments(); ++f) {
      last_merge_[f] = last[f].item<int64_t>();
      lands_[f] = lands[f].item<int64_t>();
      if (lands_[f] >= 0) exchanges_->restorePending(f, read("in_flight." + std::to_string(f)), f == 0 ? buffers_ : std::vector<torch::Tensor>{});
    }
  }

  std::shared_ptr<nn::Model> model_;
  DilocoOptions o_;
  Trace* trace_;
  DilocoGroups groups_;
  DilocoPlan plan_;
  std::vector<torch::Tensor> params_, anchor_, momentum_, buffers_;
  std::unique_ptr<DataParallel> ddp_;
  std::unique_ptr<OuterExchanges> exchanges_;
  std::unique_ptr<DrainedHook> hook_view_;
  std::vector<int64_t> last_merge_;  // per fragment: steps done when it last merged
  std::vector<int64_t> lands_;       // per fragment: the step its exchange in flight merges at; -1 none
  int64_t step_ = 0, outer_steps_ = 0;
  std::vector<nlohmann::json> events_;
};

}  // namespace

std::unique_ptr<Strategy> makeDilocoStrategy(const StrategyContext& ctx, const DilocoOptions& o) {
  return std::make_unique<DilocoStrategy>(ctx, o);
}

}  // namespace lowcomm::parallel
