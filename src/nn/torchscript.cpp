// `torchscript`: a user's model exported from Python (torch.jit.script / torch.jit.trace, then
// torch.jit.save), trained by lowcomm. The module's parameters and buffers are registered under
// their own names ("conv1.weight", "features.0.bias") on a tree of holder modules, sharing storage
// with the script module's slots: the optimizer's in-place updates and checkpoint loads reach the
// TorchScript forward, and model_state.pt loads into the user's nn.Module with load_state_dict.
// The script's torch.nn Linear / Conv1d / Conv2d / Conv3d modules get holders that AB-training
// factorises (FactorisableLinear without a factored forward): forward() hands each one's current
// weight, A*B while factorised, to the script's `weight` slot, so the script's own code runs on it
// and autograd reaches A and B.
#include <torch/script.h>
#include <torch/torch.h>

#include <fstream>

#include "families.h"
#include "lowcomm/base/error.h"
#include "lowcomm/nn/factor_layers.h"

namespace lowcomm::nn::detail {
namespace {

struct Holder : torch::nn::Module {};

// The holder of a script Linear or ConvNd: `weight` is what the script's `weight` slot gets.
class ScriptLayer : public torch::nn::Module, public FactorisableLinear {
 public:
  explicit ScriptLayer(torch::jit::Module layer) : layer_(std::move(layer)) {}
  torch::Tensor& factorWeight() override { return weight; }
  bool canFactor() const override { return false; }
  void setFactors(torch::Tensor a, torch::Tensor b) override {
    LC_ENFORCE(!a.defined() && !b.defined(), "a TorchScript layer runs from its weight only");
  }
  // Puts `weight` into the script module's slot (the same tensor while full-rank).
  void push() {
    if (!weight.defined()) return;
    if (!layer_.attr("weight").toTensor().is_same(weight)) layer_.setattr("weight", weight);
  }
  torch::Tensor weight;

 private:
  torch::jit::Module layer_;
};

// The module types whose holders AB-training factorises, by their TorchScript qualified name
// without the "___torch_mangle_N." parts a traced or repeated class gets.
bool factorisable(const torch::jit::Module& m) {
  std::string name = m.type()->name() ? m.type()->name()->qualifiedName() : "";
  for (size_t at; (at = name.find("___torch_mangle_")) != std::string::npos;) {
    const size_t dot = name.find('.', at);
    name.erase(at, dot == std::string::npos ? std::string::npos : dot - at + 1);
  }
  static const char* kTypes[] = {"__torch__.torch.nn.modules.linear.Linear",
                                 "__torch__.torch.nn.modules.linear.NonDynamicallyQuantizableLinear",
                                 "__torch__.torch.nn.modules.conv.Conv1d", "__torch__.torch.nn.modules.conv.Conv2d",
                                 "__torch__.torch.nn.modules.conv.Conv3d"};
  for (const char* t : kTypes)
    if (name == t) return true;
  return false;
}

torch::nn::Module* childOf(torch::nn::Module& m, const std::string& name) {
  for (const auto& child : m.named_children())
    if (child.key() == name) return child.value().get();
  return nullptr;
}

// The holder module at `path` ("features.0"), made on the way.
torch::nn::Module& holderAt(torch::nn::Module& root, const std::vector<std::string>& parts) {
  torch::nn::Module* cur = &root;
  for (const auto& part : parts) {
    torch::nn::Module* next = childOf(*cur, part);
    if (!next) next = cur->register_module(part, std::make_shared<Holder>()).get();
    cur = next;
  }
  return *cur;
}

std::vector<std::string> split(const std::string& name) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t dot; (dot = name.find('.', start)) != std::string::npos; start = dot + 1)
    parts.push_back(name.substr(start, dot - start));
  parts.push_back(name.substr(start));
  return parts;
}

class ScriptModel : public Model {
 public:
  explicit ScriptModel(const ModelSpec& spec) : Model(spec) {
    if (spec.path.empty()) throw ConfigError("model.path: model.name = \"torchscript\" needs the module file (torch.jit.save)");
    if (!std::ifstream(spec.path).good())
      throw ConfigError("model.path: cannot read TorchScript module '" + spec.path + "'");
    try {
      script_ = torch::jit::load(spec.path);
    } catch (const c10::Error& e) {
      const std::string what = e.what_without_backtrace();
      throw ConfigError("model.path: '" + spec.path + "' is not a TorchScript module (torch.jit.save): " +
                        what.substr(0, what.find('\n')));
    }
    if (!script_.find_method("forward"))
      throw ConfigError("model.path: the TorchScript module '" + spec.path + "' has no forward()");
    // Every submodule's holder first, in the script's order (so the holders' children and
    // parameters come in the script's order too).
    for (const auto& m : script_.named_modules()) {
      if (m.name.empty()) continue;
      auto parts = split(m.name);
      const std::string leaf = parts.back();
      parts.pop_back();
      auto& parent = holderAt(*this, parts);
      if (!factorisable(m.value)) {
        holderAt(parent, {leaf});
        continue;
      }
      auto layer = std::make_shared<ScriptLayer>(m.value);
      parent.register_module(leaf, layer);
      layers_.push_back(layer.get());
    }
    for (const auto& p : script_.named_parameters(/*recurse=*/true)) {
      auto parts = split(p.name);
      const std::string leaf = parts.back();
      parts.pop_back();
      auto& holder = holderAt(*this, parts);
      auto t = holder.register_parameter(leaf, p.value, p.value.requires_grad());
      if (auto* layer = dynamic_cast<ScriptLayer*>(&holder); layer && leaf == "weight") layer->weight = t;
    }
    for (const auto& b : script_.named_buffers(/*recurse=*/true)) {
      auto parts = split(b.name);
      const std::string leaf = parts.back();
      parts.pop_back();
      holderAt(*this, parts).register_buffer(leaf, b.value);
    }
    if (parameters().empty()) throw ConfigError("model.path: the TorchScript module '" + spec.path + "' has no parameters");
  }

  torch::Tensor forward(torch::Tensor x) override {
    checkInput(x);
    for (auto* layer : layers_) layer->push();
    auto out = script_.forward({x});
    LC_ENFORCE(out.isTensor(), "model.path: the TorchScript module's forward must return one tensor (the logits), got ",
               out.tagKind());
    auto logits = out.toTensor();
    LC_ENFORCE(logits.dim() == 2 && logits.size(0) == x.size(0) && logits.size(1) == spec().classes,
               "model.path: the TorchScript module must return logits [B, ", spec().classes, "] for ", x.size(0),
               " inputs, got ", logits.sizes());
    return logits;
  }

  void train(bool on) override {
    Model::train(on);
    script_.train(on);
  }

 private:
  torch::jit::Module script_;
  std::vector<ScriptLayer*> layers_;  // owned by the holder tree
};

}  // namespace

std::shared_ptr<Model> makeTorchScript(const ModelSpec& spec) { return std::make_shared<ScriptModel>(spec); }

}  // namespace lowcomm::nn::detail
