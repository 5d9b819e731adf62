// `vgg16_timm`: timm's VGG16 (no BatchNorm) with its `pre_logits` ConvMlp head, the model of the
// AB-training reference's VGG16/CIFAR-10 runs (docs/ab-training.md).
//
// Layout (named to the models.h contract):
//   stem        Conv3x3(C -> 64w, pad 1, bias) -> ReLU            (timm's features.0)
//   features    the other 12 convs (Conv3x3, pad 1, bias) -> ReLU, with timm's 5 max-pools
//   pre_logits  ConvMlp: adaptive-avg-pool the map up to 7x7 when smaller, fc1 = Conv2d(512w -> H,
//               kernel 7, bias) -> ReLU -> Dropout, fc2 = Conv2d(H -> H, kernel 1, bias) -> ReLU
//   head        global average pool -> Dropout -> Linear(H -> classes)
// with H = 4096w and every conv width scaled by w = spec.width (rounded, >= 1). At w = 1 on
// 3x32x32 inputs with 10 classes this is timm's vgg16: 134,301,514 parameters.
// Small images: a max-pool that would shrink a 1x1 map to nothing is skipped (28x28 pools to
// 14, 7, 3, 1, then stays 1x1; 32x32 takes all five pools to 1x1, as in timm).
// Init as timm: Kaiming-normal (fan_out, ReLU) for convs, zero biases, N(0, 0.01) for the head.
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "families.h"
#include "lowcomm/base/error.h"
#include "lowcomm/nn/factor_layers.h"

namespace lowcomm::nn::detail {
namespace {

constexpr int kPool = 0;
const std::vector<int> kVgg16 = {64,  64,  kPool, 128, 128, kPool, 256, 256, 256, kPool,
                                 512, 512, 512,   kPool, 512, 512, 512, kPool};
constexpr int64_t kMlpWidth = 4096;
constexpr int64_t kMlpKernel = 7;

int64_t scaled(int64_t c, double width) { return std::max<int64_t>(1, std::llround(static_cast<double>(c) * width)); }

// FactorConv2d: AB-training runs factorised layers as two thin convolutions.
FactorConv2d conv(int64_t in, int64_t out, int64_t k, int64_t pad) {
  return FactorConv2d(torch::nn::Conv2dOptions(in, out, k).padding(pad).bias(true));
}

// timm's ConvMlp with mlp_ratio 1.
class ConvMlpImpl : public torch::nn::Module {
 public:
  ConvMlpImpl(int64_t in, int64_t hidden, double drop) : drop_(drop) {
    fc1 = register_module("fc1", conv(in, hidden, kMlpKernel, 0));
    fc2 = register_module("fc2", conv(hidden, hidden, 1, 0));
  }
  torch::Tensor forward(torch::Tensor x) {
    if (x.size(-2) < kMlpKernel || x.size(-1) < kMlpKernel)
      x = torch::adaptive_avg_pool2d(x, {std::max(kMlpKernel, x.size(-2)), std::max(kMlpKernel, x.size(-1))});
    x = torch::relu(fc1->forward(x));
    x = torch::dropout(x, drop_, is_training());
    return torch::relu(fc2->forward(x));
  }
  FactorConv2d fc1{nullptr}, fc2{nullptr};

 private:
  double drop_;
};
TORCH_MODULE(ConvMlp);

class VggTimm : public Model {
 public:
  explicit VggTimm(const ModelSpec& s) : Model(s), drop_(s.dropout) {
    const double w = s.width;
    int64_t channels = scaled(kVgg16.front(), w);
    stem_ = register_module(kStemName, conv(s.in_channels, channels, 3, 1));
    features_ = torch::nn::Sequential();
    int64_t side = s.image_size;
    for (size_t i = 1; i < kVgg16.size(); ++i) {
      if (kVgg16[i] == kPool) {
        if (side < 2) continue;
        features_->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2).stride(2)));
        side /= 2;
        continue;
      }
      const int64_t out = scaled(kVgg16[i], w);
      features_->push_back(conv(channels, out, 3, 1));
      features_->push_back(torch::nn::ReLU(torch::nn::ReLUOptions(/*inplace=*/true)));
      channels = out;
    }
    register_module("features", features_);
    const int64_t hidden = scaled(kMlpWidth, w);
    pre_logits_ = register_module("pre_logits", ConvMlp(channels, hidden, drop_));
    head_ = register_module(kHeadName, torch::nn::Linear(hidden, s.classes));
    initConvNet(*this);
    torch::NoGradGuard no_grad;
    torch::nn::init::normal_(head_->weight, 0.0, 0.01);
    head_->bias.zero_();
  }

  torch::Tensor forward(torch::Tensor x) override {
    checkInput(x);
    x = torch::relu(stem_->forward(x));
    x = pre_logits_->forward(features_->forward(x));
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return head_->forward(torch::dropout(x, drop_, is_training()));
  }

 private:
  double drop_;
  FactorConv2d stem_{nullptr};
  torch::nn::Sequential features_{nullptr};
  ConvMlp pre_logits_{nullptr};
  torch::nn::Linear head_{nullptr};
};

}  // namespace

std::shared_ptr<Model> makeVgg16Timm(const ModelSpec& spec) { return std::make_shared<VggTimm>(spec); }

}  // namespace lowcomm::nn::detail
