// nn::LowRankModel: SVD split and reconstruction, truncation (Eckart-Young), ranksAbove on a known
// spectrum, gradients reaching only the trained factor, merge, configuration errors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "lowcomm/base/error.h"
#include "lowcomm/nn/factor_layers.h"
#include "lowcomm/nn/low_rank.h"
#include "lowcomm/nn/models.h"

namespace lowcomm::nn {
namespace {

std::shared_ptr<Model> build(const std::string& name, uint64_t seed) {
  torch::manual_seed(seed);
  ModelSpec s;
  s.name = name;
  s.in_channels = 1;
  s.image_size = 28;
  s.classes = 10;
  return makeModel(s);
}

size_t layerIndex(const LowRankModel& m, const std::string& name) {
  for (size_t i = 0; i < m.layers().size(); ++i)
    if (m.layers()[i].name == name) return i;
  ADD_FAILURE() << "no low-rank layer " << name;
  return 0;
}

std::vector<std::string> layerNames(const LowRankModel& m) {
  std::vector<std::string> out;
  for (const auto& l : m.layers()) out.push_back(l.name);
  return out;
}

torch::Tensor param(Model& m, const std::string& name) {
  auto params = m.named_parameters();
  auto* p = params.find(name);
  if (!p) {
    ADD_FAILURE() << "no parameter " << name;
    return torch::Tensor();
  }
  return *p;
}

bool hasParam(const Model& m, const std::string& name) { return m.named_parameters().contains(name); }

double maxAbs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

// The `weight` member the layer's forward reads (not necessarily a registered parameter).
torch::Tensor weightMember(Model& m, const std::string& layer) {
  auto mods = m.named_modules("", false);
  auto* mod = mods.find(layer);
  if (!mod) {
    ADD_FAILURE() << "no module " << layer;
    return torch::Tensor();
  }
  if (auto* conv = (*mod)->as<torch::nn::Conv2dImpl>()) return conv->weight;
  if (auto* lin = (*mod)->as<torch::nn::LinearImpl>()) return lin->weight;
  ADD_FAILURE() << layer << " is neither Conv2d nor Linear";
  return torch::Tensor();
}

// rows x k matrix with orthonormal columns.
torch::Tensor orthonormal(int64_t rows, int64_t k) { return std::get<0>(torch::linalg_qr(torch::randn({rows, k}))); }

// Sets the weight of `layer` (rows x cols view) to U diag(s) V^T with random orthonormal U, V.
torch::Tensor setSpectrum(Model& m, const std::string& layer, const std::vector<float>& s) {
  auto w = param(m, layer + ".weight");
  const int64_t rows = w.size(0), cols = w.numel() / rows, k = static_cast<int64_t>(s.size());
  const auto u = orthonormal(rows, k), v = orthonormal(cols, k);
  const auto mat = u.mm(torch::diag(torch::tensor(s))).mm(v.t());
  torch::NoGradGuard g;
  w.copy_(mat.view(w.sizes()));
  return mat;
}

struct Case {
  const char* model;
  const char* layer;
  std::vector<int64_t> shape;
};

class LowRankSplit : public ::testing::TestWithParam<Case> {};

TEST_P(LowRankSplit, SvdSplitReconstructsWeightAndSplitsSigma) {
  const Case c = GetParam();
  auto model = build(c.model, 3);
  LowRankModel lr(model);
  const size_t i = layerIndex(lr, c.layer);
  const auto& layer = lr.layers()[i];
  ASSERT_EQ(layer.shape, c.shape);
  const int64_t rows = c.shape[0], cols = param(*model, std::string(c.layer) + ".weight").numel() / rows;
  EXPECT_EQ(layer.rows, rows);
  EXPECT_EQ(layer.cols, cols);
  EXPECT_EQ(layer.rank, 0);
  const auto w0 = param(*model, std::string(c.layer) + ".weight").detach().reshape({rows, cols}).clone();
  const auto s = torch::linalg::svdvals(w0, c10::nullopt);
  const double smax = s[0].item<double>();

  lr.factorise(lr.fullRanks(), Factor::B);
  const int64_t r = std::min(rows, cols);
  EXPECT_EQ(lr.layers()[i].rank, r);
  const auto a = lr.factorA(i).detach(), b = lr.factorB(i).detach();
  ASSERT_EQ(a.sizes(), (std::vector<int64_t>{rows, r}));
  ASSERT_EQ(b.sizes(), (std::vector<int64_t>{r, cols}));

  // W = A B.
  EXPECT_LT(maxAbs(lr.matrix(i) - w0) / maxAbs(w0), 1e-4);
  EXPECT_LT(maxAbs(a.mm(b) - w0) / maxAbs(w0), 1e-4);
  // The layer's weight member (what forward reads) holds A*B in the full shape.
  const auto member = weightMember(*model, c.layer);
  ASSERT_EQ(member.sizes().vec(), c.shape);
  EXPECT_LT(maxAbs(member.detach().reshape({rows, cols}) - w0) / maxAbs(w0), 1e-4);

  // split_sigma: A = U sqrt(S), B = sqrt(S) Vh, so A^T A = B B^T = diag(S).
  const auto diag_s = torch::diag(s);
  EXPECT_LT(maxAbs(a.t().mm(a) - diag_s), 1e-4 * smax) << "A^T A != diag(S)";
  EXPECT_LT(maxAbs(b.mm(b.t()) - diag_s), 1e-4 * smax) << "B B^T != diag(S)";
}

INSTANTIATE_TEST_SUITE_P(Layers, LowRankSplit,
                         ::testing::Values(Case{"mlp", "hidden", {256, 512}}, Case{"cnn", "conv2", {64, 32, 3, 3}}),
                         [](const auto& info) { return std::string(info.param.model); });

TEST(LowRank, WithoutSplitSigmaTheTrainedFactorCarriesS) {
  for (Factor trained : {Factor::B, Factor::A}) {
    auto model = build("mlp", 4);
    LowRankModel lr(model, {kStemName, kHeadName}, /*split_sigma=*/false);
    EXPECT_FALSE(lr.splitSigma());
    const size_t i = layerIndex(lr, "hidden");
    const auto w0 = lr.matrix(i);
    const auto s = torch::linalg::svdvals(w0, c10::nullopt);
    lr.factorise(lr.fullRanks(), trained);
    const auto a = lr.factorA(i).detach(), b = lr.factorB(i).detach();
    const auto eye = torch::eye(256);
    EXPECT_LT(maxAbs(lr.matrix(i) - w0) / maxAbs(w0), 1e-4);
    if (trained == Factor::B) {
      EXPECT_LT(maxAbs(a.t().mm(a) - eye), 1e-4) << "A must have orthonormal columns";
      EXPECT_LT(maxAbs(b.mm(b.t()) - torch::diag(s * s)), 1e-4 * s[0].item<double>() * s[0].item<double>());
    } else {
      EXPECT_LT(maxAbs(b.mm(b.t()) - eye), 1e-4) << "B must have orthonormal rows";
      EXPECT_LT(maxAbs(a.t().mm(a) - torch::diag(s * s)), 1e-4 * s[0].item<double>() * s[0].item<double>());
    }
  }
}

TEST(LowRank, TruncationKeepsTheBestRankRApproximation) {
  auto model = build("mlp", 5);
  LowRankModel lr(model);
  EXPECT_EQ(layerNames(lr), (std::vector<std::string>{"hidden"}));
  const int64_t stem = 784 * 512 + 512, hidden = 512 * 256 + 256, head = 256 * 10 + 10;
  EXPECT_EQ(lr.fullRankParameters(), stem + hidden + head);
  EXPECT_EQ(lr.currentParameters(), stem + hidden + head);
  EXPECT_EQ(lr.fullRanks(), (std::vector<int64_t>{256}));

  const auto w0 = lr.matrix(0);
  const auto s = torch::linalg::svdvals(w0, c10::nullopt);
  for (int64_t r : {20, 100}) {
    auto m2 = build("mlp", 5);
    LowRankModel l2(m2);
    l2.factorise({r}, Factor::B);
    EXPECT_EQ(l2.layers()[0].rank, r);
    EXPECT_EQ(l2.factorA(0).sizes(), (std::vector<int64_t>{256, r}));
    EXPECT_EQ(l2.factorB(0).sizes(), (std::vector<int64_t>{r, 512}));
    const double want = s.slice(0, r).pow(2).sum().sqrt().item<double>();
    const double got = (l2.matrix(0) - w0).norm().item<double>();
    EXPECT_NEAR(got, want, 2e-3 * want) << "rank " << r;
    // The kept singular values are the top r.
    const auto kept = torch::linalg::svdvals(l2.matrix(0), c10::nullopt).slice(0, 0, r);
    EXPECT_LT(maxAbs(kept - s.slice(0, 0, r)), 1e-4 * s[0].item<double>());

    EXPECT_TRUE(hasParam(*m2, "hidden.A"));
    EXPECT_TRUE(hasParam(*m2, "hidden.B"));
    EXPECT_FALSE(hasParam(*m2, "hidden.weight"));
    EXPECT_TRUE(hasParam(*m2, "hidden.bias"));
    EXPECT_TRUE(hasParam(*m2, "stem.weight"));
    EXPECT_TRUE(hasParam(*m2, "head.weight"));
    EXPECT_EQ(l2.currentParameters(), stem + 256 + r * (256 + 512) + head);
    EXPECT_EQ(l2.currentParameters(), parameterCount(*m2));
    EXPECT_EQ(l2.fullRankParameters(), stem + hidden + head);
  }

  // From factorised state: truncating again works on A*B.
  lr.factorise({50}, Factor::A);
  lr.factorise({10}, Factor::B);
  EXPECT_EQ(lr.layers()[0].rank, 10);
  const double want = s.slice(0, 10).pow(2).sum().sqrt().item<double>();
  EXPECT_NEAR((lr.matrix(0) - w0).norm().item<double>(), want, 2e-3 * want);
  EXPECT_EQ(lr.currentParameters(), stem + 256 + 10 * 768 + head);
  EXPECT_EQ(lr.fullRankParameters(), stem + hidden + head);

  // Ranks are clamped to [1, min(rows, cols)].
  lr.factorise({0}, Factor::B);
  EXPECT_EQ(lr.layers()[0].rank, 1);
  lr.merge();
  lr.factorise({100000}, Factor::B);
  EXPECT_EQ(lr.layers()[0].rank, 256);
}

TEST(LowRank, RanksAboveCountsSingularValuesOnAKnownSpectrum) {
  auto model = build("mlp", 6);
  LowRankModel lr(model);
  torch::manual_seed(60);
  const std::vector<float> spectrum = {10, 5, 2, 1.6f, 1.4f, 1, 0.7f, 0.3f, 0.2f, 0.1f};
  const auto w = setSpectrum(*model, "hidden", spectrum);
  // Independent count from the weight we built.
  const auto sv = torch::linalg::svdvals(w, c10::nullopt);
  auto count = [&](double cutoff) { return sv.gt(cutoff * sv[0].item<double>()).sum().item<int64_t>(); };
  ASSERT_EQ(count(0.15), 4);  // > 1.5: 10, 5, 2, 1.6
  EXPECT_EQ(lr.ranksAbove(0.15), (std::vector<int64_t>{4}));
  EXPECT_EQ(lr.ranksAbove(0.04), (std::vector<int64_t>{count(0.04)}));
  EXPECT_EQ(lr.ranksAbove(0.04), (std::vector<int64_t>{7}));
  EXPECT_EQ(lr.ranksAbove(0.3), (std::vector<int64_t>{2}));
  EXPECT_EQ(lr.ranksAbove(0.9), (std::vector<int64_t>{1}));

  // Same answer from factorised state (W = A B), and truncating to it drops 1.4, 1, 0.7, ...
  lr.factorise(lr.fullRanks(), Factor::B);
  EXPECT_EQ(lr.ranksAbove(0.15), (std::vector<int64_t>{4}));
  lr.factorise(lr.ranksAbove(0.15), Factor::B);
  EXPECT_EQ(lr.layers()[0].rank, 4);
  const double dropped = std::sqrt(1.4 * 1.4 + 1 + 0.49 + 0.09 + 0.04 + 0.01);
  EXPECT_NEAR((lr.matrix(0) - w).norm().item<double>(), dropped, 1e-3);
}

// ranksAbove() keeps its SVD for the factorise() that follows, but only while the weights are
// unchanged: an in-place update in between (an optimizer step) must be seen.
TEST(LowRank, FactoriseAfterAWeightUpdateDoesNotReuseAStaleSvd) {
  auto model = build("mlp", 8);
  LowRankModel lr(model);
  const auto w0 = lr.matrix(0);
  const auto ranks = lr.ranksAbove(0.1);
  {
    torch::NoGradGuard no_grad;
    param(*model, "hidden.weight").mul_(2.0);  // what an optimizer step does: in place
  }
  lr.factorise(lr.fullRanks(), Factor::B);
  EXPECT_LT(maxAbs(lr.matrix(0) - 2.0 * w0), 1e-4);
  // From factorised state too: update B in place after ranksAbove.
  lr.ranksAbove(0.1);
  {
    torch::NoGradGuard no_grad;
    lr.factorB(0).detach().mul_(0.5);
  }
  lr.factorise(lr.fullRanks(), Factor::B);
  EXPECT_LT(maxAbs(lr.matrix(0) - w0), 1e-4);
  EXPECT_EQ(ranks.size(), 1u);
}

void clearGrads(Model& m) {
  for (auto& p : m.parameters()) p.mutable_grad() = torch::Tensor();
}

TEST(LowRank, OnlyTheTrainedFactorGetsGradients) {
  auto model = build("mlp", 7);
  LowRankModel lr(model);
  torch::manual_seed(70);
  const auto x = torch::randn({6, 1, 28, 28});
  const auto y = torch::randint(0, 10, {6}, torch::kInt64);

  // Reference: the gradient of the full-rank hidden weight on the same batch.
  torch::nn::functional::cross_entropy(lr.forward(x), y).backward();
  const auto grad_w = param(*model, "hidden.weight").grad().clone();
  ASSERT_GT(maxAbs(grad_w), 0);
  clearGrads(*model);

  lr.factorise(lr.fullRanks(), Factor::B);
  EXPECT_EQ(lr.trained(), Factor::B);
  torch::nn::functional::cross_entropy(lr.forward(x), y).backward();
  auto a = param(*model, "hidden.A"), b = param(*model, "hidden.B");
  EXPECT_FALSE(a.requires_grad());
  EXPECT_FALSE(a.grad().defined());
  ASSERT_TRUE(b.requires_grad());
  ASSERT_TRUE(b.grad().defined());
  EXPECT_GT(maxAbs(b.grad()), 0);
  // dL/dB = A^T dL/dW.
  const auto want_b = a.detach().t().mm(grad_w);
  EXPECT_LT(maxAbs(b.grad() - want_b), 1e-3 * maxAbs(want_b));
  for (const char* name : {"stem.weight", "head.weight", "hidden.bias", "stem.bias"}) {
    auto p = param(*model, name);
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_GT(maxAbs(p.grad()), 0) << name;
  }

  clearGrads(*model);
  lr.setTrained(Factor::A);
  EXPECT_EQ(lr.trained(), Factor::A);
  EXPECT_TRUE(lr.factorA(0).requires_grad());
  EXPECT_FALSE(lr.factorB(0).requires_grad());
  torch::nn::functional::cross_entropy(lr.forward(x), y).backward();
  a = param(*model, "hidden.A"), b = param(*model, "hidden.B");
  EXPECT_FALSE(b.grad().defined());
  ASSERT_TRUE(a.grad().defined());
  const auto want_a = grad_w.mm(b.detach().t());  // dL/dA = dL/dW B^T
  EXPECT_LT(maxAbs(a.grad() - want_a), 1e-3 * maxAbs(want_a));
  EXPECT_TRUE(param(*model, "stem.weight").grad().defined());
  EXPECT_TRUE(param(*model, "head.weight").grad().defined());
}

TEST(LowRank, SetTrainedNeedsAFactorisedModel) {
  auto model = build("mlp", 8);
  LowRankModel lr(model);
  EXPECT_THROW(lr.setTrained(Factor::A), Error);
}

TEST(LowRank, MergeRestoresWeightEqualToABAndKeepsTheOutput) {
  auto model = build("cnn", 9);
  LowRankModel lr(model);
  EXPECT_EQ(layerNames(lr), (std::vector<std::string>{"conv2", "fc"}));
  lr.factorise({12, 30}, Factor::A);
  {  // Move the factors away from the SVD so merge has something to carry.
    torch::NoGradGuard g;
    lr.factorA(0).add_(0.01);
    lr.factorB(1).mul_(1.5);
  }
  model->eval();
  torch::manual_seed(90);
  const auto x = torch::randn({3, 1, 28, 28});
  torch::Tensor before;
  {
    torch::NoGradGuard g;
    before = lr.forward(x).clone();
  }
  std::vector<torch::Tensor> ab;
  for (size_t i = 0; i < 2; ++i) ab.push_back(lr.factorA(i).detach().mm(lr.factorB(i).detach()));
  const auto stem_before = param(*model, "stem.weight").detach().clone();

  lr.merge();
  EXPECT_FALSE(lr.factorised());
  for (size_t i = 0; i < 2; ++i) {
    const auto& l = lr.layers()[i];
    EXPECT_EQ(l.rank, 0);
    EXPECT_FALSE(lr.factorA(i).defined());
    EXPECT_FALSE(lr.factorB(i).defined());
    EXPECT_FALSE(hasParam(*model, l.name + ".A"));
    EXPECT_FALSE(hasParam(*model, l.name + ".B"));
    const auto w = param(*model, l.name + ".weight");
    ASSERT_EQ(w.sizes().vec(), l.shape);
    EXPECT_TRUE(w.requires_grad());
    EXPECT_TRUE(torch::allclose(w.detach().reshape({l.rows, l.cols}), ab[i], 1e-6, 1e-7)) << l.name;
    // The member forward reads is the registered parameter.
    EXPECT_TRUE(weightMember(*model, l.name).is_same(w)) << l.name;
  }
  EXPECT_TRUE(torch::equal(param(*model, "stem.weight").detach(), stem_before));
  torch::NoGradGuard g;
  const auto after = model->forward(x);
  EXPECT_LT(maxAbs(after - before), 1e-5 * std::max(1.0, maxAbs(before)));
  EXPECT_LT(maxAbs(lr.forward(x) - before), 1e-5 * std::max(1.0, maxAbs(before)));
  // merge() on a full-rank model changes nothing.
  const auto w_fc = param(*model, "fc.weight").detach().clone();
  lr.merge();
  EXPECT_TRUE(torch::equal(param(*model, "fc.weight").detach(), w_fc));
}

TEST(LowRank, FullRankLayersSelectWhatIsFactorised) {
  auto model = build("cnn", 10);
  LowRankModel all(model, {});
  EXPECT_EQ(layerNames(all), (std::vector<std::string>{"stem", "conv2", "fc", "head"}));
  LowRankModel some(model, {kStemName, kHeadName, "fc"});
  EXPECT_EQ(layerNames(some), (std::vector<std::string>{"conv2"}));
}

TEST(LowRank, UnknownFullRankLayerIsAConfigError) {
  auto model = build("mlp", 11);
  try {
    LowRankModel lr(model, {kStemName, "no_such_layer"});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("ab.full_rank_layers"), std::string::npos) << msg;
    EXPECT_NE(msg.find("no_such_layer"), std::string::npos) << msg;
  }
  // A prefix of a name is not a module path.
  EXPECT_THROW((void)LowRankModel(model, {"hid"}), ConfigError);
}

}  // namespace
}  // namespace lowcomm::nn

