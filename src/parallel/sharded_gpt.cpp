// `gpt` split Megatron-style over a tensor-parallel communicator (heads and MLP columns per rank,
// vocab-parallel embedding and head) and into pipeline stages (contiguous units). Names and layout
// follow src/nn/gpt.cpp; which parameters are split, and how, is one table (gpt_shard_layout.h)
// used both to cut the shards out of the full model and to gather them back.
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>

#include "gpt_shard_layout.h"
#include "lowcomm/base/error.h"
#include "lowcomm/parallel/tensor_parallel.h"
#include "lowcomm/parallel/sharded_model.h"
#include "lowcomm/parallel/vocab_parallel.h"

namespace lowcomm::parallel {
namespace {

using Comm = std::shared_ptr<comm::Communicator>;

using gpt_shard::endsWith;
using gpt_shard::gathered;
using gpt_shard::Layout;
using gpt_shard::layoutOf;
using gpt_shard::shardOf;

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

// Unit of a parameter: 0 embedding, 1 + i block i, layers + 1 head.
int unitOf(const std::string& name, int layers) {
  if (name.rfind("stem.", 0) == 0 || name.rfind("pos.", 0) == 0) return 0;
  if (name.rfind("blocks.", 0) == 0) return 1 + std::stoi(name.substr(7, name.find('.', 7) - 7));
  return layers + 1;  // norm, head
}

class ShardedGpt : public ShardedModel {
 public:
  ShardedGpt(const nn::Model& full, Comm tp, Comm pp, std::vector<int> bounds)
      : ShardedModel(full.spec()), tp_(std::move(tp)), pp_(std::move(pp)), bounds_(std::move(bounds)),
        full_paths_(full.modulePaths()) {
    const auto& s = spec();
    stage_ = pp_ ? pp_->rank() : 0;
    stages_ = pp_ ? pp_->size() : 1;
    chunks_ = (static_cast<int>(bounds_.size()) - 1) / stages_;
    held_.assign(s.layers + 2, false);
    for (int k = 0; k < chunks_; ++k)
      for (int u = chunkUnits(k).first; u < chunkUnits(k).second; ++u) held_[u] = true;
    if (held_[0]) {
      stem_ = register_module(nn::kStemName, VocabParallelEmbedding(s.classes, s.dim, tp_));
      pos_ = register_module("pos", Positions(s.seq_len, s.dim));
    }
    blocks_ = register_module("blocks", std::make_shared<torch::nn::Module>());
    block_of_unit_.assign(s.layers + 2, -1);
    for (int u = 1; u <= s.layers; ++u) {
      if (!held_[u]) continue;
      block_of_unit_[u] = static_cast<int>(block_list_.size());
      block_list_.push_back(blocks_->register_module(std::to_string(u - 1), TpBlock(s.dim, s.heads, tp_)));
    }
    if (held_[s.layers + 1]) {
      norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({s.dim})));
      if (!s.tied)
        head_ = register_module(nn::kHeadName, ColumnParallelLinear(s.dim, s.classes, tp_, /*bias=*/false, false));
    }
    loadShards(full);
  }

  torch::Tensor forward(torch::Tensor x) override {
    LC_ENFORCE(chunks_ == 1, "pipeline stage ", stage_, " holds ", chunks_, " model chunks: run each with forwardChunk()");
    return forwardChunk(0, std::move(x));
  }

  torch::Tensor forwardChunk(int k, torch::Tensor x) override {
    LC_ENFORCE(k >= 0 && k < chunks_, "pipeline stage ", stage_, " holds model chunks [0, ", chunks_, "), not ", k);
    for (int u = chunkUnits(k).first; u < chunkUnits(k).second; ++u) x = forwardUnit(u, std::move(x));
    return x;
  }

  torch::Tensor forwardUnit(int u, torch::Tensor x) override {
    const auto& s = spec();
    LC_ENFORCE(u >= 0 && u < s.layers + 2 && held_[u], "pipeline stage ", stage_, " holds units ", heldList(),
               ", not unit ", u);
    if (u == 0) {
      LC_ENFORCE(x.dim() == 2 && x.size(1) >= 1 && x.size(1) <= s.seq_len &&
                     (x.scalar_type() == torch::kInt64 || x.scalar_type() == torch::kInt32),
                 "model 'gpt' expects int64 tokens [B, T] with 1 <= T <= ", s.seq_len, ", got ", x.scalar_type(), " ",
                 x.sizes());
      return stem_->forward(x.to(torch::kInt64)) + pos_->weight.narrow(0, 0, x.size(1));
    }
    LC_ENFORCE(x.dim() == 3 && x.size(2) == s.dim, "pipeline stage ", stage_, " expects activations [B, T, ", s.dim,
               "], got ", x.sizes());
    if (u <= s.layers) return block_list_[block_of_unit_[u]]->forward(x);
    const auto h = norm_->forward(x);
    if (head_) return head_->forward(h);
    return torch::matmul(copyToRegion(h, *tp_), stem_->weight.t());  // tied: the embedding's rows
  }

