// Error-feedback memories: each one's formula on known inputs, and state save/load.
#include <gtest/gtest.h>

#include "lowcomm/base/error.h"
#include "lowcomm/compress/memory.h"

using namespace lowcomm;
using namespace lowcomm::compress;

TEST(Memory, ResidualKeepsWhatWasNotSent) {
  auto m = makeMemory("residual", {});
  std::vector<float> g = {1.0f, -2.0f, 0.5f}, approx = {1.0f, 0.0f, 0.25f};
  m->compensate(0, g.data(), 3);  // no residual yet
  EXPECT_EQ(g, (std::vector<float>{1.0f, -2.0f, 0.5f}));
  m->update(0, g.data(), approx.data(), 3);
  std::vector<float> g2 = {0.5f, 0.5f, 0.5f};
  const std::vector<float> old_e = {0.0f, -2.0f, 0.25f};
  m->compensate(0, g2.data(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(g2[i], 0.5f + old_e[i]);
  // Invariant: sent + new residual == gradient + old residual.
  std::vector<float> sent = {0.0f, -1.5f, 0.0f};
  m->update(0, g2.data(), sent.data(), 3);
  StateMap s;
  m->save(s, "m.");
  std::vector<float> e;
  ASSERT_TRUE(getState(s, "m.e.0", e));
  for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(sent[i] + e[i], 0.5f + old_e[i]);
}

TEST(Memory, DecayedResidualIsSparseLoCosErrorFeedback) {
  MemoryParams p;
  p.decay = 0.5;  // exact in float: e <- 0.5 e + g before compression, e <- x - approx after
  auto m = makeMemory("residual", p);
  std::vector<float> g = {1.0f, -2.0f}, none = {0.0f, 0.0f};
  m->compensate(0, g.data(), 2);
  m->update(0, g.data(), none.data(), 2);  // nothing sent: e = g
  std::vector<float> g2 = {0.25f, 0.25f};
  m->compensate(0, g2.data(), 2);
  EXPECT_EQ(g2, (std::vector<float>{0.75f, -0.75f}));
  p.decay = 0.0;
  EXPECT_THROW(makeMemory("residual", p), ConfigError);
  p.decay = 1.5;
  EXPECT_THROW(makeMemory("residual", p), ConfigError);
}

TEST(Memory, BucketsKeepSeparateResiduals) {
  auto m = makeMemory("residual", {});
  std::vector<float> a = {1, 1}, b = {2, 2, 2}, zero2(2, 0), zero3(3, 0);
  m->update(0, a.data(), zero2.data(), 2);
  m->update(1, b.data(), zero3.data(), 3);
  std::vector<float> x(2, 0.0f), y(3, 0.0f);
  m->compensate(0, x.data(), 2);
  m->compensate(1, y.data(), 3);
  EXPECT_EQ(x, a);
  EXPECT_EQ(y, b);
}

TEST(Memory, DgcMomentumCorrectionAndMasking) {
  MemoryParams p;
  p.momentum = 0.5;
  auto m = makeMemory("dgc", p);
  std::vector<float> g = {1.0f, 2.0f};
  m->compensate(0, g.data(), 2);  // u = g, v = g
  EXPECT_EQ(g, (std::vector<float>{1.0f, 2.0f}));
  std::vector<float> approx = {0.0f, 2.0f};  // index 1 sent
  m->update(0, g.data(), approx.data(), 2);  // v = {1, 0}; u = {1, 0}
  std::vector<float> g2 = {1.0f, 1.0f};
  m->compensate(0, g2.data(), 2);  // u = {0.5+1, 0+1} = {1.5, 1}; v = {1+1.5, 0+1}
  EXPECT_FLOAT_EQ(g2[0], 2.5f);
  EXPECT_FLOAT_EQ(g2[1], 1.0f);
}

TEST(Memory, DgcClipsTheLocalGradient) {
  MemoryParams p;
  p.momentum = 0.0;
  p.clip = 1.0;
  auto m = makeMemory("dgc", p);
  std::vector<float> g = {3.0f, 4.0f};  // norm 5 → scaled to norm 1
  m->compensate(0, g.data(), 2);
  EXPECT_NEAR(g[0], 0.6f, 1e-6);
  EXPECT_NEAR(g[1], 0.8f, 1e-6);
}

TEST(Memory, MomentumIsAnExponentialAverage) {
  MemoryParams p;
  p.momentum = 0.9;
  auto m = makeMemory("momentum", p);
  std::vector<float> g = {1.0f};
  m->compensate(0, g.data(), 1);
  EXPECT_NEAR(g[0], 0.1f, 1e-7);
  std::vector<float> g2 = {1.0f};
  m->compensate(0, g2.data(), 1);
  EXPECT_NEAR(g2[0], 0.9f * 0.1f + 0.1f, 1e-7);
  EXPECT_FALSE(m->needsApprox());
}

TEST(Memory, SaveLoadRoundTripAndSizeCheck) {
  auto m = makeMemory("residual", {});
  std::vector<float> x = {1, 2, 3}, zero(3, 0);
  m->update(4, x.data(), zero.data(), 3);
  StateMap s;
  m->save(s, "p.");
  auto m2 = makeMemory("residual", {});
  m2->load(s, "p.");
  std::vector<float> y(3, 0.0f);
  m2->compensate(4, y.data(), 3);
  EXPECT_EQ(y, x);
  // A residual restored for a bucket of another size is a checkpoint from another model.
  auto m3 = makeMemory("residual", {});
  m3->load(s, "p.");
  std::vector<float> z(5, 0.0f);
  EXPECT_THROW(m3->compensate(4, z.data(), 5), DataError);
}

TEST(Memory, UnknownNameAndBadParameters) {
  EXPECT_THROW(makeMemory("resid", {}), ConfigError);
  MemoryParams p;
  p.momentum = 1.0;
  EXPECT_THROW(makeMemory("dgc", p), ConfigError);
}