namespace lowcomm::nn {
namespace {

// Factored forward: a truncated layer runs as two thin ops; same outputs and factor gradients as
// the materialised A*B, the weight member is not kept, merge() brings it back.
TEST(LowRank, FactoredForwardMatchesMaterialisedWeights) {
  auto thin_model = build("cnn", 11), dense_model = build("cnn", 11);
  LowRankModel thin(thin_model), dense(dense_model, {kStemName, kHeadName}, true, /*factored_forward=*/false);
  torch::manual_seed(12);
  const auto x = torch::randn({5, 1, 28, 28});
  const auto y = torch::randint(0, 10, {5}, torch::kInt64);
  // conv2 64 x 288 is thin below rank 53, fc 256 x 3136 below 236; full rank is never thin.
  // (A separate model: SVDs of W and of A*B may pick other signs for the singular vectors.)
  LowRankModel full(build("cnn", 11));
  full.factorise(full.fullRanks(), Factor::B);
  EXPECT_FALSE(full.thin(layerIndex(full, "conv2")));
  EXPECT_FALSE(full.thin(layerIndex(full, "fc")));
  full.factorise({52, 236}, Factor::B);
  EXPECT_TRUE(full.thin(0) && full.thin(1));
  full.factorise({53, 237}, Factor::B);
  EXPECT_FALSE(full.thin(0) || full.thin(1));
  for (auto f : {Factor::B, Factor::A}) {
    thin.factorise({16, 40}, f);
    dense.factorise({16, 40}, f);
    EXPECT_TRUE(thin.thin(0) && thin.thin(1));
    EXPECT_FALSE(dense.thin(0) || dense.thin(1));
    EXPECT_FALSE(weightMember(*thin_model, "conv2").defined());
    EXPECT_FALSE(weightMember(*thin_model, "fc").defined());
    const auto out_thin = thin.forward(x), out_dense = dense.forward(x);
    EXPECT_LT(maxAbs(out_thin - out_dense), 1e-4 * maxAbs(out_dense));
    torch::nn::functional::cross_entropy(out_thin, y).backward();
    torch::nn::functional::cross_entropy(out_dense, y).backward();
    for (const char* name : {"conv2", "fc"}) {
      const std::string p = std::string(name) + (f == Factor::A ? ".A" : ".B");
      const auto gt = param(*thin_model, p).grad(), gd = param(*dense_model, p).grad();
      ASSERT_TRUE(gt.defined() && gd.defined()) << p;
      EXPECT_LT(maxAbs(gt - gd), 1e-4 * maxAbs(gd)) << p;
    }
    clearGrads(*thin_model);
    clearGrads(*dense_model);
  }
  thin.merge();
  dense.merge();
  EXPECT_FALSE(thin.thin(0));
  ASSERT_TRUE(weightMember(*thin_model, "conv2").defined());
  EXPECT_LT(maxAbs(thin.forward(x) - dense.forward(x)), 1e-4);
}

TEST(LowRank, FactorConv2dKeepsStridePaddingAndDilation) {
  torch::manual_seed(13);
  FactorConv2d conv(torch::nn::Conv2dOptions(6, 10, 3).stride(2).padding(2).dilation(2));
  const auto w = conv->weight.detach().reshape({10, 54});
  auto [u, s, vh] = torch::linalg::svd(w, false, c10::nullopt);
  const auto a = u * s.unsqueeze(0), b = vh;  // full rank: exact
  const auto x = torch::randn({2, 6, 11, 11});
  const auto want = conv->forward(x);
  conv->setFactors(a, b);
  EXPECT_TRUE(conv->factored());
  EXPECT_LT(maxAbs(conv->forward(x) - want), 1e-4 * maxAbs(want));
  EXPECT_THROW(conv->setFactors(a, b.slice(1, 0, 50)), Error);
  FactorConv2d grouped(torch::nn::Conv2dOptions(6, 10, 3).groups(2));
  EXPECT_FALSE(grouped->canFactor());
}

}  // namespace
}  // namespace lowcomm::nn

