// `gpt`: shapes and input errors, causality, the parameter count, the tied head, learning a
// pattern, and AB-training's factorisation of its Linear layers.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "lowcomm/base/error.h"
#include "lowcomm/nn/low_rank.h"
#include "lowcomm/nn/models.h"

namespace lowcomm::nn {
namespace {

ModelSpec gptSpec(bool tied = false) {
  ModelSpec s;
  s.name = "gpt";
  s.classes = 256;
  s.layers = 2;
  s.dim = 32;
  s.heads = 4;
  s.seq_len = 16;
  s.tied = tied;
  return s;
}

std::shared_ptr<Model> build(const ModelSpec& s, uint64_t seed = 1) {
  torch::manual_seed(seed);
  return makeModel(s);
}

torch::Tensor tokens(int64_t b, int64_t t, uint64_t seed = 2) {
  torch::manual_seed(seed);
  return torch::randint(0, 256, {b, t}, torch::kInt64);
}

TEST(Gpt, LogitsPerPositionAndInputErrors) {
  auto m = build(gptSpec());
  EXPECT_EQ(m->forward(tokens(3, 16)).sizes(), (std::vector<int64_t>{3, 16, 256}));
  EXPECT_EQ(m->forward(tokens(2, 5)).sizes(), (std::vector<int64_t>{2, 5, 256}));  // shorter than seq_len
  EXPECT_THROW(m->forward(tokens(2, 17)), Error);                                  // longer
  EXPECT_THROW(m->forward(torch::zeros({2, 16})), Error);                          // float, not tokens
  EXPECT_THROW(m->forward(torch::zeros({2, 1, 16}, torch::kInt64)), Error);
}

// Position t sees tokens 0..t only: changing token 9 leaves positions 0..8 bit-identical.
TEST(Gpt, IsCausal) {
  auto m = build(gptSpec());
  m->eval();
  auto x = tokens(2, 16);
  const auto before = m->forward(x);
  x.index_put_({torch::indexing::Slice(), 9}, (x.select(1, 9) + 1) % 256);
  const auto after = m->forward(x);
  EXPECT_TRUE(before.narrow(1, 0, 9).equal(after.narrow(1, 0, 9)));
  EXPECT_FALSE(before.select(1, 9).equal(after.select(1, 9)));
  EXPECT_FALSE(before.narrow(1, 10, 6).equal(after.narrow(1, 10, 6)));
}

// V d (tokens) + S d (positions) + L (12 d^2 + 13 d) + 2 d (final norm) + V d (untied head).
TEST(Gpt, ParameterCountAndNames) {
  const int64_t v = 256, d = 32, s = 16, l = 2;
  const int64_t body = v * d + s * d + l * (12 * d * d + 13 * d) + 2 * d;
  EXPECT_EQ(parameterCount(*build(gptSpec(false))), body + v * d);
  EXPECT_EQ(parameterCount(*build(gptSpec(true))), body);
  const auto names = build(gptSpec())->named_parameters().keys();
  EXPECT_EQ(names.front(), "stem.weight");
  EXPECT_EQ(names.back(), "head.weight");
  EXPECT_NE(std::find(names.begin(), names.end(), "blocks.1.attn.qkv.weight"), names.end());
}

// The tied head multiplies by the token embedding and trains it through both uses.
TEST(Gpt, TiedHeadReusesTheEmbedding) {
  auto m = build(gptSpec(true));
  auto params = m->named_parameters();
  EXPECT_FALSE(params.contains("head.weight"));
  auto emb = params["stem.weight"];
  const auto x = tokens(1, 4);
  torch::nn::functional::cross_entropy(m->forward(x).reshape({-1, 256}), x.reshape({-1})).backward();
  EXPECT_GT(emb.grad().abs().sum().item<double>(), 0.0);
  torch::NoGradGuard no_grad;
  emb.zero_();  // the head's weight is the embedding: every logit is h . 0
  EXPECT_EQ(m->forward(x).abs().max().item<double>(), 0.0);
}

TEST(Gpt, ConfigErrorsNameTheKey) {
  auto spec = gptSpec();
  spec.heads = 5;  // does not divide 32
  try {
    makeModel(spec);
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.heads"), std::string::npos) << e.what();
  }
  spec = gptSpec();
  spec.layers = 0;
  EXPECT_THROW(makeModel(spec), ConfigError);
}

// A periodic byte pattern is learnable: 60 AdamW steps take the loss from ~ln 256 to below 0.5.
TEST(Gpt, LearnsAPeriodicPattern) {
  auto m = build(gptSpec());
  const auto period = torch::tensor({104, 101, 108, 108, 111, 32}, torch::kInt64);  // "hello "
  const auto stream = period.repeat({4});                                             // 24 bytes
  std::vector<torch::Tensor> xs, ys;
  for (int64_t o = 0; o < 6; ++o) {
    xs.push_back(stream.narrow(0, o, 16));
    ys.push_back(stream.narrow(0, o + 1, 16));
  }
  const auto x = torch::stack(xs), y = torch::stack(ys);
  torch::optim::AdamW opt(m->parameters(), torch::optim::AdamWOptions(3e-3));
  double first = 0, last = 0;
  for (int s = 0; s < 60; ++s) {
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(m->forward(x).reshape({-1, 256}), y.reshape({-1}));
    loss.backward();
    opt.step();
    (s == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_GT(first, 5.0);  // ln 256 = 5.55
  EXPECT_LT(last, 0.5);
}

// AB-training factorises the four Linear layers of every block (not the embeddings, not the
// head) and runs them from their factors; the output is the full-rank model's.
TEST(Gpt, LowRankFactorisesTheBlocksLinearLayers) {
  LowRankModel lr(build(gptSpec()));
  std::vector<std::string> names;
  for (const auto& l : lr.layers()) names.push_back(l.name);
  EXPECT_EQ(names, (std::vector<std::string>{"blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.0.mlp.fc1",
                                             "blocks.0.mlp.fc2", "blocks.1.attn.qkv", "blocks.1.attn.proj",
                                             "blocks.1.mlp.fc1", "blocks.1.mlp.fc2"}));
  const auto x = tokens(2, 16);
  lr.model().eval();
  const auto full = lr.forward(x);
  lr.factorise(lr.fullRanks(), Factor::B);
  const auto factored = lr.forward(x);
  EXPECT_LT((factored - full).abs().max().item<double>(), 1e-4 * full.abs().max().item<double>());
  EXPECT_FALSE(lr.thin(0));  // full rank is never thin
  lr.factorise({8, 8, 8, 8, 8, 8, 8, 8}, Factor::B);
  EXPECT_TRUE(lr.thin(0));
  EXPECT_EQ(lr.forward(x).sizes(), full.sizes());
}

}  // namespace
}  // namespace lowcomm::nn
