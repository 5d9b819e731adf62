// `gpt` split Megatron-style over a tensor-parallel communicator: heads and MLP columns per rank,
// vocab-parallel embedding and head. Names and layout follow src/nn/gpt.cpp; which parameters are
// split, and how, is one table (layoutOf) used both to cut the shards out of the full model and
// to gather them back.
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>

#include "lowcomm/base/error.h"
#include "lowcomm/parallel/tensor_parallel.h"
#include "lowcomm/parallel/tp_model.h"
#include "lowcomm/parallel/vocab_parallel.h"

namespace lowcomm::parallel {
namespace {

using Comm = std::shared_ptr<comm::Communicator>;

// How a parameter of the full model is split over T ranks.
enum class Layout {
  replicated,
  rows,      // rank r: rows [r n/T, (r+1) n/T)
  cols,      // rank r: columns [r n/T, (r+1) n/T)
  qkv_rows,  // rows of the fused [Q; K; V]: rank r gets rows block r of each of Q, K and V
};

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

Layout layoutOf(const std::string& name) {
  if (endsWith(name, "attn.qkv.weight") || endsWith(name, "attn.qkv.bias")) return Layout::qkv_rows;
  if (endsWith(name, "attn.proj.weight") || endsWith(name, "mlp.fc2.weight")) return Layout::cols;
  if (endsWith(name, "mlp.fc1.weight") || endsWith(name, "mlp.fc1.bias") || name == "stem.weight" ||
      name == "head.weight")
    return Layout::rows;
  return Layout::replicated;
}

// [3 n, rest...] viewed as [3, T, n / T, rest...].
torch::Tensor qkvView(const torch::Tensor& full, int64_t t) {
  std::vector<int64_t> shape = {3, t, full.size(0) / (3 * t)};
  for (int64_t d = 1; d < full.dim(); ++d) shape.push_back(full.size(d));
  return full.reshape(shape);
}

torch::Tensor shardOf(Layout l, const torch::Tensor& full, int64_t t, int64_t r) {
  switch (l) {
    case Layout::rows: return full.chunk(t, 0)[r];
    case Layout::cols: return full.chunk(t, 1)[r];
    case Layout::qkv_rows: {
      auto s = qkvView(full, t).select(1, r);
      std::vector<int64_t> shape = {full.size(0) / t};
      for (int64_t d = 1; d < full.dim(); ++d) shape.push_back(full.size(d));
      return s.reshape(shape);
    }
    case Layout::replicated: break;
  }
  return full;
}

// The full tensor from every rank's shard (collective over tp for split layouts).
torch::Tensor gathered(Layout l, const torch::Tensor& shard, const torch::IntArrayRef full_shape, comm::Communicator& tp) {
  if (l == Layout::replicated) return shard.detach().clone();
  const int64_t t = tp.size();
  auto mine = shard.detach().to(torch::kFloat32).contiguous();
  auto all = torch::empty({t * mine.numel()});
  tp.allgather(mine.data_ptr(), all.data_ptr(), static_cast<size_t>(mine.numel()), comm::DType::f32);
  std::vector<int64_t> blocks = {t};
  for (auto s : mine.sizes()) blocks.push_back(s);
  all = all.reshape(blocks);                                           // [T, shard...]
  if (l == Layout::cols) return all.transpose(0, 1).reshape(full_shape);  // [out, T, in/T]
  if (l == Layout::qkv_rows) {
    std::vector<int64_t> parts = {t, 3, mine.size(0) / 3};
    for (int64_t d = 1; d < mine.dim(); ++d) parts.push_back(mine.size(d));
    return all.reshape(parts).transpose(0, 1).reshape(full_shape);    // [3, T, n/T, ...]
  }
  return all.reshape(full_shape);
}

class PositionsImpl : public torch::nn::Module {
 public:
  PositionsImpl(int64_t seq_len, int64_t dim) { weight = register_parameter("weight", torch::empty({seq_len, dim})); }
  torch::Tensor weight;
};
TORCH_MODULE(Positions);

// Rank r holds rows [start, start + V/T) of the token embedding; the others' lookups are zero here
// and the sum over tp completes every row.
class VocabParallelEmbeddingImpl : public torch::nn::Module {
 public:
  VocabParallelEmbeddingImpl(int64_t vocab, int64_t dim, Comm tp) : tp_(std::move(tp)) {
    rows_ = vocab / tp_->size();
    start_ = tp_->rank() * rows_;
    weight = register_parameter("weight", torch::empty({rows_, dim}));
  }
  torch::Tensor forward(const torch::Tensor& tokens) {
    auto outside = (tokens < start_) | (tokens >= start_ + rows_);
    auto local = (tokens - start_).masked_fill(outside, 0);
    auto e = torch::embedding(weight, local).masked_fill(outside.unsqueeze(-1), 0.0);
    return reduceFromRegion(e, *tp_);
  }
  int64_t start() const { return start_; }
  torch::Tensor weight;

