// resizeLeading and NamedOptimizerState: optimizer state carried by parameter name across shape
// changes (SGD momentum, AdamW moments and step), the stash of unbound names, save/load.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sstream>
#include <string>
#include <vector>

#include "lowcomm/base/error.h"
#include "lowcomm/parallel/optim_state.h"

using namespace lowcomm;
using namespace lowcomm::parallel;

namespace {

// The key libtorch's optimizers use for a parameter's state.
std::string key(const torch::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

torch::optim::OptimizerParamState* stateOf(torch::optim::Optimizer& opt, const torch::Tensor& p) {
  auto it = opt.state().find(key(p));
  return it == opt.state().end() ? nullptr : it->second.get();
}

torch::Tensor momentum(torch::optim::Optimizer& opt, const torch::Tensor& p) {
  auto* s = dynamic_cast<torch::optim::SGDParamState*>(stateOf(opt, p));
  return s ? s->momentum_buffer() : torch::Tensor();
}

torch::optim::AdamWParamState* adamw(torch::optim::Optimizer& opt, const torch::Tensor& p) {
  return dynamic_cast<torch::optim::AdamWParamState*>(stateOf(opt, p));
}

torch::Tensor leaf(std::vector<int64_t> shape, float fill = 0) {
  return torch::full(shape, fill).requires_grad_(true);
}

void setGrad(const torch::Tensor& p, const torch::Tensor& g) { p.mutable_grad() = g.clone(); }

torch::Tensor grid(int64_t rows, int64_t cols) {
  return torch::arange(1, rows * cols + 1, torch::kFloat32).view({rows, cols});
}

// ---------------------------------------------------------------------------------------------

TEST(AbOptimState, ResizeLeadingKeepsTheLeadingBlockAndZeroPads) {
  const auto t = grid(3, 4);
  const auto shrink = resizeLeading(t, {2, 3});
  ASSERT_EQ(shrink.sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(torch::equal(shrink, t.slice(0, 0, 2).slice(1, 0, 3)));

  const auto grow = resizeLeading(t, {5, 6});
  ASSERT_EQ(grow.sizes(), (std::vector<int64_t>{5, 6}));
  EXPECT_TRUE(torch::equal(grow.slice(0, 0, 3).slice(1, 0, 4), t));
  EXPECT_EQ(grow.slice(0, 3).abs().sum().item<float>(), 0.f);
  EXPECT_EQ(grow.slice(1, 4).abs().sum().item<float>(), 0.f);
  EXPECT_EQ(grow.sum().item<float>(), t.sum().item<float>());

  const auto mixed = resizeLeading(t, {2, 6});  // cut rows, pad columns
  ASSERT_EQ(mixed.sizes(), (std::vector<int64_t>{2, 6}));
  EXPECT_TRUE(torch::equal(mixed.slice(1, 0, 4), t.slice(0, 0, 2)));
  EXPECT_EQ(mixed.slice(1, 4).abs().sum().item<float>(), 0.f);

  const auto one = resizeLeading(torch::tensor({1.f, 2.f, 3.f}), {5});
  EXPECT_TRUE(torch::equal(one, torch::tensor({1.f, 2.f, 3.f, 0.f, 0.f})));
  EXPECT_TRUE(torch::equal(resizeLeading(t, {3, 4}), t));
  // The source is not modified.
  EXPECT_TRUE(torch::equal(t, grid(3, 4)));
  EXPECT_THROW(resizeLeading(t, {12}), Error);
}

TEST(AbOptimState, SgdMomentumIsResizedByName) {
  auto p = leaf({4, 6});
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(0.1).momentum(0.9));
  NamedOptimizerState st;
  st.rebind(opt, {{"w", p}});
  EXPECT_EQ(st.bound(), (std::vector<std::string>{"w"}));
  const auto g = grid(4, 6);
  setGrad(p, g);
  opt.step();
  const auto old = momentum(opt, p).clone();
  ASSERT_TRUE(torch::equal(old, g)) << "first SGD momentum step stores the gradient";

  // Shrink: [4,6] -> [4,3].
  auto q = leaf({4, 3});
  st.rebind(opt, {{"w", q}});
  ASSERT_EQ(opt.param_groups().size(), 1u);
  ASSERT_EQ(opt.param_groups()[0].params().size(), 1u);
  EXPECT_TRUE(opt.param_groups()[0].params()[0].is_same(q));
  EXPECT_EQ(stateOf(opt, p), nullptr) << "the old tensor's state must leave the optimizer";
  auto mq = momentum(opt, q);
  ASSERT_TRUE(mq.defined());
  ASSERT_EQ(mq.sizes(), (std::vector<int64_t>{4, 3}));
  EXPECT_TRUE(torch::equal(mq, old.slice(1, 0, 3)));
  // The resized state is used by the next step: buf = 0.9 buf + g, q -= 0.1 buf.
  const auto gq = torch::ones({4, 3});
  setGrad(q, gq);
  opt.step();
  const auto buf = 0.9 * old.slice(1, 0, 3) + gq;
  EXPECT_TRUE(torch::allclose(momentum(opt, q), buf));
  EXPECT_TRUE(torch::allclose(q.detach(), -0.1 * buf));

  // Grow: [4,3] -> [4,8]: the 3 kept columns, then zeros.
  const auto before = momentum(opt, q).clone();
  auto r = leaf({4, 8});
  st.rebind(opt, {{"w", r}});
  auto mr = momentum(opt, r);
  ASSERT_EQ(mr.sizes(), (std::vector<int64_t>{4, 8}));
  EXPECT_TRUE(torch::equal(mr.slice(1, 0, 3), before));
  EXPECT_EQ(mr.slice(1, 3).abs().sum().item<float>(), 0.f);
}

TEST(AbOptimState, SgdMomentumGrowsFromTheOriginalShape) {
  auto p = leaf({4, 6});
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(0.1).momentum(0.5));
  NamedOptimizerState st;
  st.rebind(opt, {{"w", p}});
  setGrad(p, grid(4, 6));
  opt.step();
  auto r = leaf({5, 8});
  st.rebind(opt, {{"w", r}});
  const auto m = momentum(opt, r);
  ASSERT_EQ(m.sizes(), (std::vector<int64_t>{5, 8}));
  EXPECT_TRUE(torch::equal(m.slice(0, 0, 4).slice(1, 0, 6), grid(4, 6)));
  EXPECT_EQ(m.sum().item<float>(), grid(4, 6).sum().item<float>());
}

TEST(AbOptimState, UnboundNamesAreStashedAndComeBack) {
  auto a = leaf({3, 2}), b = leaf({2, 5});
  torch::optim::SGD opt({a, b}, torch::optim::SGDOptions(0.1).momentum(0.9));
  NamedOptimizerState st;
  st.rebind(opt, {{"a", a}, {"b", b}});
  EXPECT_EQ(st.bound(), (std::vector<std::string>{"a", "b"}));
  setGrad(a, grid(3, 2));
  setGrad(b, grid(2, 5) * -1);
  opt.step();
  const auto mb = momentum(opt, b).clone();

  // b unbound for one rebind: its state leaves the optimizer; a keeps its own (same tensor).
  st.rebind(opt, {{"a", a}});
  EXPECT_EQ(st.bound(), (std::vector<std::string>{"a"}));
  EXPECT_EQ(opt.param_groups()[0].params().size(), 1u);
  EXPECT_EQ(stateOf(opt, b), nullptr);
  EXPECT_TRUE(torch::equal(momentum(opt, a), grid(3, 2)));
  EXPECT_EQ(opt.state().size(), 1u);

  // b back under its name (a new tensor of the same shape), and a never-seen name c.
  auto b2 = leaf({2, 5}), c = leaf({7});
  st.rebind(opt, {{"a", a}, {"b", b2}, {"c", c}});
  EXPECT_EQ(st.bound(), (std::vector<std::string>{"a", "b", "c"}));
  ASSERT_TRUE(momentum(opt, b2).defined());
  EXPECT_TRUE(torch::equal(momentum(opt, b2), mb));
  EXPECT_EQ(stateOf(opt, c), nullptr) << "a name never seen starts without state";
  EXPECT_TRUE(torch::equal(momentum(opt, a), grid(3, 2)));
}

TEST(AbOptimState, AdamWMomentsAndStepAreCarried) {
  auto p = leaf({4, 6}, 1.f);
  torch::optim::AdamW opt({p}, torch::optim::AdamWOptions(0.01));
  NamedOptimizerState st;
  st.rebind(opt, {{"w", p}});
  setGrad(p, grid(4, 6));
  opt.step();
  setGrad(p, grid(4, 6) * 0.5);
  opt.step();
  auto* s0 = adamw(opt, p);
  ASSERT_NE(s0, nullptr);
  ASSERT_EQ(s0->step(), 2);
  const auto m0 = s0->exp_avg().clone(), v0 = s0->exp_avg_sq().clone();
  // Known values: m = 0.1 * 0.9 g + 0.1 * 0.5 g; v = 0.001 * 0.999 g^2 + 0.001 * 0.25 g^2.
  const auto g = grid(4, 6);
  ASSERT_TRUE(torch::allclose(m0, g * (0.09 + 0.05)));
  ASSERT_TRUE(torch::allclose(v0, g * g * (0.000999 + 0.00025)));

  auto q = leaf({4, 3});
  st.rebind(opt, {{"w", q}});
  auto* s1 = adamw(opt, q);
  ASSERT_NE(s1, nullptr);
  EXPECT_EQ(s1->step(), 2);
  EXPECT_TRUE(torch::equal(s1->exp_avg(), m0.slice(1, 0, 3)));
  EXPECT_TRUE(torch::equal(s1->exp_avg_sq(), v0.slice(1, 0, 3)));

  auto r = leaf({5, 3});
  st.rebind(opt, {{"w", r}});
  auto* s2 = adamw(opt, r);
  ASSERT_NE(s2, nullptr);
  EXPECT_EQ(s2->step(), 2);
  EXPECT_TRUE(torch::equal(s2->exp_avg().slice(0, 0, 4), m0.slice(1, 0, 3)));
  EXPECT_EQ(s2->exp_avg().slice(0, 4).abs().sum().item<float>(), 0.f);
  EXPECT_EQ(s2->exp_avg_sq().slice(0, 4).abs().sum().item<float>(), 0.f);
  // A further step works on the resized state and advances the count.
  setGrad(r, torch::ones({5, 3}));
  opt.step();
  EXPECT_EQ(adamw(opt, r)->step(), 3);
}

TEST(AbOptimState, SaveLoadRoundTripOfTheStash) {
  // SGD: stash "b", save, load into a fresh store and optimizer, bind "b" again.
  auto a = leaf({3, 2}), b = leaf({2, 5});
  torch::optim::SGD opt({a, b}, torch::optim::SGDOptions(0.1).momentum(0.9));
  NamedOptimizerState st;
  st.rebind(opt, {{"a", a}, {"b", b}});
  setGrad(a, grid(3, 2));
  setGrad(b, grid(2, 5) + 100);
  opt.step();
  const auto mb = momentum(opt, b).clone();
  st.rebind(opt, {{"a", a}});  // b stashed

  std::stringstream buf;
  {
    torch::serialize::OutputArchive ar;
    st.save(ar);
    ar.save_to(buf);
  }
  auto x = leaf({1}), b2 = leaf({2, 5});
  torch::optim::SGD opt2({x}, torch::optim::SGDOptions(0.1).momentum(0.9));
  NamedOptimizerState st2;
  {
    torch::serialize::InputArchive ar;
    ar.load_from(buf);
    st2.load(ar, opt2);
  }
  st2.rebind(opt2, {{"b", b2}, {"a", x}});
  ASSERT_TRUE(momentum(opt2, b2).defined()) << "stashed state of 'b' lost in save/load";
  EXPECT_TRUE(torch::equal(momentum(opt2, b2), mb));
  EXPECT_EQ(stateOf(opt2, x), nullptr) << "'a' was bound (not stashed) when saved";

  // AdamW: step count and moments survive, and are resized on rebind.
  auto p = leaf({4, 6});
  torch::optim::AdamW aw({p}, torch::optim::AdamWOptions(0.01));
  NamedOptimizerState sa;
  sa.rebind(aw, {{"w", p}});
  setGrad(p, grid(4, 6));
  aw.step();
  const auto m0 = adamw(aw, p)->exp_avg().clone(), v0 = adamw(aw, p)->exp_avg_sq().clone();
  sa.rebind(aw, {});
  std::stringstream buf2;
  {
    torch::serialize::OutputArchive ar;
    sa.save(ar);
    ar.save_to(buf2);
  }
  auto y = leaf({4, 2});
  torch::optim::AdamW aw2({y}, torch::optim::AdamWOptions(0.01));
  NamedOptimizerState sb;
  {
    torch::serialize::InputArchive ar;
    ar.load_from(buf2);
    sb.load(ar, aw2);
  }
  sb.rebind(aw2, {{"w", y}});
  auto* s = adamw(aw2, y);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->step(), 1);
  EXPECT_TRUE(torch::equal(s->exp_avg(), m0.slice(1, 0, 2)));
  EXPECT_TRUE(torch::equal(s->exp_avg_sq(), v0.slice(1, 0, 2)));

  // An empty stash round-trips to an empty one.
  NamedOptimizerState empty, back;
  std::stringstream buf3;
  {
    torch::serialize::OutputArchive ar;
    empty.save(ar);
    ar.save_to(buf3);
  }
  {
    torch::serialize::InputArchive ar;
    ar.load_from(buf3);
    back.load(ar, opt2);
  }
  auto z = leaf({2, 5});
  torch::optim::SGD opt3({z}, torch::optim::SGDOptions(0.1).momentum(0.9));
  back.rebind(opt3, {{"b", z}});
  EXPECT_EQ(stateOf(opt3, z), nullptr);
}

}  // namespace
