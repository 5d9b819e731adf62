// `vgg11` / `vgg16` with BatchNorm, adapted to small images (28x28, 32x32).
//
// Layout: stem Conv3x3(C->64) -> stem_bn -> ReLU, then `features` (the remaining VGG convolutions,
// each Conv3x3(pad 1, no bias) -> BatchNorm2d -> ReLU, with the VGG max-pools), then a global
// average pool and the head Linear(512, classes).
// Adaptation: a max-pool that would shrink the map below 2x2 is skipped, so no 3x3 convolution runs
// on a 1x1 map (where only its centre tap would learn) and BatchNorm keeps >1 value per channel per
// image. 28x28 ends at 3x3 (4 pools), 32x32 at 2x2 (4 pools); the global pool then gives 512 values.
#include <torch/torch.h>

#include <vector>

#include "families.h"

namespace lowcomm::nn::detail {
namespace {

constexpr int kPool = 0;  // marks a max-pool in a layer list; other entries are conv widths

// torchvision's configurations "A" (vgg11) and "D" (vgg16).
const std::vector<int> kVgg11 = {64, kPool, 128, kPool, 256, 256, kPool, 512, 512, kPool, 512, 512, kPool};
const std::vector<int> kVgg16 = {64,  64,  kPool, 128, 128, kPool, 256, 256, 256, kPool,
                                 512, 512, 512,   kPool, 512, 512, 512, kPool};

torch::nn::Conv2d conv3x3(int64_t in, int64_t out) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(false));
}

class Vgg : public Model {
 public:
  Vgg(const ModelSpec& s, const std::vector<int>& layers) : Model(s) {
    stem_ = register_module(kStemName, conv3x3(s.in_channels, layers.front()));
    stem_bn_ = register_module("stem_bn", torch::nn::BatchNorm2d(layers.front()));
    features_ = torch::nn::Sequential();
    int64_t channels = layers.front();
    int64_t side = s.image_size;
    for (size_t i = 1; i < layers.size(); ++i) {
      if (layers[i] == kPool) {
        if (side / 2 < 2) continue;
        features_->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)));
        side /= 2;
        continue;
      }
      features_->push_back(conv3x3(channels, layers[i]));
      features_->push_back(torch::nn::BatchNorm2d(layers[i]));
      features_->push_back(torch::nn::ReLU(torch::nn::ReLUOptions(/*inplace=*/true)));
      channels = layers[i];
    }
    register_module("features", features_);
    head_ = register_module(kHeadName, torch::nn::Linear(channels, s.classes));
    initConvNet(*this);
  }

  torch::Tensor forward(torch::Tensor x) override {
    checkInput(x);
    x = torch::relu(stem_bn_->forward(stem_->forward(x)));
    x = features_->forward(x);
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return head_->forward(x);
  }

 private:
  torch::nn::Conv2d stem_{nullptr};
  torch::nn::BatchNorm2d stem_bn_{nullptr};
  torch::nn::Sequential features_{nullptr};
  torch::nn::Linear head_{nullptr};
};

}  // namespace

std::shared_ptr<Model> makeVgg11(const ModelSpec& spec) { return std::make_shared<Vgg>(spec, kVgg11); }
std::shared_ptr<Model> makeVgg16(const ModelSpec& spec) { return std::make_shared<Vgg>(spec, kVgg16); }

}  // namespace lowcomm::nn::detail
