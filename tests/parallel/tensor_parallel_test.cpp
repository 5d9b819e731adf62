// Tensor parallelism on ranks as threads: a column-parallel then row-parallel MLP over T ranks
// equals the single-process MLP (output, input gradient, every weight's gradient as the slice of
// the full one), the regions' collectives, and the divisibility error.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "lowcomm/base/error.h"
#include "lowcomm/parallel/tensor_parallel.h"
#include "train/rank_threads.h"

namespace lowcomm::parallel {
namespace {

constexpr int64_t kIn = 8, kHidden = 32, kBatch = 6;

struct Full {
  torch::Tensor w1, b1, w2, b2, x, r;  // MLP weights, input, the loss's weights
};

// The same full model and data on every caller (its own generator: rank threads share torch's).
Full fullModel() {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  auto randn = [&](std::vector<int64_t> s) { return at::normal(0.0, 1.0, s, gen); };
  return {randn({kHidden, kIn}) * 0.3, randn({kHidden}), randn({kIn, kHidden}) * 0.2, randn({kIn}),
          randn({kBatch, kIn}), randn({kBatch, kIn})};
}

// loss = sum(r * mlp(x)), mlp = fc2(gelu(fc1(x))).
torch::Tensor lossOf(const torch::Tensor& y, const Full& f) { return (y * f.r).sum(); }

void expectNear(const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  EXPECT_LT((a - b).abs().max().item<double>(), 1e-5 * (1.0 + b.abs().max().item<double>())) << what;
}

void checkMlp(int t) {
  // The single-process reference.
  Full f = fullModel();
  auto w1 = f.w1.clone().requires_grad_(), b1 = f.b1.clone().requires_grad_();
  auto w2 = f.w2.clone().requires_grad_(), b2 = f.b2.clone().requires_grad_();
  auto x = f.x.clone().requires_grad_();
  namespace F = torch::nn::functional;
  const auto y = F::linear(torch::gelu(F::linear(x, w1, b1)), w2, b2);
  lossOf(y, f).backward();

  const auto errors = test::onRankThreads(t, [&](int rank, std::shared_ptr<comm::Communicator> tp) {
    ColumnParallelLinear fc1(kIn, kHidden, tp);
    RowParallelLinear fc2(kHidden, kIn, tp);
    fc1->loadFrom(f.w1, f.b1);
    fc2->loadFrom(f.w2, f.b2);
    auto xr = f.x.clone().requires_grad_();
    const auto yr = fc2->forward(torch::gelu(fc1->forward(xr)));
    lossOf(yr, f).backward();
    const int64_t h = kHidden / t;
    const std::string at = "T=" + std::to_string(t) + " rank " + std::to_string(rank) + ": ";
    expectNear(yr, y, at + "output");
    expectNear(xr.grad(), x.grad(), at + "input gradient (f's backward allreduce)");
    expectNear(fc1->weight.grad(), w1.grad().narrow(0, rank * h, h), at + "fc1 weight gradient");
    expectNear(fc1->bias.grad(), b1.grad().narrow(0, rank * h, h), at + "fc1 bias gradient");
    expectNear(fc2->weight.grad(), w2.grad().narrow(1, rank * h, h), at + "fc2 weight gradient");
    expectNear(fc2->bias.grad(), b2.grad(), at + "fc2 bias gradient");
    EXPECT_EQ(fc1->weight.size(0), h);
    EXPECT_EQ(fc2->weight.size(1), h);
  });
  for (int r = 0; r < t; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(TensorParallel, MlpOnTwoRanksEqualsOneProcess) { checkMlp(2); }
TEST(TensorParallel, MlpOnFourRanksEqualsOneProcess) { checkMlp(4); }
TEST(TensorParallel, MlpOnOneRankIsThePlainMlp) { checkMlp(1); }

// f: identity forward, gradient summed backward; g: summed forward, identity backward.
TEST(TensorParallel, RegionsSumWhereMegatronSays) {
  const auto errors = test::onRankThreads(3, [](int rank, std::shared_ptr<comm::Communicator> tp) {
    auto x = torch::full({2}, static_cast<double>(rank + 1), torch::kFloat64).requires_grad_();
    auto y = copyToRegion(x, *tp);
    EXPECT_TRUE(y.equal(x.detach()));
    (y * static_cast<double>(rank + 1)).sum().backward();
    EXPECT_TRUE(x.grad().equal(torch::full({2}, 6.0, torch::kFloat64)));  // 1 + 2 + 3
    auto z = torch::full({2}, static_cast<double>(rank + 1), torch::kFloat64).requires_grad_();
    auto s = reduceFromRegion(z, *tp);
    EXPECT_TRUE(s.equal(torch::full({2}, 6.0, torch::kFloat64)));
    (s * 2.0).sum().backward();
    EXPECT_TRUE(z.grad().equal(torch::full({2}, 2.0, torch::kFloat64)));
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(TensorParallel, FeaturesNotDivisibleNameTheKey) {
  const auto errors = test::onRankThreads(3, [](int, std::shared_ptr<comm::Communicator> tp) {
    try {
      ColumnParallelLinear bad(8, 32, tp);  // 32 output features over 3 ranks
      ADD_FAILURE() << "accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("parallel.tp"), std::string::npos) << e.what();
    }
    EXPECT_THROW(RowParallelLinear(32, 8, tp), ConfigError);
    RowParallelLinear ok(33, 8, tp);  // 33 input features: 11 each
    EXPECT_EQ(ok->weight.size(1), 11);
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

}  // namespace
}  // namespace lowcomm::parallel