namespace lowcomm::nn {
namespace {

// The reference's get_network_compression on a hand-computed model: mlp 28x28 with `hidden`
// (Linear 512 -> 256, bias) factorised at rank 10; stem and head stay full rank.
TEST(LowRank, ReferenceCompressionByHand) {
  auto model = build("mlp", 21);
  LowRankModel lr(model);
  const double stem = 784 * 512 + 512, head = 256 * 10 + 10;
  // Full rank: numerator counts the bias, the denominator does not (a factorised layer's
  // denominator is its weight only), so the metric starts slightly above 1.
  EXPECT_DOUBLE_EQ(lr.referenceCompression(), (stem + 512 * 256 + 256 + head) / (stem + 512 * 256 + head));
  lr.factorise({10}, Factor::B);
  const double num = stem + 256 /*bias*/ + 10 * 256 /*A*/ + 10 * 512 /*B*/ + head;
  const double den = stem + 512 * 256 + head;
  EXPECT_DOUBLE_EQ(lr.referenceCompression(), num / den);
  EXPECT_NEAR(1.0 / lr.referenceCompression(), 1.298565, 1e-6);  // 535,562 / 412,426
  lr.merge();
  EXPECT_DOUBLE_EQ(lr.referenceCompression(), (stem + 512 * 256 + 256 + head) / (stem + 512 * 256 + head));
}

}  // namespace
}  // namespace lowcomm::nn

