// Pipeline parallelism on ranks as threads (real Gloo pairs): a gpt cut into P stages (with
// tensor parallelism inside the stages too) under GPipe, 1F1B and interleaved 1F1B (v chunks per
// rank) gives the single-process loss,
// every gradient and the evaluation sums for any micro-batch count, including uneven stages;
// the schedules keep the micro-batches in flight that they promise; errors name the keys.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

#include "lowcomm/base/error.h"
#include "lowcomm/nn/models.h"
#include "lowcomm/parallel/grid.h"
#include "lowcomm/parallel/pipeline.h"
#include "lowcomm/parallel/sharded_model.h"
#include "train/rank_threads.h"

namespace lowcomm::parallel {
namespace {

namespace F = torch::nn::functional;

constexpr int64_t kVocab = 16, kBatch = 4, kSeq = 8;

void expectNear(const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  EXPECT_LT((a - b).abs().max().item<double>(), 1e-5 * (1.0 + b.abs().max().item<double>())) << what;
}

nn::ModelSpec spec(int layers) {
  nn::ModelSpec s;
  s.name = "gpt";
  s.classes = kVocab;
  s.layers = layers;
  s.dim = 16;
  s.heads = 4;
  s.seq_len = kSeq;
  return s;
}

struct Case {
  int tp, pp, micro;
  std::string schedule;
  int layers;
  int v = 1;  // model chunks per rank (interleaved)
};

// Micro-batches (per chunk) alive at once on stage s: what the schedule promises.
int expectedInFlight(const Case& c, int s) {
  if (c.schedule == "gpipe") return c.micro;
  if (c.schedule == "1f1b") return std::min(c.pp - s, c.micro);
  const int total = c.micro * c.v, warmup = std::min(2 * (c.pp - s - 1) + (c.v - 1) * c.pp, total);
  return std::min(warmup + 1, total);
}

void checkPipeline(const Case& c) {
  torch::manual_seed(21);
  const auto full = nn::makeModel(spec(c.layers));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(8);
  const auto x = at::randint(0, kVocab, {kBatch, kSeq}, gen), y = at::randint(0, kVocab, {kBatch, kSeq}, gen);
  const auto logits = full->forward(x);
  const auto loss = F::cross_entropy(logits.reshape({-1, kVocab}), y.reshape({-1}), F::CrossEntropyFuncOptions().label_smoothing(0.1));
  loss.backward();
  const double eval_loss = F::cross_entropy(logits.reshape({-1, kVocab}), y.reshape({-1}),
                                            F::CrossEntropyFuncOptions().reduction(torch::kSum)).item<double>();
  const double eval_correct = logits.argmax(-1).eq(y).sum().item<double>();
  const auto want = full->named_parameters();
  const std::string name = "tp " + std::to_string(c.tp) + " pp " + std::to_string(c.pp) + " M " +
                           std::to_string(c.micro) + " " + c.schedule + " v " + std::to_string(c.v) + " layers " +
                           std::to_string(c.layers);
  const auto errors = test::onRankThreads(c.tp * c.pp, [&](int rank, std::shared_ptr<comm::Communicator> world) {
    const Grid g = makeGrid(world, c.tp, c.pp);
    auto shard = makeShardedModel(*full, g.tp_comm, g.pp_comm, {}, c.v);
    ASSERT_EQ(shard->chunks(), c.v);
    Pipeline pipe(shard, g.pp_comm, {c.micro, c.schedule});
    int backwards = 0, lasts = 0;
    bool final_syncs = false;
    const double total = pipe.trainStep(
        x, y, 1.0, [&](const torch::Tensor& out, const torch::Tensor& t) { return shard->loss(out, t, 0.1).mean(); },
        [&](bool last) {
          ++backwards;
          lasts += last;
          final_syncs = last;
        });
    const std::string at = name + ", rank " + std::to_string(rank) + ": ";
    EXPECT_NEAR(total, loss.item<double>(), 1e-5) << at << "loss";
    EXPECT_EQ(backwards, c.micro * c.v) << at;
    EXPECT_EQ(lasts, c.v) << at << "each chunk's last backward syncs, no other";
    EXPECT_TRUE(final_syncs) << at << "the step's last backward syncs";
    // Evaluation of the same (not yet updated) weights.
    const auto [l, right] = pipe.evalBatch(x, y, [&](const torch::Tensor& out, const torch::Tensor& t) {
      return std::pair<double, double>{shard->loss(out, t, 0.0).sum().item<double>(), double(shard->correct(out, t))};
    });
    EXPECT_NEAR(l, eval_loss, 1e-4 * eval_loss) << at << "eval loss";
    EXPECT_EQ(right, eval_correct) << at << "eval correct";
    auto grads = nn::makeModel(spec(c.layers));
    {
      torch::NoGradGuard no_grad;
      for (auto& p : shard->parameters()) p.copy_(p.grad());
    }
    shard->gatherInto(*grads);
    for (const auto& p : grads->named_parameters()) expectNear(p.value(), want[p.key()].grad(), at + "gradient of " + p.key());
    const auto& st = pipe.stats();
    EXPECT_EQ(st.max_in_flight, expectedInFlight(c, g.pp_rank)) << at;
    EXPECT_DOUBLE_EQ(st.theory, double(c.pp - 1) / double(c.v * c.micro + c.pp - 1)) << at;
    EXPECT_GT(st.peak_activation_bytes, 0) << at;
    EXPECT_EQ(st.steps, 0) << at << "the first step is not timed";
  });
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << name << " rank " << r;
}

TEST(Pipeline, OneFOneBOnTwoStagesEqualsOneProcess) { checkPipeline({1, 2, 4, "1f1b", 2}); }
TEST(Pipeline, GPipeOnTwoStagesEqualsOneProcess) { checkPipeline({1, 2, 4, "gpipe", 2}); }
TEST(Pipeline, FourStagesOneUnitEach) { checkPipeline({1, 4, 4, "1f1b", 2}); }
TEST(Pipeline, UnevenStagesAndOneMicroBatch) { checkPipeline({1, 2, 1, "1f1b", 3}); }
TEST(Pipeline, ThreeStagesFewerMicroBatchesThanStages) { checkPipeline({1, 3, 2, "1f1b", 3}); }
TEST(Pipeline, TensorParallelStages) { checkPipeline({2, 2, 2, "1f1b", 2}); }
TEST(Pipeline, TensorParallelStagesGPipe) { checkPipeline({2, 2, 4, "gpipe", 2}); }
// Interleaved 1F1B: one unit per chunk, uneven chunks, three chunks per rank, four stages,
// micro-batches as many as stages (every forward before the first backward on stage 0), and
// tensor parallelism inside the chunks.
TEST(Pipeline, InterleavedOneUnitPerChunk) { checkPipeline({1, 2, 4, "interleaved", 2, 2}); }
TEST(Pipeline, InterleavedUnevenChunks) { checkPipeline({1, 2, 4, "interleaved", 4, 2}); }
TEST(Pipeline, InterleavedThreeChunksPerRank) { checkPipeline({1, 2, 4, "interleaved", 4, 3}); }
TEST(Pipeline, InterleavedFourStages) { checkPipeline({1, 4, 4, "interleaved", 6, 2}); }
TEST(Pipeline, InterleavedMicroBatchesEqualStages) { checkPipeline({1, 2, 2, "interleaved", 3, 2}); }
TEST(Pipeline, InterleavedTensorParallel) { checkPipeline({2, 2, 2, "interleaved", 2, 2}); }

TEST(Pipeline, BadOptionsNameTheKey) {
  torch::manual_seed(22);
  const auto full = nn::makeModel(spec(2));
  const auto errors = test::onRankThreads(2, [&](int, std::shared_ptr<comm::Communicator> world) {
    const Grid g = makeGrid(world, 1, 2);
    auto shard = makeShardedModel(*full, g.tp_comm, g.pp_comm);
    try {
      Pipeline bad(shard, g.pp_comm, {2, "zigzag"});
      ADD_FAILURE() << "accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("parallel.schedule"), std::string::npos) << e.what();
    }
    Pipeline pipe(shard, g.pp_comm, {3, "1f1b"});
    const auto x = torch::zeros({kBatch, kSeq}, torch::kInt64);
    try {
      pipe.trainStep(x, x, 1.0, [&](const torch::Tensor& o, const torch::Tensor& t) { return shard->loss(o, t, 0).mean(); },
                     [](bool) {});
      ADD_FAILURE() << "3 micro-batches of a batch of 4 accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("parallel.micro_batches"), std::string::npos) << e.what();
    }
    try {
      Pipeline flat(shard, g.pp_comm, {2, "interleaved"});
      ADD_FAILURE() << "interleaved on one chunk per rank accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("parallel.virtual_stages"), std::string::npos) << e.what();
    }
    auto chunked = makeShardedModel(*full, g.tp_comm, g.pp_comm, {}, 2);
    try {
      Pipeline odd(chunked, g.pp_comm, {1, "interleaved"});
      ADD_FAILURE() << "one micro-batch for two interleaved stages accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("parallel.micro_batches"), std::string::npos) << e.what();
    }
    try {
      makeShardedModel(*full, g.tp_comm, g.pp_comm, {}, 3);  // 6 chunks of 4 units
      ADD_FAILURE() << "more chunks than units accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("parallel.virtual_stages"), std::string::npos) << e.what();
    }
    auto tied = spec(2);
    tied.tied = true;
    try {
      makeShardedModel(*nn::makeModel(tied), g.tp_comm, g.pp_comm);
      ADD_FAILURE() << "a tied head over two stages accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("parallel.pp"), std::string::npos) << e.what();
    }
  });
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

}  // namespace
}  // namespace lowcomm::parallel
