#include "lowcomm/parallel/optim_state.h"

#include <c10/util/string_utils.h>

#include "lowcomm/base/error.h"

namespace lowcomm::parallel {
namespace {

std::string keyOf(const torch::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

torch::Tensor fit(const torch::Tensor& t, torch::IntArrayRef sizes) {
  return t.defined() ? resizeLeading(t, sizes) : t;
}

void resizeState(torch::optim::OptimizerParamState& s, torch::IntArrayRef sizes) {
  if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(&s)) {
    sgd->momentum_buffer(fit(sgd->momentum_buffer(), sizes));
  } else if (auto* aw = dynamic_cast<torch::optim::AdamWParamState*>(&s)) {
    aw->exp_avg(fit(aw->exp_avg(), sizes));
    aw->exp_avg_sq(fit(aw->exp_avg_sq(), sizes));
    aw->max_exp_avg_sq(fit(aw->max_exp_avg_sq(), sizes));
  } else if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(&s)) {
    a->exp_avg(fit(a->exp_avg(), sizes));
    a->exp_avg_sq(fit(a->exp_avg_sq(), sizes));
    a->max_exp_avg_sq(fit(a->max_exp_avg_sq(), sizes));
  } else {
    throw ConfigError("AB-training can only carry SGD, Adam or AdamW state across shape changes");
  }
}

// The defined moment tensors of one parameter's state.
std::vector<torch::Tensor> moments(torch::optim::OptimizerParamState& s) {
  std::vector<torch::Tensor> all;
  if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(&s)) {
    all = {sgd->momentum_buffer()};
  } else if (auto* aw = dynamic_cast<torch::optim::AdamWParamState*>(&s)) {
    all = {aw->exp_avg(), aw->exp_avg_sq(), aw->max_exp_avg_sq()};
  } else if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(&s)) {
    all = {a->exp_avg(), a->exp_avg_sq(), a->max_exp_avg_sq()};
  }
  std::vector<torch::Tensor> out;
  for (auto& t : all)
    if (t.defined()) out.push_back(t);
  return out;
}

void zeroMoments(torch::optim::OptimizerParamState& s) {
  torch::NoGradGuard no_grad;
  for (auto& t : moments(s)) t.zero_();
}

std::unique_ptr<torch::optim::OptimizerParamState> emptyStateFor(const torch::optim::Optimizer& opt) {
  if (dynamic_cast<const torch::optim::SGD*>(&opt)) return std::make_unique<torch::optim::SGDParamState>();
  if (dynamic_cast<const torch::optim::AdamW*>(&opt)) return std::make_unique<torch::optim::AdamWParamState>();
  if (dynamic_cast<const torch::optim::Adam*>(&opt)) return std::make_unique<torch::optim::AdamParamState>();
  throw ConfigError("AB-training supports the sgd and adamw optimizers");
}

}  // namespace

std::vector<torch::Tensor> stateMoments(torch::optim::OptimizerParamState& s) { return moments(s); }

int64_t stateStep(const torch::optim::OptimizerParamState& s) {
  if (auto* aw = dynamic_cast<const torch::optim::AdamWParamState*>(&s)) return aw->step();
  if (auto* a = dynamic_cast<const torch::optim::AdamParamState*>(&s)) return a->step();
  return 0;
}

void setStateStep(torch::optim::OptimizerParamState& s, int64_t step) {
  if (auto* aw = dynamic_cast<torch::optim::AdamWParamState*>(&s)) aw->step(step);
  else if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(&s)) a->step(step);
}

std::unique_ptr<torch::optim::OptimizerParamState> freshState(const torch::optim::Optimizer& opt,
                                                              const torch::Tensor& param, int moments) {
  auto z = [&](int i) { return i < moments ? torch::zeros_like(param) : torch::Tensor(); };
  if (dynamic_cast<const torch::optim::SGD*>(&opt)) {
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(z(0));
    return s;
  }
  if (dynamic_cast<const torch::optim::AdamW*>(&opt)) {
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->exp_avg(z(0)), s->exp_avg_sq(z(1)), s->max_exp_avg_sq(z(2));
    return s;
  }
  if (dynamic_cast<const torch::optim::Adam*>(&opt)) {
    auto s = std::make_unique<torch::optim::AdamParamState>();
    s->exp_avg(z(0)), s->exp_avg_sq(z(1)), s->max_exp_avg_sq(z(2));
    return s;
  }
  throw ConfigError("the optimizer state can be moved for sgd, adam and adamw only");
}

