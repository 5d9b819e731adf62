// Per-unit forward + backward time of a gpt, for cutting pipeline stages by time.
#include "lowcomm/parallel/stage_balance.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>

#include "lowcomm/base/error.h"

namespace lowcomm::parallel {
namespace {

// Restores the global RNG on scope exit: building and running modules draws from it.
class KeepGlobalRng {
 public:
  KeepGlobalRng() : gen_(at::detail::getDefaultCPUGenerator()), state_(gen_.get_state()) {}
  ~KeepGlobalRng() { gen_.set_state(state_); }
  KeepGlobalRng(const KeepGlobalRng&) = delete;
  KeepGlobalRng& operator=(const KeepGlobalRng&) = delete;

 private:
  at::Generator gen_;
  torch::Tensor state_;
};

// Unit u's input for a micro-batch: tokens for the embedding, activations for the others.
torch::Tensor unitInput(const nn::ModelSpec& s, int u, int64_t batch, at::Generator& gen) {
  if (u == 0) return torch::randint(s.classes, {batch, s.seq_len}, gen, torch::kInt64);
  return torch::randn({batch, s.seq_len, s.dim}, gen).requires_grad_(true);
}

// One forward and backward of unit u alone; seconds.
double timeUnit(ShardedModel& model, int u, const torch::Tensor& x, const torch::Tensor& grad_or_targets) {
  const auto t0 = std::chrono::steady_clock::now();
  auto out = model.forwardUnit(u, x);
  if (u == model.spec().layers + 1) model.loss(out, grad_or_targets, 0.0).mean().backward();
  else out.backward(grad_or_targets);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<int64_t> measureUnitTimes(ShardedModel& model, int64_t micro_batch, int reps,
                                      const std::function<void(int, int64_t, int)>& on_unit, double unit_budget_s) {
  const auto& s = model.spec();
  const int units = s.layers + 2;
  LC_ENFORCE(model.units() == std::make_pair(0, units), "measureUnitTimes: the model must hold every unit in one stage");
  LC_ENFORCE(micro_batch >= 1 && reps >= 1, "measureUnitTimes: micro_batch and reps must be >= 1");
  KeepGlobalRng keep;
  auto gen = at::detail::createCPUGenerator(0);
  // The caller's gradient tensors themselves, put back on every exit.
  struct KeepGrads {
    explicit KeepGrads(ShardedModel& m) : model(m) {
      for (auto& p : model.parameters()) {
        saved.push_back(p.grad());
        p.mutable_grad() = torch::Tensor();
      }
    }
    ~KeepGrads() {
      size_t i = 0;
      for (auto& p : model.parameters()) p.mutable_grad() = saved[i++];
    }
    ShardedModel& model;
    std::vector<torch::Tensor> saved;
  } keep_grads(model);
  std::vector<int64_t> times(units);
  for (int u = 0; u < units; ++u) {
    const auto x = unitInput(s, u, micro_batch, gen);
    const auto g = u == units - 1
                       ? torch::randint(s.classes, {micro_batch, s.seq_len}, gen, torch::kInt64)
                       : torch::randn({micro_batch, s.seq_len, s.dim}, gen);
    double spent = timeUnit(model, u, x, g);  // warm-up: allocator, kernels' first calls
    std::vector<double> t;
    // At least one timed round; another only while the last one's duration still fits the budget.
    for (int r = 0; r < reps && (t.empty() || spent + t.back() <= unit_budget_s); ++r) {
      t.push_back(timeUnit(model, u, x, g));
      spent += t.back();
    }
    std::sort(t.begin(), t.end());
    const size_t mid = t.size() / 2;
    const double median = t.size() % 2 ? t[mid] : (t[mid - 1] + t[mid]) / 2;
    times[u] = std::max<int64_t>(1, static_cast<int64_t>(median * 1e6));
    if (on_unit) on_unit(u, times[u], static_cast<int>(t.size()));
  }
  return times;
}

std::vector<int64_t> measuredUnitTimes(const nn::Model& full, comm::Communicator& world, int64_t micro_batch,
                                       int reps, double unit_budget_s) {
  const int units = full.spec().layers + 2;
  std::vector<int64_t> times(units, 0);
  auto self = world.split(world.rank() == 0 ? 0 : -1, 0);  // collective; only rank 0 gets one
  if (!self) {  // one broadcast per unit: a wait never spans more than one unit's measurement
    for (int u = 0; u < units; ++u) {
      world.broadcast(&times[u], 1, comm::DType::i64, 0);
      if (times[u] < 0)
        throw Error("parallel.balance = \"time\": rank 0 failed while timing pipeline unit " + std::to_string(u) +
                    " of " + std::to_string(units) + " (its own error says why)");
    }
    return times;
  }
  int sent = 0;  // units whose time the others have
  try {
    KeepGlobalRng keep;  // building the copy draws initial weights
    auto copy = makeShardedModel(full, self);
    measureUnitTimes(*copy, micro_batch, reps, [&](int u, int64_t us, int) {
      times[u] = us;
      world.broadcast(&times[u], 1, comm::DType::i64, 0);
      ++sent;
    }, unit_budget_s);
  } catch (...) {
    int64_t failed = -1;  // the others wait for unit `sent`: tell them, then fail here
    try {
      if (sent < units) world.broadcast(&failed, 1, comm::DType::i64, 0);
    } catch (...) {
    }
    throw;
  }
  return times;
}

}  // namespace lowcomm::parallel