 private:
  Comm tp_;
  int64_t rows_ = 0, start_ = 0;
};
TORCH_MODULE(VocabParallelEmbedding);

class TpAttentionImpl : public torch::nn::Module {
 public:
  TpAttentionImpl(int64_t dim, int64_t heads, const Comm& tp)
      : heads_(heads / tp->size()), head_dim_(dim / heads) {
    qkv = register_module("qkv", ColumnParallelLinear(dim, 3 * dim, tp, true, false));
    proj = register_module("proj", RowParallelLinear(dim, dim, tp, true, false));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1);
    auto parts = qkv->forward(x).reshape({b, t, 3, heads_, head_dim_}).permute({2, 0, 3, 1, 4});
    auto q = parts[0], k = parts[1], v = parts[2];  // [B, H/T, T, hd]
    auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim_));
    const auto future = torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool)).triu(1);
    auto attn = torch::softmax(scores.masked_fill(future, -std::numeric_limits<float>::infinity()), -1);
    return proj->forward(torch::matmul(attn, v).transpose(1, 2).reshape({b, t, heads_ * head_dim_}));
  }
  ColumnParallelLinear qkv{nullptr};
  RowParallelLinear proj{nullptr};

 private:
  int64_t heads_, head_dim_;
};
TORCH_MODULE(TpAttention);

class TpMlpImpl : public torch::nn::Module {
 public:
  TpMlpImpl(int64_t dim, const Comm& tp) {
    fc1 = register_module("fc1", ColumnParallelLinear(dim, 4 * dim, tp, true, false));
    fc2 = register_module("fc2", RowParallelLinear(4 * dim, dim, tp, true, false));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2->forward(torch::gelu(fc1->forward(x))); }
  ColumnParallelLinear fc1{nullptr};
  RowParallelLinear fc2{nullptr};
};
TORCH_MODULE(TpMlp);

class TpBlockImpl : public torch::nn::Module {
 public:
  TpBlockImpl(int64_t dim, int64_t heads, const Comm& tp) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    attn = register_module("attn", TpAttention(dim, heads, tp));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    mlp = register_module("mlp", TpMlp(dim, tp));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn->forward(ln1->forward(x));
    return x + mlp->forward(ln2->forward(x));
  }
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  TpAttention attn{nullptr};
  TpMlp mlp{nullptr};
};
TORCH_MODULE(TpBlock);

