#include <torch/torch.h>

#include <utility>

#include "families.h"
#include "lowcomm/base/error.h"
#include "lowcomm/nn/models.h"

namespace lowcomm::nn {
namespace {

using Factory = std::shared_ptr<Model> (*)(const ModelSpec&);

struct Entry {
  const char* name;
  Factory make;
};

// name -> factory; order is the order modelNames() reports.
constexpr Entry kRegistry[] = {
    {"mlp", detail::makeMlp},           {"cnn", detail::makeCnn},
    {"vgg11", detail::makeVgg11},       {"vgg16", detail::makeVgg16},
    {"resnet18", detail::makeResNet18}, {"vit-tiny", detail::makeVitTiny},
    {"vgg16_timm", detail::makeVgg16Timm}, {"gpt", detail::makeGpt},
    {"torchscript", detail::makeTorchScript},
};

std::string joinedNames() {
  std::string out;
  for (const auto& e : kRegistry) out += (out.empty() ? "" : ", ") + std::string(e.name);
  return out;
}

}  // namespace

Model::Model(ModelSpec spec) : spec_(std::move(spec)) {}

std::vector<std::string> Model::modulePaths() const {
  std::vector<std::string> out;
  for (const auto& m : named_modules("", /*include_self=*/false)) out.push_back(m.key());
  return out;
}

void Model::checkInput(const torch::Tensor& x) const {
  const bool ok = x.dim() == 4 && x.size(1) == spec_.in_channels && x.size(2) == spec_.image_size &&
                  x.size(3) == spec_.image_size;
  LC_ENFORCE(ok, "model '", spec_.name, "' expects input [B, ", spec_.in_channels, ", ",
             spec_.image_size, ", ", spec_.image_size, "], got ", x.sizes());
}

std::shared_ptr<Model> makeModel(const ModelSpec& spec) {
  const Entry* found = nullptr;
  for (const auto& e : kRegistry)
    if (spec.name == e.name) found = &e;
  if (!found)
    throw ConfigError("model.name: unknown model '" + spec.name + "'; valid values: " + joinedNames());
  if (spec.in_channels < 1)
    throw ConfigError("model.in_channels: must be >= 1, got " + std::to_string(spec.in_channels));
  if (spec.image_size < 4)
    throw ConfigError("model.image_size: must be >= 4, got " + std::to_string(spec.image_size));
  if (spec.classes < 1)
    throw ConfigError("model.classes: must be >= 1, got " + std::to_string(spec.classes));
  if (!(spec.width > 0 && spec.width <= 4))
    throw ConfigError("model.width: must be in (0, 4], got " + std::to_string(spec.width));
  if (spec.width != 1.0 && spec.name != "vgg16_timm")
    throw ConfigError("model.width: only vgg16_timm scales with a width; model '" + spec.name + "' needs 1");
  if (!(spec.dropout >= 0 && spec.dropout < 1))
    throw ConfigError("model.dropout: must be in [0, 1), got " + std::to_string(spec.dropout));
  if (spec.dropout != 0.0 && spec.name != "vgg16_timm")
    throw ConfigError("model.dropout: only vgg16_timm has dropout layers; model '" + spec.name + "' needs 0");
  auto model = found->make(spec);
  applyInit(*model, spec.init);
  return model;
}

std::vector<std::string> initNames() { return {"default", "ortho-sigma"}; }

void applyInit(Model& model, const std::string& init) {
  if (init == "default") return;
  if (init != "ortho-sigma") throw ConfigError("model.init: unknown init '" + init + "'; valid values: default, ortho-sigma");
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) {
    if (p.dim() < 2) continue;
    const auto m = p.reshape({p.size(0), -1});
    auto [u, s, vh] = torch::linalg::svd(m, /*full_matrices=*/false, c10::nullopt);
    p.copy_(u.mm(vh).view(p.sizes()));
  }
}

std::vector<std::string> modelNames() {
  std::vector<std::string> names;
  for (const auto& e : kRegistry) names.emplace_back(e.name);
  return names;
}

int64_t parameterCount(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

std::string firstLayerName(const Model&) { return kStemName; }
std::string headLayerName(const Model&) { return kHeadName; }

namespace detail {

void initConvNet(torch::nn::Module& root) {
  torch::NoGradGuard no_grad;
  for (const auto& m : root.modules(/*include_self=*/false)) {
    if (auto* conv = m->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
      if (conv->bias.defined()) conv->bias.zero_();
    } else if (auto* bn = m->as<torch::nn::BatchNorm2d>()) {
      bn->weight.fill_(1.0);
      bn->bias.zero_();
    }
  }
}

}  // namespace detail
}  // namespace lowcomm::nn
