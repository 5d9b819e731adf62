// `torchscript`: a user's model exported from Python (torch.jit.script / torch.jit.trace, then
// torch.jit.save), trained by lowcomm. The module's parameters and buffers are registered under
// their own names ("conv1.weight", "features.0.bias") on a tree of holder modules, sharing storage
// with the script module's slots: the optimizer's in-place updates and checkpoint loads reach the
// TorchScript forward, and model_state.pt loads into the user's nn.Module with load_state_dict.
#include <torch/script.h>
#include <torch/torch.h>

#include <fstream>

#include "families.h"
#include "lowcomm/base/error.h"

namespace lowcomm::nn::detail {
namespace {

struct Holder : torch::nn::Module {};

// The holder module at `path` ("features.0"), made on the way.
torch::nn::Module& holderAt(torch::nn::Module& root, const std::vector<std::string>& parts) {
  torch::nn::Module* cur = &root;
  for (const auto& part : parts) {
    torch::nn::Module* next = nullptr;
    for (const auto& child : cur->named_children())
      if (child.key() == part) next = child.value().get();
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
    for (const auto& p : script_.named_parameters(/*recurse=*/true)) {
      auto parts = split(p.name);
      const std::string leaf = parts.back();
      parts.pop_back();
      holderAt(*this, parts).register_parameter(leaf, p.value, p.value.requires_grad());
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
};

}  // namespace

std::shared_ptr<Model> makeTorchScript(const ModelSpec& spec) { return std::make_shared<ScriptModel>(spec); }

}  // namespace lowcomm::nn::detail
