// `resnet18`, CIFAR style: stem Conv3x3(C->64, stride 1, no bias) -> stem_bn -> ReLU (no max-pool),
// layer1..layer4 of two BasicBlocks each (64, 128/2, 256/2, 512/2 = channels/stride of the first
// block), global average pool, head Linear(512, classes). Parameter names follow torchvision
// ("layer2.0.conv1.weight", "layer2.0.downsample.0.weight") except stem/stem_bn/head.
#include <torch/torch.h>

#include <string>

#include "families.h"

namespace lowcomm::nn::detail {
namespace {

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

// out = ReLU(bn2(conv2(ReLU(bn1(conv1(x))))) + shortcut(x)); the shortcut is a 1x1 conv + BN
// (`downsample`) when the stride or the width changes, else the identity.
class BasicBlockImpl : public torch::nn::Module {
 public:
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride) {
    conv1_ = register_module("conv1", conv(in, out, 3, stride));
    bn1_ = register_module("bn1", torch::nn::BatchNorm2d(out));
    conv2_ = register_module("conv2", conv(out, out, 3, 1));
    bn2_ = register_module("bn2", torch::nn::BatchNorm2d(out));
    if (stride != 1 || in != out)
      downsample_ = register_module(
          "downsample", torch::nn::Sequential(conv(in, out, 1, stride), torch::nn::BatchNorm2d(out)));
  }

  torch::Tensor forward(torch::Tensor x) {
    auto y = torch::relu(bn1_->forward(conv1_->forward(x)));
    y = bn2_->forward(conv2_->forward(y));
    return torch::relu(y + (downsample_ ? downsample_->forward(x) : x));
  }

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  torch::nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(BasicBlock);

class ResNet18 : public Model {
 public:
  explicit ResNet18(const ModelSpec& s) : Model(s) {
    stem_ = register_module(kStemName, conv(s.in_channels, 64, 3, 1));
    stem_bn_ = register_module("stem_bn", torch::nn::BatchNorm2d(64));
    const int64_t widths[4] = {64, 128, 256, 512};
    int64_t in = 64;
    for (int i = 0; i < 4; ++i) {
      const int64_t stride = i == 0 ? 1 : 2;
      layers_[i] = register_module("layer" + std::to_string(i + 1),
                                   torch::nn::Sequential(BasicBlock(in, widths[i], stride),
                                                         BasicBlock(widths[i], widths[i], 1)));
      in = widths[i];
    }
    head_ = register_module(kHeadName, torch::nn::Linear(in, s.classes));
    initConvNet(*this);
  }

  torch::Tensor forward(torch::Tensor x) override {
    checkInput(x);
    x = torch::relu(stem_bn_->forward(stem_->forward(x)));
    for (auto& layer : layers_) x = layer->forward(x);
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return head_->forward(x);
  }

 private:
  torch::nn::Conv2d stem_{nullptr};
  torch::nn::BatchNorm2d stem_bn_{nullptr};
  torch::nn::Sequential layers_[4] = {nullptr, nullptr, nullptr, nullptr};
  torch::nn::Linear head_{nullptr};
};

}  // namespace

std::shared_ptr<Model> makeResNet18(const ModelSpec& spec) { return std::make_shared<ResNet18>(spec); }

}  // namespace lowcomm::nn::detail
