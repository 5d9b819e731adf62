// Models built by name from the config (`model.*` keys): image classifiers, `gpt` (a byte-level
// decoder language model) and `torchscript` (a user's image classifier exported from Python, its
// parameters under their own names: the stem/head convention below does not apply to it).
//
// Naming contract (the data-parallel strategy fingerprints parameter names/shapes across ranks and
// buckets gradients in reverse registration order; the low-rank layer keeps the first and the last
// layer full rank):
//  - every model registers its first layer (a Conv2d, a Linear for `mlp`, the token Embedding for
//    `gpt`) as the child module `stem` and its classifier (a Linear producing the logits; for a
//    tied `gpt`, a module without parameters that reuses the stem's weight) as the child module
//    `head`;
//  - submodules are registered in forward order, so named_parameters() is hierarchical
//    ("features.0.weight", "layer2.1.conv1.weight", "blocks.3.attn.qkv.weight", "head.bias"),
//    deterministic, and identical on every construction with the same spec;
//  - initial values depend only on the spec and torch's global generator (torch::manual_seed).
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lowcomm::nn {

inline constexpr const char* kStemName = "stem";
inline constexpr const char* kHeadName = "head";

// What to build. Inputs are square images [B, in_channels, image_size, image_size], or for `gpt`
// int64 tokens [B, T] with T <= seq_len.
struct ModelSpec {
  std::string name;      // one of modelNames()
  int in_channels = 1;   // >= 1
  int image_size = 28;   // >= 4; vit-tiny: divisible by the patch size
  int classes = 10;      // >= 1
  int vit_patch = 0;     // vit-tiny patch size; 0 = auto: 7 if it divides image_size, else 4
  int vit_depth = 12;    // vit-tiny transformer blocks (12 = standard ViT-Tiny; fewer for CPU speed)
  double width = 1.0;    // vgg16_timm: channel multiplier (> 0); other models accept only 1
  double dropout = 0.0;  // vgg16_timm: dropout in pre_logits and before the head, [0, 1)
  std::string init = "default";  // "default" (the family's own) | "ortho-sigma" (see applyInit)
  // gpt: blocks, model width, attention heads (dividing dim), the longest sequence (position
  // embeddings), and whether the head reuses the token embedding's weight. Its vocabulary is `classes`.
  int layers = 4;
  int dim = 128;
  int heads = 4;
  int seq_len = 128;
  bool tied = false;
  // torchscript: the module file written by torch.jit.save (a scripted or traced nn.Module whose
  // forward maps the images to logits [B, classes]).
  std::string path{};
};

// A classifier. forward(x) takes float [B, in_channels, image_size, image_size] and returns logits
// [B, classes]; any other input shape throws lowcomm::Error naming the expected shape. `gpt` takes
// int64 tokens [B, T] (T <= seq_len) and returns next-token logits [B, T, classes], position t
// depending only on tokens 0..t (causal).
// Models with BatchNorm (vgg*, resnet18) need B >= 2 in train() mode.
class Model : public torch::nn::Module {
 public:
  explicit Model(ModelSpec spec);
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  const ModelSpec& spec() const { return spec_; }
  // The module paths of the whole model ("blocks.0.attn.qkv"), in named_modules() order: this
  // module's own, unless it is a part of the model (a pipeline stage) that overrides it.
  virtual std::vector<std::string> modulePaths() const;

 protected:
  // Throws lowcomm::Error unless x has the shape forward() accepts.
  void checkInput(const torch::Tensor& x) const;

 private:
  ModelSpec spec_;
};

// Builds spec.name. Throws lowcomm::ConfigError naming the `model.*` key and its valid values for
// an unknown name or an impossible combination (e.g. vit_patch not dividing image_size).
std::shared_ptr<Model> makeModel(const ModelSpec& spec);

// Valid values of ModelSpec::name, in a fixed order.
std::vector<std::string> modelNames();

// Re-initialises a built model: "default" leaves it alone; "ortho-sigma" (the AB-training
// reference's init) sets every singular value of every parameter with >= 2 dims to 1, viewing it
// as rows x (numel / rows): W = U diag(S) Vh becomes U Vh. Throws ConfigError naming model.init
// for another name.
void applyInit(Model& model, const std::string& init);
std::vector<std::string> initNames();  // "default", "ortho-sigma"

// Number of scalar parameters (trainable tensors; buffers such as BatchNorm statistics excluded).
int64_t parameterCount(const torch::nn::Module& module);

// Child-module names of the first layer and of the classifier head: the parameters of those layers
// are exactly the named_parameters() starting with "<name>.". Same for every model (kStemName,
// kHeadName); functions exist so callers do not hard-code the convention.
std::string firstLayerName(const Model& model);
std::string headLayerName(const Model& model);

}  // namespace lowcomm::nn
