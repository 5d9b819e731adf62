// `strategy.name = "gossip"` (contract in gossip.h).
#include <chrono>
#include <cmath>

#include "lowcomm/base/error.h"
#include "flat_state.h"
#include "timed_comm.h"
#include "lowcomm/parallel/gossip.h"
#include "lowcomm/parallel/sharded_model.h"

namespace lowcomm::parallel {

void validateGossipOptions(const GossipOptions& o, int world) {
  gossipSection().validate(o);
  if (o.topology == "exponential" && (world & (world - 1)) != 0)
    throw ConfigError("gossip.topology = \"exponential\" needs a power-of-two world size, got " + std::to_string(world));
}

namespace {


class GossipStrategy : public Strategy {
 public:
  GossipStrategy(const StrategyContext& ctx, const GossipOptions& o)
      : model_(ctx.model), o_(o), trace_(ctx.trace), shard_(ctx.shard), state_(*ctx.model) {
    validateGossipOptions(o_, ctx.world->size());
    comm_ = ctx.world->split(0, ctx.world->rank());
    broadcastModel(*comm_, *model_);
    const int64_t n = state_.numel();
    mine_ = torch::zeros({n}, torch::kFloat32);
    a_ = torch::zeros({n}, torch::kFloat32);
    b_ = torch::zeros({n}, torch::kFloat32);
    if (shard_)  // FlatState's order: the parameters, then the f32 buffers (never split)
      for (const auto& p : model_->named_parameters()) split_.emplace_back(p.value().numel(), shard_->sharded(p.key()));
  }

  std::string beginStep(int64_t) override { return "local"; }
  std::vector<nlohmann::json> takeEvents() override { return std::exchange(events_, {}); }
  torch::Tensor forward(const torch::Tensor& x) override { return model_->forward(x); }
  void setSync(bool) override {}
  void afterBackward() override {}

  void afterOptimizerStep(int64_t step) override {
    step_ = step + 1;
    if (step_ % o_.period != 0 || comm_->size() == 1) return;
    timed("gossip", [&] { mix(); });
    ++mixings_;
    if (o_.consensus_every > 0 && mixings_ % o_.consensus_every == 0) timed("consensus", [&] { measureConsensus(); });
  }

  void beforeEval() override {}
  nlohmann::json evalFields() const override { return {{"consensus_distance", consensus_}}; }
  bool finish(int64_t step) override {
    step_ = step;
    if (comm_->size() == 1 || step_ == 0) return false;
    timed("final-average", [&] {
      state_.pack(mine_);
      comm_->allreduce(mine_.data_ptr<float>(), mine_.numel(), comm::DType::f32, comm::ReduceOp::avg);
      state_.unpack(mine_);
    });
    events_.push_back({{"type", "gossip"}, {"event", "final-average"}, {"step", step}});
    return true;
  }

  std::function<void(torch::serialize::OutputArchive&)> stateWriter() override {
    return [this](torch::serialize::OutputArchive& ar) {
      ar.write("step", torch::tensor(step_, torch::kInt64));
      ar.write("mixings", torch::tensor(mixings_, torch::kInt64));
      ar.write("consensus", torch::tensor(consensus_, torch::kFloat64));
    };
  }
  std::function<void(torch::serialize::InputArchive&)> stateReader() override {
    return [this](torch::serialize::InputArchive& ar) {
      torch::Tensor t, u, v;  // one tensor per key: read() re-points it at the stored storage
      ar.read("step", t);
      step_ = t.item<int64_t>();
      ar.read("mixings", u);
      mixings_ = u.item<int64_t>();
      ar.read("consensus", v);
      consensus_ = v.item<double>();
    };
  }

  comm::Communicator* replicas() override { return mixings_ == 0 ? comm_.get() : nullptr; }
  DdpStats stats() const override { return DdpStats{comm_s_, comm_s_, mixings_}; }
  nlohmann::json stepFields() const override { return {{"mixings", mixings_}, {"consensus_distance", consensus_}}; }
  nlohmann::json summary() const override {
    return {{"topology", o_.topology}, {"period", o_.period}, {"mixings", mixings_},
            {"consensus_distance", consensus_}, {"consensus_every", o_.consensus_every}};
  }

 private:
  template <class F>
  void timed(const char* phase, F&& f) {
    timedComm(*comm_, trace_, phase, comm_s_, std::forward<F>(f));
  }


  // Every message of a mixing is posted at once: on the ring each link carries one message in
  // each direction at the same time.
  void mix() {
    const int n = comm_->size(), r = comm_->rank();
    state_.pack(mine_);
    const size_t bytes = static_cast<size_t>(mine_.numel()) * 4;
    float* mine = mine_.data_ptr<float>();
    if (o_.topology == "exponential" || n == 2) {
      int hops = 0;
      while ((1 << (hops + 1)) <= n) ++hops;  // log2(n)
      const int d = n == 2 ? 1 : 1 << (mixings_ % hops);
      comm_->exchange({{(r + d) % n, mine, bytes}}, {{(r - d + n) % n, a_.data_ptr<float>(), bytes}}, 1);
      mine_.add_(a_).mul_(0.5);
    } else {
      const int left = (r - 1 + n) % n, right = (r + 1) % n;
      comm_->exchange({{right, mine, bytes}, {left, mine, bytes}},
                      {{left, a_.data_ptr<float>(), bytes}, {right, b_.data_ptr<float>(), bytes}}, 1);
      mine_.add_(a_).add_(b_).div_(3.0);
    }
    state_.unpack(mine_);
  }

  // On a model-parallel grid over the whole model: each rank's part over the dp axis, then the
  // parts over tp and pp (parameters replicated on the tp ranks counted once).
  void measureConsensus() {
    state_.pack(mine_);
    a_.copy_(mine_);
    comm_->allreduce(a_.data_ptr<float>(), a_.numel(), comm::DType::f32, comm::ReduceOp::avg);
    const torch::Tensor d = (mine_ - a_).pow(2);
    double sq[2] = {0, 0};  // over parameters split over tp, replicated on every tp rank
    if (!shard_) {
      sq[0] = d.sum().item<double>();
    } else {
      int64_t off = 0;
      for (const auto& [numel, split] : split_) {
        sq[split ? 0 : 1] += d.narrow(0, off, numel).sum().item<double>();
        off += numel;
      }
      sq[1] += d.narrow(0, off, d.numel() - off).sum().item<double>();
    }
    comm_->allreduce(sq, 2, comm::DType::f64, comm::ReduceOp::sum);
    const double total = shard_ ? shard_->reduceSquaredNorm(sq[0], sq[1]) : sq[0];
    consensus_ = std::sqrt(total / comm_->size());
  }

  std::shared_ptr<nn::Model> model_;
  GossipOptions o_;
  Trace* trace_;
  ShardedModel* shard_;                          // a model-parallel grid's model; null otherwise
  std::vector<std::pair<int64_t, bool>> split_;  // with shard_: each parameter's size, split over tp
  std::shared_ptr<comm::Communicator> comm_;
  FlatState state_;
  torch::Tensor mine_, a_, b_;
  int64_t step_ = 0, mixings_ = 0;
  double consensus_ = 0, comm_s_ = 0;
  std::vector<nlohmann::json> events_;
};

}  // namespace

std::unique_ptr<Strategy> makeGossipStrategy(const StrategyContext& ctx, const GossipOptions& o) {
  return std::make_unique<GossipStrategy>(ctx, o);
}

}  // namespace lowcomm::parallel
