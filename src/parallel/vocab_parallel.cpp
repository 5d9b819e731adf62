// Vocab-parallel cross-entropy as an autograd function: the softmax normaliser, the target's
// logit and (for label smoothing) the sum of the logits are combined over the tensor-parallel
// ranks; backward is local.
#include "lowcomm/parallel/vocab_parallel.h"

#include "lowcomm/base/error.h"

namespace lowcomm::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void allreduceF32(torch::Tensor& t, comm::Communicator& tp, comm::ReduceOp op) {
  tp.allreduce(t.data_ptr(), static_cast<size_t>(t.numel()), comm::DType::f32, op);
}

// Rows [N, V/T] of this rank's logits, shifted by the global row maximum, and the target's
// position in this slice (mask: the target lies in it).
struct Local {
  torch::Tensor shifted, mask, index;
};

Local shiftedLocal(const torch::Tensor& logits, const torch::Tensor& targets, int64_t start, comm::Communicator& tp) {
  const int64_t width = logits.size(-1);
  auto rows = logits.detach().reshape({-1, width}).to(torch::kFloat32).contiguous();
  auto max = std::get<0>(rows.max(-1)).contiguous();
  allreduceF32(max, tp, comm::ReduceOp::max);
  auto t = targets.reshape({-1}).to(torch::kInt64);
  auto mask = (t >= start) & (t < start + width);
  auto index = (t - start).masked_fill(~mask, 0);
  return {rows - max.unsqueeze(1), mask, index};
}

torch::Tensor targetLogit(const Local& l) {
  return l.shifted.gather(1, l.index.unsqueeze(1)).squeeze(1).masked_fill(~l.mask, 0.0);
}

struct VocabParallelCeFn : public torch::autograd::Function<VocabParallelCeFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& targets,
                               int64_t start, int64_t vocab, int64_t tp_handle, double smoothing) {
    auto& tp = *reinterpret_cast<comm::Communicator*>(tp_handle);
    const Local l = shiftedLocal(logits, targets, start, tp);
    auto exp = l.shifted.exp();
    // One allreduce of [sum exp, target logit, sum of logits] per row.
    auto sums = torch::stack({exp.sum(1), targetLogit(l), l.shifted.sum(1)}).contiguous();
    allreduceF32(sums, tp, comm::ReduceOp::sum);
    auto lse = sums[0].log();
    auto loss = lse - sums[1];
    if (smoothing > 0) loss = (1.0 - smoothing) * loss + smoothing * (lse - sums[2] / static_cast<double>(vocab));
    ctx->save_for_backward({exp / sums[0].unsqueeze(1), l.mask, l.index});
    ctx->saved_data["smoothing"] = smoothing;
    ctx->saved_data["vocab"] = vocab;
    ctx->saved_data["shape"] = logits.sizes().vec();
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    return loss.reshape(targets.sizes());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    const double smoothing = ctx->saved_data["smoothing"].toDouble();
    const int64_t vocab = ctx->saved_data["vocab"].toInt();
    auto g = saved[0].clone();  // softmax slice [N, V/T]
    auto onehot = torch::zeros_like(g).scatter_(1, saved[2].unsqueeze(1), 1.0) * saved[1].unsqueeze(1).to(g.dtype());
    g -= (1.0 - smoothing) * onehot;
    if (smoothing > 0) g -= smoothing / static_cast<double>(vocab);
    g *= grad[0].reshape({-1, 1}).to(g.dtype());
    const auto dtype = static_cast<c10::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {g.reshape(ctx->saved_data["shape"].toIntVector()).to(dtype), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor vocabParallelCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets, int64_t start,
                                        int64_t vocab, comm::Communicator& tp, double label_smoothing) {
  LC_ENFORCE(logits.dim() == targets.dim() + 1 && logits.sizes().slice(0, targets.dim()) == targets.sizes(),
             "vocab-parallel cross-entropy: logits ", logits.sizes(), " do not fit targets ", targets.sizes());
  LC_ENFORCE(logits.size(-1) * tp.size() == vocab, "vocab-parallel cross-entropy: a slice of ", logits.size(-1),
             " classes on ", tp.size(), " ranks is not the vocabulary of ", vocab);
  return VocabParallelCeFn::apply(logits, targets, start, vocab, reinterpret_cast<int64_t>(&tp), label_smoothing);
}

int64_t vocabParallelCorrect(const torch::Tensor& logits, const torch::Tensor& targets, int64_t start,
                             comm::Communicator& tp) {
  torch::NoGradGuard no_grad;
  const Local l = shiftedLocal(logits, targets, start, tp);
  auto target = targetLogit(l).contiguous();
  allreduceF32(target, tp, comm::ReduceOp::sum);
  return target.ge(0).sum().item<int64_t>();  // the shifted maximum is 0
}

}  // namespace lowcomm::parallel
