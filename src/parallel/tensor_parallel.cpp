// Tensor-parallel regions (Megatron's f and g) as autograd functions, and the column- and
// row-parallel Linear layers built on them.
#include "lowcomm/parallel/tensor_parallel.h"

#include <cmath>
#include <string>

#include "lowcomm/base/error.h"

namespace lowcomm::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

comm::DType dtypeOf(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat32: return comm::DType::f32;
    case torch::kFloat64: return comm::DType::f64;
    case torch::kBFloat16: return comm::DType::bf16;
    case torch::kFloat16: return comm::DType::f16;
    default: throw Error(std::string("tensor parallelism: cannot sum a ") + c10::toString(t.scalar_type()) + " tensor");
  }
}

// A new tensor holding the sum of `t` over the ranks of `tp`.
torch::Tensor summed(const torch::Tensor& t, comm::Communicator& tp) {
  torch::Tensor out = t.contiguous().clone();
  tp.allreduce(out.data_ptr(), static_cast<size_t>(out.numel()), dtypeOf(out), comm::ReduceOp::sum);
  return out;
}

// The communicator travels through the autograd context as an integer (saved_data holds IValues);
// the layer that called the function keeps it alive until backward has run.
int64_t handle(comm::Communicator& tp) { return reinterpret_cast<int64_t>(&tp); }
comm::Communicator& commOf(AutogradContext* ctx) {
  return *reinterpret_cast<comm::Communicator*>(ctx->saved_data["tp"].toInt());
}

struct CopyToRegionFn : public torch::autograd::Function<CopyToRegionFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    return x.clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {summed(grad[0], commOf(ctx)), torch::Tensor()};
  }
};

struct ReduceFromRegionFn : public torch::autograd::Function<ReduceFromRegionFn> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x, int64_t tp) {
    return summed(x, *reinterpret_cast<comm::Communicator*>(tp));
  }
  static variable_list backward(AutogradContext*, variable_list grad) { return {grad[0], torch::Tensor()}; }
};

// This rank's share of `features` split over `tp`; ConfigError naming parallel.tp when T does not divide.
int64_t share(int64_t features, const comm::Communicator& tp, const char* what) {
  if (features % tp.size() != 0)
    throw ConfigError("parallel.tp: " + std::to_string(tp.size()) + " ranks do not divide the " +
                      std::to_string(features) + " " + what + " features of a tensor-parallel layer");
  return features / tp.size();
}

// torch::nn::Linear's default init of a full [out x in] layer (the same draws on every TP rank,
// so the shards together are the layer a single process would build).
std::pair<torch::Tensor, torch::Tensor> fullInit(int64_t in, int64_t out) {
  torch::NoGradGuard no_grad;
  auto w = torch::empty({out, in});
  torch::nn::init::kaiming_uniform_(w, std::sqrt(5.0));
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  auto b = torch::empty({out}).uniform_(-bound, bound);
  return {w, b};
}

// The parts of a matrix split over `tp` along `dim` (0: rows, 1: columns), put together in rank
// order (collective). f32 on the wire; the result has the part's dtype.
torch::Tensor gatherParts(const torch::Tensor& part, comm::Communicator& tp, int dim) {
  if (tp.size() == 1) return part;
  const auto mine = part.detach().to(torch::kFloat32).contiguous();
  auto all = torch::empty({tp.size(), mine.size(0), mine.size(1)}, torch::kFloat32);
  tp.allgather(mine.data_ptr(), all.data_ptr(), static_cast<size_t>(mine.numel()), comm::DType::f32);
  auto full = dim == 0 ? all.reshape({-1, mine.size(1)}) : all.permute({1, 0, 2}).reshape({mine.size(0), -1});
  return full.to(part.scalar_type());
}

}  // namespace

torch::Tensor copyToRegion(const torch::Tensor& x, comm::Communicator& tp) {
  if (tp.size() == 1) return x;  // a pipeline stage without tensor parallelism: nothing to sum
  return CopyToRegionFn::apply(x, handle(tp));
}

