// `vit-tiny`: ViT-Tiny (dim 192, 3 heads, MLP 768, pre-norm blocks) with a cls token and a learned
// position embedding. Depth and patch size come from the spec.
//
// Layout and names (timm-like): stem Conv(C->192, patch, stride patch) = patch embedding;
// embed.{cls_token, pos_embed}; blocks.<i>.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2};
// norm; head Linear(192, classes) on the cls token. cls_token/pos_embed live in the `embed` child
// (registered after stem) so that registration order follows forward order.
// Init: Linear weights and cls/pos ~ N(0, 0.02), Linear biases 0, LayerNorm 1/0 (as timm);
// the patch-embedding conv keeps torch's default.
#include <torch/torch.h>

#include <cmath>
#include <string>

#include "families.h"
#include "lowcomm/base/error.h"

namespace lowcomm::nn::detail {
namespace {

constexpr int64_t kDim = 192;
constexpr int64_t kHeads = 3;
constexpr int64_t kMlpDim = 768;

class EmbedImpl : public torch::nn::Module {
 public:
  explicit EmbedImpl(int64_t tokens) {
    cls_token = register_parameter("cls_token", torch::zeros({1, 1, kDim}));
    pos_embed = register_parameter("pos_embed", torch::zeros({1, tokens, kDim}));
  }
  // patches [B, N, D] -> [B, N+1, D] with the cls token first, plus position embeddings.
  torch::Tensor forward(const torch::Tensor& patches) {
    auto cls = cls_token.expand({patches.size(0), -1, -1});
    return torch::cat({cls, patches}, 1) + pos_embed;
  }
  torch::Tensor cls_token, pos_embed;
};
TORCH_MODULE(Embed);

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl() {
    qkv_ = register_module("qkv", torch::nn::Linear(kDim, 3 * kDim));
    proj_ = register_module("proj", torch::nn::Linear(kDim, kDim));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), n = x.size(1), hd = kDim / kHeads;
    auto qkv = qkv_->forward(x).reshape({b, n, 3, kHeads, hd}).permute({2, 0, 3, 1, 4});
    auto q = qkv[0], k = qkv[1], v = qkv[2];  // [B, H, N, hd]
    auto attn = torch::softmax(torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(hd)), -1);
    auto out = torch::matmul(attn, v).transpose(1, 2).reshape({b, n, kDim});
    return proj_->forward(out);
  }

 private:
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr};
};
TORCH_MODULE(Attention);

class FeedForwardImpl : public torch::nn::Module {
 public:
  FeedForwardImpl() {
    fc1_ = register_module("fc1", torch::nn::Linear(kDim, kMlpDim));
    fc2_ = register_module("fc2", torch::nn::Linear(kMlpDim, kDim));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2_->forward(torch::gelu(fc1_->forward(x))); }

 private:
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(FeedForward);

torch::nn::LayerNorm layerNorm() {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim}).eps(1e-6));
}

// Pre-norm transformer block: x + attn(norm1(x)), then + mlp(norm2(.)).
class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl() {
    norm1_ = register_module("norm1", layerNorm());
    attn_ = register_module("attn", Attention());
    norm2_ = register_module("norm2", layerNorm());
    mlp_ = register_module("mlp", FeedForward());
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn_->forward(norm1_->forward(x));
    return x + mlp_->forward(norm2_->forward(x));
  }

 private:
  torch::nn::LayerNorm norm1_{nullptr}, norm2_{nullptr};
  Attention attn_{nullptr};
  FeedForward mlp_{nullptr};
};
TORCH_MODULE(Block);

class VitTiny : public Model {
 public:
  VitTiny(const ModelSpec& s, int64_t patch) : Model(s) {
    const int64_t grid = s.image_size / patch;
    stem_ = register_module(kStemName, torch::nn::Conv2d(
                                           torch::nn::Conv2dOptions(s.in_channels, kDim, patch).stride(patch)));
    embed_ = register_module("embed", Embed(grid * grid + 1));
    blocks_ = torch::nn::Sequential();
    for (int i = 0; i < s.vit_depth; ++i) blocks_->push_back(Block());
    register_module("blocks", blocks_);
    norm_ = register_module("norm", layerNorm());
    head_ = register_module(kHeadName, torch::nn::Linear(kDim, s.classes));
    init();
  }

  torch::Tensor forward(torch::Tensor x) override {
    checkInput(x);
    x = stem_->forward(x).flatten(2).transpose(1, 2);  // [B, grid*grid, D]
    x = blocks_->forward(embed_->forward(x));
    return head_->forward(norm_->forward(x).select(1, 0));
  }

 private:
  void init() {
    torch::NoGradGuard no_grad;
    embed_->cls_token.normal_(0.0, 0.02);
    embed_->pos_embed.normal_(0.0, 0.02);
    for (const auto& m : modules(/*include_self=*/false)) {
      if (auto* fc = m->as<torch::nn::Linear>()) {
        fc->weight.normal_(0.0, 0.02);
        fc->bias.zero_();
      }
    }
  }

  torch::nn::Conv2d stem_{nullptr};
  Embed embed_{nullptr};
  torch::nn::Sequential blocks_{nullptr};
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Linear head_{nullptr};
};

}  // namespace

std::shared_ptr<Model> makeVitTiny(const ModelSpec& spec) {
  const int size = spec.image_size;
  int patch = spec.vit_patch;
  if (patch == 0) patch = size % 7 == 0 ? 7 : size % 4 == 0 ? 4 : 0;
  if (patch <= 0 || size % patch != 0)
    throw ConfigError("model.vit_patch: " + std::to_string(spec.vit_patch) + " is not valid for " +
                      "model.image_size " + std::to_string(size) +
                      "; valid values: a positive divisor of the image size, or 0 (auto: 7 or 4)");
  if (spec.vit_depth < 1)
    throw ConfigError("model.vit_depth: must be >= 1 (12 = standard ViT-Tiny), got " +
                      std::to_string(spec.vit_depth));
  return std::make_shared<VitTiny>(spec, patch);
}

}  // namespace lowcomm::nn::detail
