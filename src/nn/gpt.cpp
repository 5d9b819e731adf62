// `gpt`: a GPT-2-style decoder language model on byte tokens.
//
// Layout and names: stem Embedding(vocab, dim) = token embedding; pos.weight [seq_len, dim]
// learned positions; blocks.<i>.{ln1, attn.qkv, attn.proj, ln2, mlp.fc1, mlp.fc2} (pre-LayerNorm,
// causal multi-head attention, GELU MLP of 4 dim); norm (final LayerNorm); head Linear(dim,
// vocab, no bias), or with `tied` a head without parameters that multiplies by the stem's weight.
// Init as GPT-2: Linear and Embedding weights N(0, 0.02), biases 0, the residual projections
// (attn.proj, mlp.fc2) N(0, 0.02 / sqrt(2 layers)), LayerNorm 1 / 0.
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>

#include "families.h"
#include "lowcomm/base/error.h"
#include "lowcomm/nn/factor_layers.h"

namespace lowcomm::nn::detail {
namespace {

class PositionsImpl : public torch::nn::Module {
 public:
  PositionsImpl(int64_t seq_len, int64_t dim) { weight = register_parameter("weight", torch::zeros({seq_len, dim})); }
  torch::Tensor weight;
};
TORCH_MODULE(Positions);

class CausalAttentionImpl : public torch::nn::Module {
 public:
  CausalAttentionImpl(int64_t dim, int64_t heads) : dim_(dim), heads_(heads) {
    qkv = register_module("qkv", FactorLinear(dim, 3 * dim));
    proj = register_module("proj", FactorLinear(dim, dim));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), hd = dim_ / heads_;
    auto parts = qkv->forward(x).reshape({b, t, 3, heads_, hd}).permute({2, 0, 3, 1, 4});
    auto q = parts[0], k = parts[1], v = parts[2];  // [B, H, T, hd]
    auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
    const auto future = torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool)).triu(1);
    auto attn = torch::softmax(scores.masked_fill(future, -std::numeric_limits<float>::infinity()), -1);
    return proj->forward(torch::matmul(attn, v).transpose(1, 2).reshape({b, t, dim_}));
  }
  FactorLinear qkv{nullptr}, proj{nullptr};  // AB-training factorises these (factored forward)

 private:
  int64_t dim_, heads_;
};
TORCH_MODULE(CausalAttention);

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(int64_t dim) {
    fc1 = register_module("fc1", FactorLinear(dim, 4 * dim));
    fc2 = register_module("fc2", FactorLinear(4 * dim, dim));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2->forward(torch::gelu(fc1->forward(x))); }
  FactorLinear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Mlp);

class GptBlockImpl : public torch::nn::Module {
 public:
  GptBlockImpl(int64_t dim, int64_t heads) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    attn = register_module("attn", CausalAttention(dim, heads));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    mlp = register_module("mlp", Mlp(dim));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn->forward(ln1->forward(x));
    return x + mlp->forward(ln2->forward(x));
  }
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  CausalAttention attn{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(GptBlock);

// The tied head: logits = x · Eᵀ with the token embedding E, holding no parameter of its own.
class TiedHeadImpl : public torch::nn::Module {
 public:
  explicit TiedHeadImpl(torch::nn::Embedding embedding) : embedding_(std::move(embedding)) {}
  torch::Tensor forward(const torch::Tensor& x) { return torch::matmul(x, embedding_->weight.t()); }

 private:
  torch::nn::Embedding embedding_;  // not registered: its weight belongs to `stem`
};
TORCH_MODULE(TiedHead);

class Gpt : public Model {
 public:
  explicit Gpt(const ModelSpec& s) : Model(s) {
    stem_ = register_module(kStemName, torch::nn::Embedding(s.classes, s.dim));
    pos_ = register_module("pos", Positions(s.seq_len, s.dim));
    blocks_ = torch::nn::Sequential();
    for (int i = 0; i < s.layers; ++i) blocks_->push_back(GptBlock(s.dim, s.heads));
    register_module("blocks", blocks_);
    norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({s.dim})));
    if (s.tied) tied_ = register_module(kHeadName, TiedHead(stem_));
    else head_ = register_module(kHeadName, torch::nn::Linear(torch::nn::LinearOptions(s.dim, s.classes).bias(false)));
    init();
  }

  torch::Tensor forward(torch::Tensor x) override {
    const auto& s = spec();
    LC_ENFORCE(x.dim() == 2 && x.size(1) >= 1 && x.size(1) <= s.seq_len &&
                   (x.scalar_type() == torch::kInt64 || x.scalar_type() == torch::kInt32),
               "model 'gpt' expects int64 tokens [B, T] with 1 <= T <= ", s.seq_len, ", got ", x.scalar_type(), " ",
               x.sizes());
    auto h = stem_->forward(x) + pos_->weight.narrow(0, 0, x.size(1));
    h = norm_->forward(blocks_->forward(h));
    return s.tied ? tied_->forward(h) : head_->forward(h);
  }

 private:
  void init() {
    torch::NoGradGuard no_grad;
    const double residual = 0.02 / std::sqrt(2.0 * spec().layers);
    stem_->weight.normal_(0.0, 0.02);
    pos_->weight.normal_(0.0, 0.02);
    for (const auto& m : blocks_->modules(/*include_self=*/false)) {
      if (auto* b = m->as<GptBlockImpl>()) {
        for (auto* fc : {b->attn->qkv.get(), b->attn->proj.get(), b->mlp->fc1.get(), b->mlp->fc2.get()}) {
          fc->weight.normal_(0.0, 0.02);
          fc->bias.zero_();
        }
        b->attn->proj->weight.normal_(0.0, residual);
        b->mlp->fc2->weight.normal_(0.0, residual);
      }
    }
    if (head_) head_->weight.normal_(0.0, 0.02);
  }

  torch::nn::Embedding stem_{nullptr};
  Positions pos_{nullptr};
  torch::nn::Sequential blocks_{nullptr};
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Linear head_{nullptr};
  TiedHead tied_{nullptr};
};

}  // namespace

std::shared_ptr<Model> makeGpt(const ModelSpec& spec) {
  auto bad = [](const std::string& key, const std::string& what) { throw ConfigError(key + ": " + what); };
  if (spec.layers < 1) bad("model.layers", "must be >= 1, got " + std::to_string(spec.layers));
  if (spec.dim < 1) bad("model.dim", "must be >= 1, got " + std::to_string(spec.dim));
  if (spec.heads < 1 || spec.dim % spec.heads != 0)
    bad("model.heads", std::to_string(spec.heads) + " does not divide model.dim " + std::to_string(spec.dim));
  if (spec.seq_len < 1) bad("model.seq_len", "must be >= 1, got " + std::to_string(spec.seq_len));
  return std::make_shared<Gpt>(spec);
}

}  // namespace lowcomm::nn::detail
