// Optimizer state kept by parameter name across changes of the parameter set (AB-training swaps a
// layer's weight for factors A and B and changes their rank; docs/ab-training.md: "Optimizer state is
// resized to the new shapes, not reset").
//
// Contract (the optimizer has exactly one parameter group): rebind() moves the optimizer's state
// of the parameters it bound last time into the
// store, then makes `params` the optimizer's only parameters (param group 0, options unchanged).
// A parameter whose name has stored state gets it back resized to its shape: along every
// dimension the leading min(old, new) entries are kept and new entries are zero (SGD momentum
// buffer; AdamW/Adam exp_avg, exp_avg_sq, max_exp_avg_sq; the step count is kept). A name never
// seen starts without state, as a fresh optimizer would.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace lowcomm::parallel {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// `t` cut or zero-padded to `sizes` (the leading block along each dimension is kept).
torch::Tensor resizeLeading(const torch::Tensor& t, torch::IntArrayRef sizes);

// The moment tensors (SGD momentum buffer; Adam/AdamW exp_avg, exp_avg_sq and max_exp_avg_sq
// when defined) of every parameter that has state, in parameter order: the same list on every
// rank that took the same steps (local SGD averages them).
std::vector<torch::Tensor> momentTensors(torch::optim::Optimizer& opt);

// One parameter's optimizer state, for code that moves it as raw tensors (a live member's state
// for a joining one, docs/elastic.md): its defined moment tensors in the order above, its step
// count (Adam, AdamW; 0 for SGD), and a fresh state of `opt`'s type whose first `moments` moment
// tensors are zeros shaped like `param` (ConfigError for an optimizer other than SGD, Adam, AdamW).
std::vector<torch::Tensor> stateMoments(torch::optim::OptimizerParamState& s);
int64_t stateStep(const torch::optim::OptimizerParamState& s);
void setStateStep(torch::optim::OptimizerParamState& s, int64_t step);
std::unique_ptr<torch::optim::OptimizerParamState> freshState(const torch::optim::Optimizer& opt,
                                                              const torch::Tensor& param, int moments);
// The key the optimizer files `param`'s state under.
std::string stateKey(const torch::Tensor& param);

class NamedOptimizerState {
 public:
  void rebind(torch::optim::Optimizer& opt, const NamedTensors& params);
  // Names bound by the last rebind(), in order.
  std::vector<std::string> bound() const;
  // The stored states of names that are not bound (the bound ones live in the optimizer and are
  // saved with it). load() needs the optimizer to know the state type (SGD, Adam, AdamW).
  void save(torch::serialize::OutputArchive& ar) const;
  void load(torch::serialize::InputArchive& ar, const torch::optim::Optimizer& opt);
  // The reference's reset_opt: zeroes the moments (SGD momentum buffer; Adam/AdamW exp_avg,
  // exp_avg_sq, max_exp_avg_sq) of every state, bound or stored; step counts are kept.
  void resetMoments(torch::optim::Optimizer& opt);

 private:
  std::map<std::string, std::unique_ptr<torch::optim::OptimizerParamState>> stored_;
  NamedTensors bound_;
};

}  // namespace lowcomm::parallel