torch::Tensor reduceFromRegion(const torch::Tensor& x, comm::Communicator& tp) {
  if (tp.size() == 1) return x;
  return ReduceFromRegionFn::apply(x, handle(tp));
}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(int64_t in, int64_t out, std::shared_ptr<comm::Communicator> tp,
                                                   bool with_bias, bool init)
    : tp_(std::move(tp)), in_(in), out_(out) {
  const int64_t rows = share(out, *tp_, "output");
  weight = register_parameter("weight", torch::empty({rows, in}));
  if (with_bias) bias = register_parameter("bias", torch::empty({rows}));
  if (!init) return;
  auto [w, b] = fullInit(in, out);
  loadFrom(w, b);
}

torch::Tensor ColumnParallelLinearImpl::forward(const torch::Tensor& x) {
  namespace F = torch::nn::functional;
  if (a_.defined()) return F::linear(copyToRegion(F::linear(x, b_), *tp_), a_, bias);
  return F::linear(copyToRegion(x, *tp_), weight, bias);
}

void ColumnParallelLinearImpl::setFactors(torch::Tensor a, torch::Tensor b) {
  nn::checkFactorShapes(a, b, out_ / tp_->size(), in_, "column-parallel layer");
  a_ = std::move(a);
  b_ = std::move(b);
}

torch::Tensor ColumnParallelLinearImpl::gatherSplit(const torch::Tensor& part) {
  return gatherParts(part, *tp_, 0);
}

void ColumnParallelLinearImpl::loadFrom(const torch::Tensor& w, const torch::Tensor& b) {
  LC_ENFORCE(w.dim() == 2 && w.size(0) == out_ && w.size(1) == in_, "column-parallel layer: weight ", w.sizes(),
             " is not [", out_, " x ", in_, "]");
  torch::NoGradGuard no_grad;
  const int64_t rows = weight.size(0), at = tp_->rank() * rows;
  weight.copy_(w.narrow(0, at, rows));
  if (bias.defined()) bias.copy_(b.narrow(0, at, rows));
}

RowParallelLinearImpl::RowParallelLinearImpl(int64_t in, int64_t out, std::shared_ptr<comm::Communicator> tp,
                                             bool with_bias, bool init)
    : tp_(std::move(tp)), in_(in), out_(out) {
  const int64_t cols = share(in, *tp_, "input");
  weight = register_parameter("weight", torch::empty({out, cols}));
  if (with_bias) bias = register_parameter("bias", torch::empty({out}));
  if (!init) return;
  auto [w, b] = fullInit(in, out);
  loadFrom(w, b);
}

torch::Tensor RowParallelLinearImpl::forward(const torch::Tensor& x) {
  namespace F = torch::nn::functional;
  auto y = a_.defined() ? F::linear(reduceFromRegion(F::linear(x, b_), *tp_), a_)
                        : reduceFromRegion(F::linear(x, weight), *tp_);
  return bias.defined() ? y + bias : y;
}

void RowParallelLinearImpl::setFactors(torch::Tensor a, torch::Tensor b) {
  nn::checkFactorShapes(a, b, out_, in_ / tp_->size(), "row-parallel layer");
  a_ = std::move(a);
  b_ = std::move(b);
}

torch::Tensor RowParallelLinearImpl::gatherSplit(const torch::Tensor& part) {
  return gatherParts(part, *tp_, 1);
}

void RowParallelLinearImpl::loadFrom(const torch::Tensor& w, const torch::Tensor& b) {
  LC_ENFORCE(w.dim() == 2 && w.size(0) == out_ && w.size(1) == in_, "row-parallel layer: weight ", w.sizes(),
             " is not [", out_, " x ", in_, "]");
  torch::NoGradGuard no_grad;
  const int64_t cols = weight.size(1), at = tp_->rank() * cols;
  weight.copy_(w.narrow(1, at, cols));
  if (bias.defined()) bias.copy_(b);
}

}  // namespace lowcomm::parallel