namespace lowcomm::nn {
namespace {

// Per-layer trained factors: on vgg16_timm every conv [out x in*9] and fc1 [512w x 49*64w] has the
// smaller A, the square fc2 trains B; only the chosen factor of each layer requires grad.
TEST(LowRank, SmallerFactorPerLayer) {
  torch::manual_seed(31);
  ModelSpec s;
  s.name = "vgg16_timm";
  s.width = 0.125;
  auto model = makeModel(s);
  LowRankModel lr(model);
  ASSERT_EQ(lr.layers().size(), 14u);  // 12 convs + fc1 + fc2
  const auto want = lr.smallerFactors();
  for (size_t i = 0; i < lr.layers().size(); ++i) {
    const auto& l = lr.layers()[i];
    EXPECT_EQ(want[i], l.name == "pre_logits.fc2" ? Factor::B : Factor::A) << l.name;
  }
  lr.factorise(lr.ranksAbove(0.5), want);
  for (size_t i = 0; i < lr.layers().size(); ++i) {
    EXPECT_EQ(lr.trainedOf(i), want[i]);
    EXPECT_EQ(lr.factorA(i).requires_grad(), want[i] == Factor::A) << lr.layers()[i].name;
    EXPECT_EQ(lr.factorB(i).requires_grad(), want[i] == Factor::B) << lr.layers()[i].name;
  }
  EXPECT_THROW(lr.factorise(lr.fullRanks(), std::vector<Factor>{Factor::A}), Error);
}

}  // namespace
}  // namespace lowcomm::nn

