// The compressor factory and the auto policy (ranks as threads).
#include <gtest/gtest.h>

#include <random>

#include "comm/harness.h"
#include "lowcomm/base/error.h"
#include "lowcomm/compress/compressor.h"

using namespace lowcomm;
using namespace lowcomm::compress;

namespace {

std::vector<float> input(int rank, size_t n, int step) {
  std::mt19937 gen(static_cast<unsigned>(rank * 7919 + step));
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

}  // namespace

TEST(CompressorFactory, EveryNameBuildsAndUnknownNamesAreClearErrors) {
  for (const auto& name : compressorNames()) {
    CompressConfig cfg;
    cfg.codec = name;
    auto c = makeCompressor(cfg);
    ASSERT_TRUE(c) << name;
    EXPECT_EQ(c->name(), name);
  }
  CompressConfig bad;
  bad.codec = "topkk";
  try {
    makeCompressor(bad);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("topkk"), std::string::npos);
  }
  bad.codec = "powersgd";
  bad.memory = "dgc";
  EXPECT_THROW(makeCompressor(bad), ConfigError);
  CompressConfig cand;
  cand.codec = "auto";
  cand.auto_candidates = {"auto"};
  EXPECT_THROW(makeCompressor(cand), ConfigError);
}

TEST(AutoCompressor, TriesEachOptionThenAllRanksKeepTheSameChoice) {
  const int W = 3;
  auto comms = test::makeComms(W);
  CompressConfig cfg;
  cfg.codec = "auto";
  cfg.auto_candidates = {"fp16", "topk"};
  cfg.auto_trial_steps = 2;
  std::vector<std::vector<std::string>> decisions(W);
  std::vector<std::vector<float>> last(W);
  test::onRanks(W, [&](int r) {
    auto c = makeCompressor(cfg);
    for (int step = 0; step < 8; ++step) {  // 3 options × 2 trials, then 2 steps of the choice
      for (int bucket = 0; bucket < 2; ++bucket) {
        auto x = input(r, bucket ? 64 : 200000, step);
        BucketView b{bucket, x.data(), x.size(), {{"w", {static_cast<int64_t>(x.size()), 1}, 0, x.size()}}};
        c->reduce(*comms[r], b);
        if (bucket == 0) last[r] = x;
      }
    }
    decisions[r] = c->decisions();
    EXPECT_GT(c->stats().raw_bytes, 0);
  });
  ASSERT_EQ(decisions[0].size(), 2u);
  for (int r = 1; r < W; ++r) {
    EXPECT_EQ(last[r], last[0]);
    // The chosen option (first word after "bucket i: ") agrees; measured times are maxed over ranks.
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(decisions[r][i], decisions[0][i]);
  }
  EXPECT_NE(decisions[0][0].find("none"), std::string::npos);
}

TEST(AutoCompressor, TrialsTakeTheOptionsInTurn) {
  // none, topk, none, topk (2 trial steps each, round robin), then the choice: each step's bytes
  // on the wire tell which option ran (topk 1 % sends far less than the raw bucket).
  const int W = 2;
  auto comms = test::makeComms(W);
  CompressConfig cfg;
  cfg.codec = "auto";
  cfg.auto_candidates = {"topk"};
  cfg.auto_trial_steps = 2;
  std::vector<std::vector<uint64_t>> sent(W);
  test::onRanks(W, [&](int r) {
    auto c = makeCompressor(cfg);
    for (int step = 0; step < 4; ++step) {
      auto x = input(r, 100000, step);
      BucketView b{0, x.data(), x.size(), {{"w", {static_cast<int64_t>(x.size()), 1}, 0, x.size()}}};
      const uint64_t before = comms[r]->meter().snapshot().total.bytes_sent;
      c->reduce(*comms[r], b);
      sent[r].push_back(comms[r]->meter().snapshot().total.bytes_sent - before);
    }
  });
  for (int r = 0; r < W; ++r) {
    ASSERT_EQ(sent[r].size(), 4u);
    EXPECT_GT(sent[r][0], 10 * sent[r][1]) << "rank " << r << ": step 0 none, step 1 topk";
    EXPECT_GT(sent[r][2], 10 * sent[r][3]) << "rank " << r << ": step 2 none, step 3 topk";
  }
}

TEST(AutoCompressor, StateSurvivesSaveAndLoad) {
  auto comms = test::makeComms(1);
  CompressConfig cfg;
  cfg.codec = "auto";
  cfg.auto_candidates = {"topk"};
  cfg.auto_trial_steps = 1;
  auto a = makeCompressor(cfg);
  auto run = [&](Compressor& c, int step) {
    auto x = input(0, 1000, step);
    BucketView b{0, x.data(), x.size(), {{"w", {100, 10}, 0, x.size()}}};
    c.reduce(*comms[0], b);
    return x;
  };
  for (int s = 0; s < 3; ++s) run(*a, s);
  StateMap st;
  a->save(st);
  auto b = makeCompressor(cfg);
  b->load(st);
  EXPECT_EQ(run(*a, 3), run(*b, 3));
  // State written for other candidates does not fit: a clear error, not a wrong choice.
  cfg.auto_candidates = {"bf16", "topk"};
  auto c = makeCompressor(cfg);
  EXPECT_THROW(c->load(st), DataError);
}
