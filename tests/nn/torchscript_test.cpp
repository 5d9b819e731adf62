// model.name = "torchscript" under AB-training (nn::LowRankModel): a TorchScript module built here
// with the C++ jit API (torch.nn's qualified type names, one of them mangled as a traced or
// repeated class is) and saved with torch.jit.save's format. Its Linear/Conv layers are
// factorised, "stem"/"head" stand for its first and last ones, the script's own forward runs on
// A*B (the same logits as the script with W = A*B loaded), gradients reach only the trained
// factor, and merge() hands the merged weight back to the script.
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "lowcomm/nn/low_rank.h"
#include "lowcomm/nn/models.h"

namespace lowcomm::nn {
namespace {

torch::jit::Module layer(const std::string& type, const std::shared_ptr<torch::jit::CompilationUnit>& cu,
                         std::vector<int64_t> shape, const std::string& forward, bool mangle = false) {
  torch::jit::Module m("__torch__.torch.nn.modules." + type, cu, mangle);
  m.register_parameter("weight", (torch::randn(shape) * 0.2).requires_grad_(), false);
  m.register_parameter("bias", (torch::randn({shape[0]}) * 0.1).requires_grad_(), false);
  m.define("def forward(self, x):\n  return " + forward + "\n");
  return m;
}

// conv1 (stem) -> conv2 -> a custom Scale module with a 2-D parameter (not factorised) -> fc1 ->
// fc2 (head). A type's second class gets a mangled name, as in a traced module. Input
// [B, 1, 8, 8], 10 classes.
std::string saveNet() {
  torch::manual_seed(3);
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  torch::jit::Module net("__torch__.Net", cu);
  net.register_module("conv1", layer("conv.Conv2d", cu, {4, 1, 3, 3}, "torch.conv2d(x, self.weight, self.bias, [1, 1], [1, 1])"));
  net.register_module("conv2", layer("conv.Conv2d", cu, {6, 4, 3, 3}, "torch.conv2d(x, self.weight, self.bias, [2, 2], [1, 1])",
                                     /*mangle=*/true));
  torch::jit::Module scale("__torch__.Scale", cu);
  scale.register_parameter("weight", torch::ones({6, 16}, torch::requires_grad()), false);
  scale.define("def forward(self, x):\n  return x * self.weight.view(1, 6, 4, 4)\n");
  net.register_module("scale", scale);
  net.register_module("fc1", layer("linear.Linear", cu, {12, 96}, "torch.linear(x, self.weight, self.bias)"));
  net.register_module("fc2", layer("linear.Linear", cu, {10, 12}, "torch.linear(x, self.weight, self.bias)",
                                   /*mangle=*/true));
  net.define(R"(
def forward(self, x):
  h = torch.relu(self.conv2.forward(torch.relu(self.conv1.forward(x))))
  h = torch.flatten(self.scale.forward(h), 1)
  return self.fc2.forward(torch.relu(self.fc1.forward(h)))
)");
  const std::string path = ::testing::TempDir() + "lowcomm_net.pt";
  net.save(path);
  return path;
}

std::shared_ptr<Model> load(const std::string& path) {
  ModelSpec s;
  s.name = "torchscript";
  s.in_channels = 1;
  s.image_size = 8;
  s.classes = 10;
  s.path = path;
  return makeModel(s);
}

// The logits of a fresh copy of the script whose factorised layers' weights are lr's A*B.
torch::Tensor withProducts(const std::string& path, LowRankModel& lr, const torch::Tensor& x) {
  auto ref = load(path);
  torch::NoGradGuard no_grad;
  auto params = ref->named_parameters();
  for (const auto& p : lr.model().named_parameters())
    if (params.contains(p.key())) params[p.key()].copy_(p.value());
  for (size_t i = 0; i < lr.layers().size(); ++i)
    params[lr.layers()[i].name + ".weight"].copy_(lr.matrix(i).view(lr.layers()[i].shape));
  return ref->forward(x);
}

TEST(TorchScript, AbTrainingFactorisesTheScriptsLinearAndConvLayers) {
  const auto path = saveNet();
  LowRankModel lr(load(path));
  std::vector<std::string> names;
  for (const auto& l : lr.layers()) names.push_back(l.name);
  EXPECT_EQ(names, (std::vector<std::string>{"conv2", "fc1"}));
  EXPECT_EQ(lr.fullRankLayers(), (std::vector<std::string>{"conv1", "fc2"}));
  EXPECT_EQ(lr.layers()[0].rows, 6);
  EXPECT_EQ(lr.layers()[0].cols, 36);

  torch::manual_seed(1);
  const auto x = torch::randn({5, 1, 8, 8});
  lr.model().train(false);
  const auto y_full = lr.forward(x).detach();

  // An untruncated SVD reproduces W: the same logits.
  lr.factorise(lr.fullRanks(), Factor::B);
  auto params = lr.model().named_parameters();
  EXPECT_TRUE(params.contains("conv2.A") && params.contains("conv2.B") && !params.contains("conv2.weight"));
  EXPECT_TRUE(torch::allclose(lr.forward(x), y_full, 1e-4, 1e-5));

  // Truncated: the script runs on A*B (rank 2 is far from W, so this is not vacuous).
  lr.factorise({2, 2}, Factor::B);
  const auto y = lr.forward(x);
  EXPECT_GT((y - y_full).abs().max().item<float>(), 1e-3);
  EXPECT_TRUE(torch::allclose(y.detach(), withProducts(path, lr, x), 1e-4, 1e-5));

  // Gradients reach the trained factor B through the script's own forward; A is frozen.
  y.sum().backward();
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(lr.factorB(i).grad().defined()) << lr.layers()[i].name;
    EXPECT_GT(lr.factorB(i).grad().abs().sum().item<float>(), 0) << lr.layers()[i].name;
    EXPECT_FALSE(lr.factorA(i).grad().defined()) << lr.layers()[i].name;
  }
  EXPECT_TRUE(lr.model().named_parameters()["fc2.weight"].grad().defined());

  // Merged: a full-rank `weight` again, and the one the script reads.
  const auto y_trunc = lr.forward(x).detach();
  lr.merge();
  params = lr.model().named_parameters();
  ASSERT_TRUE(params.contains("fc1.weight") && !params.contains("fc1.A"));
  EXPECT_TRUE(torch::allclose(lr.forward(x).detach(), y_trunc, 1e-4, 1e-5));
  {
    torch::NoGradGuard no_grad;
    params["fc1.weight"].zero_();
  }
  const auto y_zero = lr.forward(x).detach();
  EXPECT_TRUE(torch::allclose(y_zero, y_zero[0].expand_as(y_zero)));  // fc1 gives its bias only: same logits
}

}  // namespace
}  // namespace lowcomm::nn