namespace lowcomm::nn {
namespace {

// Randomized SVD of a factorised layer: the sketch of rank + 8 directions finds the same kept
// rank as the exact SVD on a decaying spectrum and a truncation as good within 1 %; when every
// sketched value is above the cutoff it falls back to the exact SVD instead of capping the rank.
TEST(LowRank, RandomizedSvdMatchesExactTruncation) {
  std::vector<float> spectrum;
  for (int k = 0; k < 256; ++k) spectrum.push_back(std::pow(0.93f, static_cast<float>(k)));
  auto exact_model = build("mlp", 41), rand_model = build("mlp", 41);
  torch::manual_seed(42);
  setSpectrum(*exact_model, "hidden", spectrum);
  torch::manual_seed(42);
  setSpectrum(*rand_model, "hidden", spectrum);
  LowRankModel exact(exact_model), rnd(rand_model);
  rnd.setRandomizedSvd(true, 3);
  exact.factorise({100}, Factor::B);
  rnd.factorise({100}, Factor::B);  // from full rank: always exact
  const auto w100 = exact.matrix(0);
  EXPECT_TRUE(torch::allclose(rnd.matrix(0), w100, 1e-5, 1e-6));
  // 0.93^k > 0.15 for k <= 26: 27 values kept, well inside a 108-direction sketch.
  EXPECT_EQ(exact.ranksAbove(0.15), (std::vector<int64_t>{27}));
  EXPECT_EQ(rnd.ranksAbove(0.15), (std::vector<int64_t>{27}));
  exact.factorise({27}, Factor::B);
  rnd.factorise({27}, Factor::B);
  const double e_exact = (exact.matrix(0) - w100).norm().item<double>();
  const double e_rand = (rnd.matrix(0) - w100).norm().item<double>();
  EXPECT_LT(e_rand, 1.01 * e_exact) << e_exact;
  // Rank 27 -> a 35-direction sketch. Cutoff 0 also counts A*B's rounding noise: all 35 sketched
  // values pass, so the count falls back to the exact SVD's (far more than 35).
  const auto exact_all = exact.ranksAbove(0.0);
  EXPECT_GT(exact_all[0], 35);
  EXPECT_EQ(rnd.ranksAbove(0.0), exact_all);
  EXPECT_FALSE(rnd.sketched(0));  // the fallback replaced the sketch
  // Merged and trained on (as after a sync and full-rank steps): the next truncation still
  // sketches from the last rank (27 + 8 directions) and finds the same kept rank.
  exact.merge(), rnd.merge();
  for (auto* m : {exact_model.get(), rand_model.get()}) {
    torch::NoGradGuard g;
    torch::manual_seed(43);
    param(*m, "hidden.weight").add_(1e-4 * torch::randn({256, 512}));
  }
  EXPECT_EQ(rnd.ranksAbove(0.15), exact.ranksAbove(0.15));
  EXPECT_TRUE(rnd.sketched(0));
  EXPECT_FALSE(exact.sketched(0));
}

}  // namespace
}  // namespace lowcomm::nn