std::string stateKey(const torch::Tensor& param) { return keyOf(param); }

std::vector<torch::Tensor> momentTensors(torch::optim::Optimizer& opt) {
  std::vector<torch::Tensor> out;
  for (auto& group : opt.param_groups())
    for (auto& p : group.params()) {
      const auto it = opt.state().find(keyOf(p));
      if (it == opt.state().end()) continue;
      for (auto& t : moments(*it->second)) out.push_back(t);
    }
  return out;
}

torch::Tensor resizeLeading(const torch::Tensor& t, torch::IntArrayRef sizes) {
  LC_ENFORCE(t.dim() == static_cast<int64_t>(sizes.size()), "resizeLeading: tensor has ", t.dim(),
             " dimensions, target ", sizes.size());
  if (t.sizes().equals(sizes)) return t;
  torch::NoGradGuard no_grad;
  auto out = torch::zeros(sizes, t.options());
  auto src = t, dst = out;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t keep = std::min(t.size(d), sizes[d]);
    src = src.narrow(d, 0, keep);
    dst = dst.narrow(d, 0, keep);
  }
  dst.copy_(src);
  return out;
}

void NamedOptimizerState::rebind(torch::optim::Optimizer& opt, const NamedTensors& params) {
  auto& state = opt.state();
  for (const auto& [name, p] : bound_) {
    auto it = state.find(keyOf(p));
    if (it != state.end()) {
      stored_[name] = std::move(it->second);
      state.erase(it);
    }
  }
  LC_ENFORCE(opt.param_groups().size() == 1, "rebind: the optimizer must have exactly one parameter group, it has ",
             opt.param_groups().size());
  auto& group = opt.param_groups()[0].params();
  group.clear();
  for (const auto& [name, p] : params) {
    group.push_back(p);
    auto it = stored_.find(name);
    if (it == stored_.end()) continue;
    resizeState(*it->second, p.sizes());
    state[keyOf(p)] = std::move(it->second);
    stored_.erase(it);
  }
  bound_ = params;
}

std::vector<std::string> NamedOptimizerState::bound() const {
  std::vector<std::string> names;
  for (const auto& b : bound_) names.push_back(b.first);
  return names;
}

void NamedOptimizerState::save(torch::serialize::OutputArchive& ar) const {
  std::string names;
  int64_t i = 0;
  for (const auto& [name, s] : stored_) {
    torch::serialize::OutputArchive sub;
    s->serialize(sub);
    ar.write("s" + std::to_string(i++), sub);
    names += name + "\n";
  }
  ar.write("names", torch::from_blob(names.data(), {static_cast<int64_t>(names.size())}, torch::kUInt8).clone());
}

void NamedOptimizerState::load(torch::serialize::InputArchive& ar, const torch::optim::Optimizer& opt) {
  stored_.clear();
  torch::Tensor raw;
  if (!ar.try_read("names", raw)) throw DataError("AB optimizer state: no 'names' entry");
  const std::string names(reinterpret_cast<const char*>(raw.data_ptr<uint8_t>()), static_cast<size_t>(raw.numel()));
  int64_t i = 0;
  size_t start = 0;
  for (size_t nl; (nl = names.find('\n', start)) != std::string::npos; start = nl + 1) {
    torch::serialize::InputArchive sub;
    if (!ar.try_read("s" + std::to_string(i++), sub)) throw DataError("AB optimizer state: missing entry");
    auto s = emptyStateFor(opt);
    s->serialize(sub);
    stored_[names.substr(start, nl - start)] = std::move(s);
  }
}

void NamedOptimizerState::resetMoments(torch::optim::Optimizer& opt) {
  for (auto& kv : opt.state()) zeroMoments(*kv.second);
  for (auto& kv : stored_) zeroMoments(*kv.second);
}

}  // namespace lowcomm::parallel
