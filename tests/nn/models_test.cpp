#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <string>
#include <tuple>
#include <vector>

#include "lowcomm/base/error.h"
#include "lowcomm/nn/models.h"

namespace lowcomm::nn {
namespace {

struct InputKind {
  const char* label;
  int channels;
  int size;
};
const InputKind kMnist{"28x28x1", 1, 28};
const InputKind kCifar{"32x32x3", 3, 32};

ModelSpec specFor(const std::string& name, const InputKind& in) {
  ModelSpec s;
  s.name = name;
  s.in_channels = in.channels;
  s.image_size = in.size;
  s.classes = 10;
  return s;
}

std::vector<std::string> names(const Model& m) {
  std::vector<std::string> out;
  for (const auto& p : m.named_parameters()) out.push_back(p.key());
  return out;
}

bool startsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

TEST(Models, NamesAreFixed) {
  EXPECT_EQ(modelNames(), (std::vector<std::string>{"mlp", "cnn", "vgg11", "vgg16", "resnet18", "vit-tiny",
                                                "vgg16_timm", "gpt", "torchscript"}));
}

// The built-in image classifiers (`gpt`, the language model, has its own tests: gpt_test.cpp;
// `torchscript` loads a user's module: tests/python/test_torchscript.py).
std::vector<std::string> imageModelNames() {
  auto n = modelNames();
  n.erase(std::remove(n.begin(), n.end(), "gpt"), n.end());
  n.erase(std::remove(n.begin(), n.end(), "torchscript"), n.end());
  return n;
}

class EveryModel : public ::testing::TestWithParam<std::tuple<std::string, bool>> {
 protected:
  ModelSpec spec() const {
    return specFor(std::get<0>(GetParam()), std::get<1>(GetParam()) ? kCifar : kMnist);
  }
};

TEST_P(EveryModel, LogitsAndGradientsForEveryParameter) {
  torch::manual_seed(0);
  const ModelSpec s = spec();
  auto model = makeModel(s);
  std::cout << "[ params ] " << s.name << " " << s.in_channels << "x" << s.image_size << "x" << s.image_size
            << ": " << parameterCount(*model) << "\n";
  model->train();
  auto x = torch::randn({2, s.in_channels, s.image_size, s.image_size});
  auto logits = model->forward(x);
  ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{2, 10}));
  torch::nn::functional::cross_entropy(logits, torch::tensor({3, 7})).backward();
  for (const auto& p : model->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_TRUE(torch::isfinite(p.value().grad()).all().item<bool>()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key() << " has an all-zero gradient";
  }
}

TEST_P(EveryModel, StemAndHeadAreNamedChildren) {
  const ModelSpec s = spec();
  auto model = makeModel(s);
  const auto children = model->named_children();
  ASSERT_TRUE(children.contains(firstLayerName(*model)));
  ASSERT_TRUE(children.contains(headLayerName(*model)));
  const auto& stem = children[firstLayerName(*model)];
  EXPECT_TRUE(stem->as<torch::nn::Conv2d>() || stem->as<torch::nn::Linear>());
  auto* head = children[headLayerName(*model)]->as<torch::nn::Linear>();
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->options.out_features(), s.classes);
  // Registration follows forward order: the stem's weight comes first, the head's last.
  const auto n = names(*model);
  EXPECT_EQ(n.front(), "stem.weight");
  EXPECT_TRUE(startsWith(n.back(), "head."));
}

TEST_P(EveryModel, NamesAndInitialValuesAreDeterministic) {
  torch::manual_seed(42);
  auto a = makeModel(spec());
  torch::manual_seed(42);
  auto b = makeModel(spec());
  torch::manual_seed(43);
  auto c = makeModel(spec());
  ASSERT_EQ(names(*a), names(*b));
  const auto pa = a->named_parameters(), pb = b->named_parameters(), pc = c->named_parameters();
  bool any_differs = false;
  for (const auto& p : pa) {
    EXPECT_TRUE(torch::equal(p.value(), pb[p.key()])) << p.key();
    any_differs = any_differs || !torch::equal(p.value(), pc[p.key()]);
  }
  EXPECT_TRUE(any_differs) << "another seed gave identical parameters";
}