  torch::Tensor loss(const torch::Tensor& logits, const torch::Tensor& targets, double label_smoothing) override {
    return vocabParallelCrossEntropy(logits, targets, vocabStart(), spec().classes, *tp_, label_smoothing);
  }
  int64_t correct(const torch::Tensor& logits, const torch::Tensor& targets) override {
    return vocabParallelCorrect(logits, targets, vocabStart(), *tp_);
  }
  // Every stage names the whole model's layers (ab.full_rank_layers may name another stage's).
  std::vector<std::string> modulePaths() const override { return full_paths_; }

  bool sharded(const std::string& name) const override {
    // AB-training's factors of a split layer W = A B: A holds the split rows, B the split columns.
    for (const char* factor : {".A", ".B"})
      if (endsWith(name, factor)) {
        const Layout l = layoutOf(name.substr(0, name.size() - 2) + ".weight");
        return l != Layout::replicated && (l == Layout::cols) == (factor[1] == 'B');
      }
    return layoutOf(name) != Layout::replicated;
  }

  void gatherInto(nn::Model& full) override {
    torch::NoGradGuard no_grad;
    auto mine = named_parameters();
    for (auto& p : full.named_parameters()) {
      const int owner = rankOfUnit(unitOf(p.key(), spec().layers));
      torch::Tensor t;
      if (owner == stage_) {
        const auto* shard = mine.find(p.key());
        LC_ENFORCE(shard != nullptr, "tensor parallelism: stage ", stage_, " has no parameter '", p.key(), "'");
        t = gathered(layoutOf(p.key()), *shard, p.value().sizes(), *tp_).to(torch::kFloat32).contiguous();
      } else {
        t = torch::empty(p.value().sizes(), torch::kFloat32);
      }
      if (pp_ && pp_->size() > 1) pp_->broadcast(t.data_ptr(), static_cast<size_t>(t.numel()), comm::DType::f32, owner);
      p.value().copy_(t);
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
    const double norm = std::sqrt(reduceSquaredNorm(split, replicated)), coef = max_norm / (norm + 1e-6);
    if (coef < 1) {
      torch::NoGradGuard no_grad;
      for (auto& p : parameters())
        if (p.grad().defined()) p.grad().mul_(coef);
    }
    return norm;
  }

  double reduceSquaredNorm(double split_sq, double replicated_sq) override {
    tp_->allreduce(&split_sq, 1, comm::DType::f64, comm::ReduceOp::sum);
    double sq = split_sq + replicated_sq;
    if (pp_ && pp_->size() > 1) pp_->allreduce(&sq, 1, comm::DType::f64, comm::ReduceOp::sum);
    return sq;
  }

  comm::Communicator& tp() override { return *tp_; }
  int stage() const override { return stage_; }
  int stages() const override { return stages_; }
  std::vector<int64_t> activationShape(const torch::Tensor& tokens) const override {
    return {tokens.size(0), tokens.size(1), spec().dim};
  }
  int chunks() const override { return chunks_; }
  std::pair<int, int> chunkUnits(int k) const override {
    const int c = k * stages_ + stage_;
    return {bounds_[c], bounds_[c + 1]};
  }
  std::vector<int> boundaries() const override { return bounds_; }

 private:
  int64_t vocabStart() const { return tp_->rank() * (spec().classes / tp_->size()); }

  // The pipeline rank holding unit u: chunk c's rank is c mod P.
  int rankOfUnit(int u) const {
    int c = 0;
    while (bounds_[c + 1] <= u) ++c;
    return c % stages_;
  }

  std::string heldList() const {
    std::string out;
    for (int k = 0; k < chunks_; ++k)
      out += (out.empty() ? "[" : ", [") + std::to_string(chunkUnits(k).first) + ", " +
             std::to_string(chunkUnits(k).second) + ")";
    return out;
  }

  void loadShards(const nn::Model& full) {
    torch::NoGradGuard no_grad;
    const auto theirs = full.named_parameters();
    for (auto& p : named_parameters()) {
      const auto* src = theirs.find(p.key());
      LC_ENFORCE(src != nullptr, "tensor parallelism: the full model has no parameter '", p.key(), "'");
      auto shard = shardOf(layoutOf(p.key()), *src, tp_->size(), tp_->rank());
      LC_ENFORCE(shard.sizes() == p.value().sizes(), "tensor parallelism: '", p.key(), "' shard ", shard.sizes(),
                 " does not fit ", p.value().sizes());
      p.value().copy_(shard);
    }
  }

  Comm tp_, pp_;
  std::vector<int> bounds_;
  int stage_ = 0, stages_ = 1, chunks_ = 1;
  std::vector<bool> held_;          // per unit: on this rank
  std::vector<int> block_of_unit_;  // per unit: index into block_list_, -1 when not a held block
  VocabParallelEmbedding stem_{nullptr};
  Positions pos_{nullptr};
  std::shared_ptr<torch::nn::Module> blocks_;
  std::vector<TpBlock> block_list_;
  torch::nn::LayerNorm norm_{nullptr};
  ColumnParallelLinear head_{nullptr};
  std::vector<std::string> full_paths_;
};

void check(int64_t n, int64_t t, const std::string& what) {
  if (n % t != 0)
    throw ConfigError("parallel.tp: " + std::to_string(t) + " tensor-parallel ranks do not divide " + what + " = " +
                      std::to_string(n));
}

}  // namespace

