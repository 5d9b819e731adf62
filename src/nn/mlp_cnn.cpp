// `mlp` and `cnn`: the small baselines. Both keep torch's default initialisation.
#include <torch/torch.h>

#include "families.h"
#include "lowcomm/nn/factor_layers.h"

namespace lowcomm::nn::detail {
namespace {

// Flatten -> stem Linear(C*S*S, 512) -> ReLU -> hidden Linear(512, 256) -> ReLU -> head.
class Mlp : public Model {
 public:
  explicit Mlp(const ModelSpec& s) : Model(s) {
    const int64_t in = int64_t{s.in_channels} * s.image_size * s.image_size;
    stem_ = register_module(kStemName, torch::nn::Linear(in, 512));
    hidden_ = register_module("hidden", FactorLinear(512, 256));
    head_ = register_module(kHeadName, torch::nn::Linear(256, s.classes));
  }

  torch::Tensor forward(torch::Tensor x) override {
    checkInput(x);
    x = torch::relu(stem_->forward(x.flatten(1)));
    x = torch::relu(hidden_->forward(x));
    return head_->forward(x);
  }

 private:
  torch::nn::Linear stem_{nullptr}, head_{nullptr};
  FactorLinear hidden_{nullptr};  // AB-training factorises it (factored forward)
};

// The classic 2-conv network: stem Conv(C->32, 3x3, pad 1) -> ReLU -> MaxPool2 ->
// conv2 Conv(32->64, 3x3, pad 1) -> ReLU -> MaxPool2 -> fc Linear(64*(S/4)^2, 256) -> ReLU -> head.
// 824,458 parameters for 28x28x1 / 10 classes (tests/nn/models_test.cpp checks it).
class Cnn : public Model {
 public:
  explicit Cnn(const ModelSpec& s) : Model(s) {
    const int64_t side = s.image_size / 4;  // two floor-halving max-pools
    stem_ = register_module(kStemName, torch::nn::Conv2d(
                                           torch::nn::Conv2dOptions(s.in_channels, 32, 3).padding(1)));
    conv2_ = register_module("conv2", FactorConv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)));
    fc_ = register_module("fc", FactorLinear(64 * side * side, 256));
    head_ = register_module(kHeadName, torch::nn::Linear(256, s.classes));
  }

  torch::Tensor forward(torch::Tensor x) override {
    checkInput(x);
    x = torch::max_pool2d(torch::relu(stem_->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2_->forward(x)), 2);
    x = torch::relu(fc_->forward(x.flatten(1)));
    return head_->forward(x);
  }

 private:
  torch::nn::Conv2d stem_{nullptr};
  FactorConv2d conv2_{nullptr};  // AB-training factorises these two (factored forward)
  FactorLinear fc_{nullptr};
  torch::nn::Linear head_{nullptr};
};

}  // namespace

std::shared_ptr<Model> makeMlp(const ModelSpec& spec) { return std::make_shared<Mlp>(spec); }
std::shared_ptr<Model> makeCnn(const ModelSpec& spec) { return std::make_shared<Cnn>(spec); }

}  // namespace lowcomm::nn::detail