TEST_P(EveryModel, EvalModeAcceptsBatchOfOneAndRejectsWrongShape) {
  const ModelSpec s = spec();
  auto model = makeModel(s);
  model->eval();
  torch::NoGradGuard no_grad;
  EXPECT_EQ(model->forward(torch::zeros({1, s.in_channels, s.image_size, s.image_size})).sizes(),
            (std::vector<int64_t>{1, 10}));
  EXPECT_THROW(model->forward(torch::zeros({1, s.in_channels + 1, s.image_size, s.image_size})), Error);
  EXPECT_THROW(model->forward(torch::zeros({s.in_channels, s.image_size, s.image_size})), Error);
}

INSTANTIATE_TEST_SUITE_P(Nn, EveryModel,
                         ::testing::Combine(::testing::ValuesIn(imageModelNames()), ::testing::Bool()),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param);
                           for (auto& ch : n)
                             if (ch == '-') ch = '_';
                           return n + (std::get<1>(info.param) ? "_32x32x3" : "_28x28x1");
                         });

TEST(Models, ParameterCounts) {
  EXPECT_EQ(parameterCount(*makeModel(specFor("cnn", kMnist))), 824458);  // the classic 2-conv CNN
  EXPECT_EQ(parameterCount(*makeModel(specFor("mlp", kMnist))), 535818);
  // Within a few percent of the published sizes (different stem/head shapes).
  auto near = [](int64_t n, double ref) { return n > 0.95 * ref && n < 1.05 * ref; };
  EXPECT_TRUE(near(parameterCount(*makeModel(specFor("resnet18", kCifar))), 11.17e6));
  EXPECT_TRUE(near(parameterCount(*makeModel(specFor("vgg16", kCifar))), 14.73e6));
  EXPECT_TRUE(near(parameterCount(*makeModel(specFor("vit-tiny", kCifar))), 5.4e6));
}

// timm's vgg16 (pre_logits ConvMlp head) on CIFAR-10 shapes: the AB-training reference's model.
TEST(Models, Vgg16TimmMatchesTimmCount) {
  EXPECT_EQ(parameterCount(*makeModel(specFor("vgg16_timm", kCifar))), 134301514);
  auto s = specFor("vgg16_timm", kCifar);
  s.width = 0.125;
  auto m = makeModel(s);
  const auto p = m->named_parameters();
  EXPECT_EQ(p["stem.weight"].sizes(), (std::vector<int64_t>{8, 3, 3, 3}));
  EXPECT_EQ(p["pre_logits.fc1.weight"].sizes(), (std::vector<int64_t>{512, 64, 7, 7}));
  EXPECT_EQ(p["pre_logits.fc2.weight"].sizes(), (std::vector<int64_t>{512, 512, 1, 1}));
  EXPECT_EQ(p["head.weight"].sizes(), (std::vector<int64_t>{10, 512}));
  // 13 convs with biases + fc1 + fc2 + head.
  int convs = 0;
  for (const auto& kv : p)
    if (kv.value().dim() == 4) ++convs;
  EXPECT_EQ(convs, 15);
}

TEST(Models, WidthAndDropoutOnlyWhereTheModelHasThem) {
  auto s = specFor("cnn", kMnist);
  s.width = 0.5;
  try {
    makeModel(s);
    FAIL() << "width on cnn accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.width"), std::string::npos) << e.what();
  }
  s = specFor("vgg16_timm", kMnist);
  s.width = 0;
  EXPECT_THROW(makeModel(s), ConfigError);
  s.width = 0.125;
  s.dropout = 1.0;
  EXPECT_THROW(makeModel(s), ConfigError);
  s.dropout = 0.5;  // dropout changes training outputs, not eval ones
  auto m = makeModel(s);
  auto x = torch::randn({4, 1, 28, 28});
  m->eval();
  EXPECT_TRUE(torch::equal(m->forward(x), m->forward(x)));
  m->train();
  EXPECT_FALSE(torch::equal(m->forward(x), m->forward(x)));
}

