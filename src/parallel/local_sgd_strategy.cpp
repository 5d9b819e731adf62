// `strategy.name = "local_sgd"` (contract in local_sgd.h).
#include <chrono>

#include "lowcomm/base/error.h"
#include "lowcomm/parallel/local_sgd.h"
#include "lowcomm/parallel/optim_state.h"
#include "timed_comm.h"

namespace lowcomm::parallel {

void validateLocalSgdOptions(const LocalSgdOptions& o) { localSgdSection().validate(o); }

namespace {


class LocalSgdStrategy : public Strategy {
 public:
  LocalSgdStrategy(const StrategyContext& ctx, const LocalSgdOptions& o)
      : model_(ctx.model), opt_(ctx.optimizer), o_(o), ddp_opts_(ctx.ddp), hooks_(ctx.hooks), trace_(ctx.trace) {
    validateLocalSgdOptions(o_);
    auto& world = *ctx.world;
    world_ = world.split(0, world.rank());
    ddp_world_ = world.split(0, world.rank());
    if (o_.hierarchical) node_ = world.split(world.nodeOf()[world.rank()], world.rank());
    broadcastModel(*world_, *model_);
    ddp_opts_.broadcast_initial = false;
    ddp_opts_.split_comm = false;
    build(0);
  }

  std::string beginStep(int64_t step) override {
    if (step == o_.start_step && o_.start_step > 0)
      events_.push_back({{"type", "local_sgd"}, {"event", "local-phase"}, {"step", step}});
    build(step);
    return local(step) ? "local" : "ddp";
  }
  std::vector<nlohmann::json> takeEvents() override { return std::exchange(events_, {}); }

  torch::Tensor forward(const torch::Tensor& x) override { return model_->forward(x); }
  // In the local phase only a hierarchical run synchronises gradients (inside the node).
  void setSync(bool sync) override { ddp_->setSync(sync && (!local(step_) || o_.hierarchical)); }
  void afterBackward() override { ddp_->finish(); }

  void afterOptimizerStep(int64_t step) override {
    step_ = step + 1;
    if (local(step) && (step_ - o_.start_step) % o_.period == 0) average();
  }

  void beforeEval() override {
    if (sinceAverage() == 0) ddp_->averageBuffers();  // replicas agree; local ones keep their own
  }
  nlohmann::json evalFields() const override { return {{"steps_since_average", sinceAverage()}}; }
  bool finish(int64_t step) override {
    step_ = step;
    if (sinceAverage() == 0) return false;
    average();
    events_.push_back({{"type", "local_sgd"}, {"event", "final-average"}, {"step", step}});
    return true;
  }

  std::function<void(torch::serialize::OutputArchive&)> stateWriter() override {
    return [this](torch::serialize::OutputArchive& ar) {
      ar.write("step", torch::tensor(step_, torch::kInt64));
      ar.write("averages", torch::tensor(averages_, torch::kInt64));
    };
  }
  std::function<void(torch::serialize::InputArchive&)> stateReader() override {
    return [this](torch::serialize::InputArchive& ar) {
      torch::Tensor t, u;  // one tensor per key: read() re-points it at the stored storage
      ar.read("step", t);
      step_ = t.item<int64_t>();
      ar.read("averages", u);
      averages_ = u.item<int64_t>();
      build(step_);  // the loaded hook state belongs to the DDP of this step's phase
    };
  }

  BucketHook* hook() override { return &ddp_->hook(); }
  // Everyone agrees after DDP steps and right after an average; inside a node always when
  // hierarchical; otherwise nobody.
  comm::Communicator* replicas() override {
    if (sinceAverage() == 0) return world_.get();
    return o_.hierarchical ? node_.get() : nullptr;
  }

  DdpStats stats() const override {
    DdpStats s = past_;
    const auto c = ddp_->stats();
    s.comm_s += c.comm_s + average_s_, s.wait_s += c.wait_s + average_s_, s.buckets += c.buckets;
    return s;
  }
  size_t buckets() const override { return ddp_->buckets().size(); }
  nlohmann::json stepFields() const override {
    return {{"averages", averages_}, {"steps_since_average", sinceAverage()}};
  }
  nlohmann::json summary() const override {
    return {{"period", o_.period}, {"start_step", static_cast<int64_t>(o_.start_step)}, {"average_optimizer", o_.average_optimizer},
            {"hierarchical", o_.hierarchical}, {"averages", averages_}, {"average_s", average_s_}};
  }

 private:
  bool local(int64_t step) const { return step >= o_.start_step; }
  // Local steps since the ranks last agreed (0 in the DDP phase).
  int64_t sinceAverage() const { return step_ <= o_.start_step ? 0 : (step_ - o_.start_step) % o_.period; }

  // The DDP for `step`'s phase: over the world, or inside the node in a hierarchical local phase.
  void build(int64_t step) {
    const bool in_node = o_.hierarchical && local(step);
    if (ddp_ && in_node == in_node_) return;
    if (ddp_) {
      const auto s = ddp_->stats();
      past_.comm_s += s.comm_s, past_.wait_s += s.wait_s, past_.buckets += s.buckets;
      ddp_.reset();
    }
    ddp_ = std::make_unique<DataParallel>(in_node ? node_ : ddp_world_, model_, ddp_opts_, hooks_ ? hooks_() : nullptr,
                                          trace_);
    in_node_ = in_node;
  }

  // Parameters, float buffers and (optionally) the optimizer's moments averaged in one allreduce
  // over the world. When hierarchical the ranks of a node already agree, and the world's
  // allreduce on several nodes is itself hierarchical (shared memory inside a node, one exchange
  // between the nodes), so the inter-node bytes are those of one rank per node.
  void average() {
    CommTimer timer(trace_, "average", average_s_);
    std::vector<torch::Tensor> ts;
    for (auto& p : model_->parameters()) ts.push_back(p.detach());
    for (auto& b : model_->buffers())
      if (b.scalar_type() == torch::kFloat32) ts.push_back(b);
    if (o_.average_optimizer)
      for (auto& m : momentTensors(*opt_)) ts.push_back(m);
    PhaseGuard phase(*world_, "average");
    reduceTensors(*world_, ts, comm::ReduceOp::avg);
    ++averages_;
  }

  std::shared_ptr<nn::Model> model_;
  torch::optim::Optimizer* opt_;
  LocalSgdOptions o_;
  DdpOptions ddp_opts_;
  HookFactory hooks_;
  Trace* trace_;
  std::shared_ptr<comm::Communicator> world_, ddp_world_, node_;
  std::unique_ptr<DataParallel> ddp_;
  bool in_node_ = false;
  DdpStats past_;
  int64_t step_ = 0, averages_ = 0;
  double average_s_ = 0;
  std::vector<nlohmann::json> events_;
};

}  // namespace

std::unique_ptr<Strategy> makeLocalSgdStrategy(const StrategyContext& ctx, const LocalSgdOptions& o) {
  return std::make_unique<LocalSgdStrategy>(ctx, o);
}

}  // namespace lowcomm::parallel