class TensorParallelGpt : public TensorParallelModel {
 public:
  TensorParallelGpt(const nn::Model& full, Comm tp) : TensorParallelModel(full.spec()), tp_(std::move(tp)) {
    const auto& s = spec();
    stem_ = register_module(nn::kStemName, VocabParallelEmbedding(s.classes, s.dim, tp_));
    pos_ = register_module("pos", Positions(s.seq_len, s.dim));
    blocks_ = torch::nn::Sequential();
    for (int i = 0; i < s.layers; ++i) blocks_->push_back(TpBlock(s.dim, s.heads, tp_));
    register_module("blocks", blocks_);
    norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({s.dim})));
    if (!s.tied)
      head_ = register_module(nn::kHeadName, ColumnParallelLinear(s.dim, s.classes, tp_, /*bias=*/false, false));
    loadShards(full);
  }

  torch::Tensor forward(torch::Tensor x) override {
    const auto& s = spec();
    LC_ENFORCE(x.dim() == 2 && x.size(1) >= 1 && x.size(1) <= s.seq_len &&
                   (x.scalar_type() == torch::kInt64 || x.scalar_type() == torch::kInt32),
               "model 'gpt' expects int64 tokens [B, T] with 1 <= T <= ", s.seq_len, ", got ", x.scalar_type(), " ",
               x.sizes());
    auto h = stem_->forward(x.to(torch::kInt64)) + pos_->weight.narrow(0, 0, x.size(1));
    h = norm_->forward(blocks_->forward(h));
    if (head_) return head_->forward(h);
    return torch::matmul(copyToRegion(h, *tp_), stem_->weight.t());  // tied: the embedding's rows
  }

  torch::Tensor loss(const torch::Tensor& logits, const torch::Tensor& targets, double label_smoothing) override {
    return vocabParallelCrossEntropy(logits, targets, stem_->start(), spec().classes, *tp_, label_smoothing);
  }
  int64_t correct(const torch::Tensor& logits, const torch::Tensor& targets) override {
    return vocabParallelCorrect(logits, targets, stem_->start(), *tp_);
  }
  bool sharded(const std::string& name) const override { return layoutOf(name) != Layout::replicated; }

  void gatherInto(nn::Model& full) override {
    torch::NoGradGuard no_grad;
    auto mine = named_parameters();
    auto theirs = full.named_parameters();
    LC_ENFORCE(mine.size() == theirs.size(), "tensor parallelism: the full model has ", theirs.size(),
               " parameters, the split one ", mine.size());
    for (const auto& p : mine) {
      auto* dst = theirs.find(p.key());
      LC_ENFORCE(dst != nullptr, "tensor parallelism: the full model has no parameter '", p.key(), "'");
      dst->copy_(gathered(layoutOf(p.key()), p.value(), dst->sizes(), *tp_));
    }
  }

  double clipGradNorm(double max_norm) override {
    double split = 0, replicated = 0;
    for (const auto& p : named_parameters()) {
      const auto& g = p.value().grad();
      if (!g.defined()) continue;
      const double sq = g.to(torch::kFloat64).pow(2).sum().item<double>();
      (sharded(p.key()) ? split : replicated) += sq;
    }
    tp_->allreduce(&split, 1, comm::DType::f64, comm::ReduceOp::sum);
    const double norm = std::sqrt(split + replicated), coef = max_norm / (norm + 1e-6);
    if (coef < 1) {
      torch::NoGradGuard no_grad;
      for (auto& p : parameters())
        if (p.grad().defined()) p.grad().mul_(coef);
    }
    return norm;
  }

  comm::Communicator& tp() override { return *tp_; }

 private:
  void loadShards(const nn::Model& full) {
    torch::NoGradGuard no_grad;
    const auto theirs = full.named_parameters();
    auto mine = named_parameters();
    LC_ENFORCE(mine.size() == theirs.size(), "tensor parallelism: the full model has ", theirs.size(),
               " parameters, the split one ", mine.size());
    for (auto& p : mine) {
      const auto* src = theirs.find(p.key());
      LC_ENFORCE(src != nullptr, "tensor parallelism: the full model has no parameter '", p.key(), "'");
      auto shard = shardOf(layoutOf(p.key()), *src, tp_->size(), tp_->rank());
      LC_ENFORCE(shard.sizes() == p.value().sizes(), "tensor parallelism: '", p.key(), "' shard ", shard.sizes(),
                 " does not fit ", p.value().sizes());
      p.value().copy_(shard);
    }
  }

  Comm tp_;
  VocabParallelEmbedding stem_{nullptr};
  Positions pos_{nullptr};
  torch::nn::Sequential blocks_{nullptr};
  torch::nn::LayerNorm norm_{nullptr};
  ColumnParallelLinear head_{nullptr};
};

void check(int64_t n, int64_t t, const std::string& what) {
  if (n % t != 0)
    throw ConfigError("parallel.tp: " + std::to_string(t) + " tensor-parallel ranks do not divide " + what + " = " +
                      std::to_string(n));
}

}  // namespace

std::shared_ptr<TensorParallelModel> makeTensorParallel(const nn::Model& full, std::shared_ptr<comm::Communicator> tp) {
  const auto& s = full.spec();
  if (s.name != "gpt")
    throw ConfigError("model.name: tensor parallelism (parallel.tp = " + std::to_string(tp->size()) +
                      ") splits \"gpt\", not \"" + s.name + "\"");
  check(s.heads, tp->size(), "model.heads");
  check(s.classes, tp->size(), "model.vocab");
  return std::make_shared<TensorParallelGpt>(full, std::move(tp));
}

}  // namespace lowcomm::parallel