std::vector<int> stageBounds(const std::vector<int64_t>& weights, int stages) {
  const int n = static_cast<int>(weights.size());
  if (stages < 1 || stages > n)
    throw ConfigError("parallel.pp: " + std::to_string(stages) + " pipeline stages for a model of " + std::to_string(n) +
                      " units (embedding, blocks, head): at most one stage per unit");
  std::vector<int64_t> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + weights[i];
  // best[k][i]: the lightest heaviest part cutting units [0, i) into k parts.
  const int64_t inf = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> best(stages + 1, std::vector<int64_t>(n + 1, inf));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k)
    for (int i = k; i <= n; ++i)
      for (int j = k - 1; j < i; ++j)
        if (best[k - 1][j] != inf) best[k][i] = std::min(best[k][i], std::max(best[k - 1][j], prefix[i] - prefix[j]));
  const int64_t limit = best[stages][n];
  std::vector<int> bounds = {0};
  for (int k = 0; k < stages; ++k) {  // greedy from the front within the limit, leaving a unit per stage
    int end = bounds.back() + 1;
    while (end < n - (stages - k - 1) && prefix[end + 1] - prefix[bounds.back()] <= limit) ++end;
    bounds.push_back(k == stages - 1 ? n : end);
  }
  return bounds;
}

std::vector<int64_t> unitParameters(const nn::Model& full) {
  std::vector<int64_t> w(full.spec().layers + 2, 0);
  for (const auto& p : full.named_parameters()) w[unitOf(p.key(), full.spec().layers)] += p.value().numel();
  return w;
}

std::shared_ptr<ShardedModel> makeShardedModel(const nn::Model& full, std::shared_ptr<comm::Communicator> tp,
                                               std::shared_ptr<comm::Communicator> pp, std::vector<int> bounds,
                                               int virtual_stages) {
  const auto& s = full.spec();
  if (s.name != "gpt")
    throw ConfigError("model.name: tensor and pipeline parallelism (parallel.tp, parallel.pp) split \"gpt\", not \"" +
                      s.name + "\"");
  check(s.heads, tp->size(), "model.heads");
  check(s.classes, tp->size(), "model.vocab");
  if (pp && pp->size() > 1 && s.tied)
    throw ConfigError("parallel.pp: a tied head (model.tied = true) needs the embedding on the last stage; use "
                      "model.tied = false with parallel.pp > 1");
  const int stages = pp ? pp->size() : 1, units = s.layers + 2;
  if (virtual_stages < 1 || (virtual_stages > 1 && stages < 2))
    throw ConfigError("parallel.virtual_stages: " + std::to_string(virtual_stages) +
                      " model chunks per rank need a pipeline (parallel.pp > 1) and must be >= 1");
  const int chunks = stages * virtual_stages;
  const std::string key = virtual_stages > 1 ? "parallel.virtual_stages" : "parallel.pp";
  if (bounds.empty()) {
    if (chunks > units)
      throw ConfigError(key + ": " + std::to_string(stages) + " pipeline stages x " + std::to_string(virtual_stages) +
                        " chunks for a model of " + std::to_string(units) +
                        " units (embedding, blocks, head): at most one chunk per unit");
    bounds = stageBounds(unitParameters(full), chunks);
  }
  bool cuts = static_cast<int>(bounds.size()) == chunks + 1 && bounds.front() == 0 && bounds.back() == units;
  for (size_t k = 1; cuts && k < bounds.size(); ++k) cuts = bounds[k] > bounds[k - 1];
  if (!cuts) {
    std::string b;
    for (int x : bounds) b += (b.empty() ? "" : ", ") + std::to_string(x);
    throw ConfigError(key + ": stage boundaries [" + b + "] do not cut the " + std::to_string(units) +
                      " units (embedding, blocks, head) into " + std::to_string(chunks) + " non-empty " +
                      (virtual_stages > 1 ? "chunks (parallel.pp x parallel.virtual_stages)" : "stages"));
  }
  return std::make_shared<ShardedGpt>(full, std::move(tp), std::move(pp), std::move(bounds));
}

}  // namespace lowcomm::parallel
