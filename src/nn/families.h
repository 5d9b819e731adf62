// Per-family factories used by the registry (private to lowcomm_nn).
//
// Each factory receives a spec that already passed the generic checks in registry.cpp
// (in_channels >= 1, image_size >= 4, classes >= 1) and throws ConfigError for family-specific
// impossible combinations.
#pragma once

#include <memory>

#include "lowcomm/nn/models.h"

namespace lowcomm::nn::detail {

std::shared_ptr<Model> makeMlp(const ModelSpec& spec);
std::shared_ptr<Model> makeCnn(const ModelSpec& spec);
std::shared_ptr<Model> makeVgg11(const ModelSpec& spec);
std::shared_ptr<Model> makeVgg16(const ModelSpec& spec);
std::shared_ptr<Model> makeResNet18(const ModelSpec& spec);
std::shared_ptr<Model> makeVitTiny(const ModelSpec& spec);
std::shared_ptr<Model> makeVgg16Timm(const ModelSpec& spec);
std::shared_ptr<Model> makeGpt(const ModelSpec& spec);
std::shared_ptr<Model> makeTorchScript(const ModelSpec& spec);  // spec.path: a torch.jit.save file

// He-normal (fan_out, ReLU) for every Conv2d below `root` (root itself is skipped so this works
// inside a constructor, before a shared_ptr owns it), BatchNorm weight 1 / bias 0, as in
// torchvision's VGG and ResNet; Linear layers keep torch's default init.
void initConvNet(torch::nn::Module& root);

}  // namespace lowcomm::nn::detail