TEST(Models, OrthoSigmaSetsEverySingularValueToOne) {
  auto s = specFor("vgg16_timm", kMnist);
  s.width = 0.125;
  torch::manual_seed(1);
  auto plain = makeModel(s);
  s.init = "ortho-sigma";
  torch::manual_seed(1);
  auto ortho = makeModel(s);
  const auto pp = plain->named_parameters();
  int checked = 0;
  for (const auto& p : ortho->named_parameters()) {
    const auto& w = p.value();
    if (w.dim() < 2) {
      EXPECT_TRUE(torch::equal(w, pp[p.key()])) << p.key() << ": 1-D parameters keep their init";
      continue;
    }
    const auto sv = torch::linalg::svdvals(w.reshape({w.size(0), -1}), c10::nullopt);
    EXPECT_TRUE(torch::allclose(sv, torch::ones_like(sv), 1e-4, 1e-4)) << p.key() << ": " << sv.min().item<double>()
                                                                     << " .. " << sv.max().item<double>();
    // The singular vectors are the default init's: W = U Vh of the same matrix.
    const auto m = pp[p.key()].reshape({w.size(0), -1});
    auto [u, sd, vh] = torch::linalg::svd(m, false, c10::nullopt);
    EXPECT_TRUE(torch::allclose(u.mm(vh), w.reshape({w.size(0), -1}), 1e-4, 1e-5)) << p.key();
    ++checked;
  }
  EXPECT_EQ(checked, 16);
  s.init = "xavier";
  try {
    makeModel(s);
    FAIL() << "unknown init accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.init"), std::string::npos) << e.what();
  }
}

TEST(Models, VitPatchAndDepth) {
  ModelSpec s = specFor("vit-tiny", kCifar);  // auto patch: 4 -> 8x8 patches + cls
  auto m = makeModel(s);
  EXPECT_EQ(m->named_parameters()["embed.pos_embed"].sizes(), (std::vector<int64_t>{1, 65, 192}));
  s = specFor("vit-tiny", kMnist);  // auto patch: 7 -> 4x4 patches + cls
  s.vit_depth = 2;
  m = makeModel(s);
  EXPECT_EQ(m->named_parameters()["embed.pos_embed"].sizes(), (std::vector<int64_t>{1, 17, 192}));
  EXPECT_TRUE(m->named_parameters().contains("blocks.1.attn.qkv.weight"));
  EXPECT_FALSE(m->named_parameters().contains("blocks.2.attn.qkv.weight"));
  s.vit_patch = 4;
  EXPECT_EQ(makeModel(s)->named_parameters()["embed.pos_embed"].size(1), 50);
}

void expectConfigError(const ModelSpec& s, const std::vector<std::string>& fragments) {
  try {
    makeModel(s);
    ADD_FAILURE() << "no ConfigError for model '" << s.name << "'";
  } catch (const ConfigError& e) {
    for (const auto& f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << "'" << f << "' not in: " << e.what();
  }
}

// The module file's problems are ConfigErrors naming model.path (a real module is trained and
// loaded back in Python: tests/python/test_torchscript.py).
TEST(Models, TorchScriptNeedsAReadableModule) {
  ModelSpec s = specFor("torchscript", kMnist);
  expectConfigError(s, {"model.path", "torch.jit.save"});
  s.path = "/nonexistent/net.pt";
  expectConfigError(s, {"model.path", "cannot read", "/nonexistent/net.pt"});
  const std::string junk = ::testing::TempDir() + "not_a_module.pt";
  { std::ofstream(junk) << "not a zip archive"; }
  s.path = junk;
  expectConfigError(s, {"model.path", "not a TorchScript module"});
}

TEST(Models, BadSpecsThrowConfigError) {
  expectConfigError(specFor("resnet50", kMnist), {"model.name", "resnet50", "mlp", "vit-tiny"});
  ModelSpec s = specFor("vit-tiny", kMnist);
  s.vit_patch = 5;
  expectConfigError(s, {"model.vit_patch", "5", "28"});
  s = specFor("vit-tiny", kCifar);
  s.vit_patch = 7;
  expectConfigError(s, {"model.vit_patch", "32"});
  s = specFor("vit-tiny", kMnist);
  s.vit_depth = 0;
  expectConfigError(s, {"model.vit_depth"});
  s = specFor("vit-tiny", kMnist);
  s.image_size = 30;  // neither 7 nor 4 divides it
  expectConfigError(s, {"model.vit_patch"});
  s = specFor("cnn", kMnist);
  s.in_channels = 0;
  expectConfigError(s, {"model.in_channels"});
  s = specFor("cnn", kMnist);
  s.classes = 0;
  expectConfigError(s, {"model.classes"});
  s = specFor("cnn", kMnist);
  s.image_size = 2;
  expectConfigError(s, {"model.image_size"});
}

}  // namespace
}  // namespace lowcomm::nn
