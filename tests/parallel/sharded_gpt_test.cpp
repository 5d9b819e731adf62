// Tensor-parallel gpt (one stage), stage bounds and vocab-parallel cross-entropy on ranks as threads (real Gloo pairs):
// split over T = 1, 2, 4 ranks, logits, loss, every gradient, the clip norm and the argmax count
// equal the single-process model's; gathering the shards gives back the full model bit for bit;
// AB-training's whole-layer factorisation of the shards follows the factorised full model;
// the process grid's communicators; errors naming the keys.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

#include "lowcomm/base/error.h"
#include "lowcomm/nn/low_rank.h"
#include "lowcomm/nn/models.h"
#include "lowcomm/parallel/grid.h"
#include "lowcomm/parallel/sharded_model.h"
#include "lowcomm/parallel/vocab_parallel.h"
#include "train/rank_threads.h"

namespace lowcomm::parallel {
namespace {

namespace F = torch::nn::functional;

void expectNear(const torch::Tensor& a, const torch::Tensor& b, const std::string& what, double tol = 1e-5) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  EXPECT_LT((a - b).abs().max().item<double>(), tol * (1.0 + b.abs().max().item<double>())) << what;
}

void expectNoErrors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no ConfigError";
}

// Vocab-parallel cross-entropy against torch's on the full logits: loss and gradient, with and
// without label smoothing, weighted per position so the gradient's scale is exercised.
void checkCrossEntropy(int t, double smoothing) {
  constexpr int64_t kRows = 7, kVocab = 12;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const auto logits = at::normal(0.0, 3.0, {kRows, kVocab}, gen);
  const auto targets = at::randint(0, kVocab, {kRows}, gen);
  const auto weights = at::normal(0.0, 1.0, {kRows}, gen);
  auto full = logits.clone().requires_grad_();
  const auto ref = F::cross_entropy(full, targets, F::CrossEntropyFuncOptions().reduction(torch::kNone).label_smoothing(smoothing));
  (ref * weights).sum().backward();
  const int64_t correct = logits.argmax(-1).eq(targets).sum().item<int64_t>();
  expectNoErrors(test::onRankThreads(t, [&](int rank, std::shared_ptr<comm::Communicator> tp) {
    const int64_t w = kVocab / t, start = rank * w;
    auto mine = logits.narrow(1, start, w).clone().requires_grad_();
    const auto loss = vocabParallelCrossEntropy(mine, targets, start, kVocab, *tp, smoothing);
    const std::string at = "T=" + std::to_string(t) + " rank " + std::to_string(rank) + ": ";
    expectNear(loss, ref.detach(), at + "loss");
    (loss * weights).sum().backward();
    expectNear(mine.grad(), full.grad().narrow(1, start, w), at + "gradient");
    EXPECT_EQ(vocabParallelCorrect(mine, targets, start, *tp), correct) << at;
  }));
}

TEST(VocabParallel, CrossEntropyEqualsTorchs) {
  for (int t : {1, 2, 3, 4}) checkCrossEntropy(t, 0.0);
}
TEST(VocabParallel, LabelSmoothingEqualsTorchs) {
  for (int t : {1, 2, 4}) checkCrossEntropy(t, 0.2);
}

nn::ModelSpec gptSpec(bool tied) {
  nn::ModelSpec s;
  s.name = "gpt";
  s.classes = 16;
  s.layers = 2;
  s.dim = 16;
  s.heads = 4;
  s.seq_len = 8;
  s.tied = tied;
  return s;
}

void checkGpt(int t, bool tied) {
  torch::manual_seed(11);
  const auto full = nn::makeModel(gptSpec(tied));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const auto x = at::randint(0, 16, {3, 8}, gen), y = at::randint(0, 16, {3, 8}, gen);
  const auto logits = full->forward(x);
  const auto loss = F::cross_entropy(logits.reshape({-1, 16}), y.reshape({-1}), F::CrossEntropyFuncOptions().label_smoothing(0.1));
  loss.backward();
  double sq = 0;
  for (const auto& p : full->parameters()) sq += p.grad().pow(2).sum().item<double>();
  const int64_t correct = logits.argmax(-1).eq(y).sum().item<int64_t>();
  const auto want = full->named_parameters();
  expectNoErrors(test::onRankThreads(t, [&](int rank, std::shared_ptr<comm::Communicator> comm) {
    auto tp = makeShardedModel(*full, comm);
    const std::string at = "T=" + std::to_string(t) + (tied ? " tied" : "") + " rank " + std::to_string(rank) + ": ";
    const int64_t w = 16 / t;
    auto mine = tp->forward(x);
    expectNear(mine, logits.detach().narrow(-1, rank * w, w), at + "logits");
    auto l = tp->loss(mine, y, 0.1).mean();
    expectNear(l, loss.detach(), at + "loss");
    EXPECT_EQ(tp->correct(mine, y), correct) << at;
    l.backward();
    // Gradients: put each shard's gradient in its place and gather them like weights.
    auto grads = nn::makeModel(gptSpec(tied));
    {
      torch::NoGradGuard no_grad;
      for (auto& p : tp->parameters()) p.copy_(p.grad());
    }
    tp->gatherInto(*grads);
    for (const auto& p : grads->named_parameters())
      expectNear(p.value(), want[p.key()].grad(), at + "gradient of " + p.key());
    // The parameters now hold their gradients: put them back as gradients to clip.
    for (auto& p : tp->parameters()) p.mutable_grad() = p.detach().clone();
    const double norm = tp->clipGradNorm(1e-3);
    EXPECT_NEAR(norm, std::sqrt(sq), 1e-5 * std::sqrt(sq)) << at;
    double after = 0;
    for (const auto& p : tp->named_parameters()) {
      const double s = p.value().grad().pow(2).sum().item<double>();
      after += tp->sharded(p.key()) ? s : s / t;  // replicated ones are counted once over the ranks
    }
    comm->allreduce(&after, 1, comm::DType::f64, comm::ReduceOp::sum);
    EXPECT_NEAR(std::sqrt(after), 1e-3, 1e-6) << at << "clipped norm";
  }));
}

TEST(TensorParallelGpt, OnOneRankEqualsTheFullModel) { checkGpt(1, false); }
TEST(TensorParallelGpt, OnTwoRanksEqualsTheFullModel) { checkGpt(2, false); }
TEST(TensorParallelGpt, OnFourRanksEqualsTheFullModel) { checkGpt(4, false); }
TEST(TensorParallelGpt, TiedHeadOnTwoRanksEqualsTheFullModel) { checkGpt(2, true); }
TEST(TensorParallelGpt, TiedHeadOnFourRanksEqualsTheFullModel) { checkGpt(4, true); }

// AB-training's factorisation of tensor-parallel shards (low_rank.h, split layers): every layer
// factorised whole from the SVD of its gathered weight, each rank holding its part of one factor
// and all of the other. Against the full model factorised at the same ranks: the same singular
// values, logits and loss; after an SGD step on B, then one on A (split and replicated factors'
// gradients), the same logits; merged and gathered, the same weights.
void sgdStep(nn::LowRankModel& m, nn::Factor f) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < m.layers().size(); ++i) {
    auto p = f == nn::Factor::A ? m.factorA(i) : m.factorB(i);
    p.sub_(2.0 * p.grad());
    p.mutable_grad().reset();
  }
}

void checkFactorisedGpt(int t) {
  const auto spec = gptSpec(false);
  torch::manual_seed(13);
  const auto full = nn::makeModel(spec);
  torch::manual_seed(13);
  nn::LowRankModel lr(nn::makeModel(spec));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const auto x = at::randint(0, 16, {3, 8}, gen), y = at::randint(0, 16, {3, 8}, gen);
  const std::vector<int64_t> ranks(lr.layers().size(), 3);
  std::vector<torch::Tensor> svals, want;
  for (size_t i = 0; i < lr.layers().size(); ++i) svals.push_back(torch::linalg::svdvals(lr.matrix(i), c10::nullopt));
  lr.factorise(ranks, nn::Factor::B);
  for (const auto f : {nn::Factor::B, nn::Factor::A}) {
    lr.setTrained(f);
    const auto logits = lr.forward(x);
    want.push_back(logits.detach());
    F::cross_entropy(logits.reshape({-1, 16}), y.reshape({-1})).backward();
    sgdStep(lr, f);
  }
  want.push_back(lr.forward(x).detach());
  lr.merge();
  expectNoErrors(test::onRankThreads(t, [&](int rank, std::shared_ptr<comm::Communicator> comm) {
    auto tp = makeShardedModel(*full, comm);
    nn::LowRankModel mine(tp);
    const std::string at = "T=" + std::to_string(t) + " rank " + std::to_string(rank) + ": ";
    ASSERT_EQ(mine.layers().size(), lr.layers().size()) << at;
    for (size_t i = 0; i < lr.layers().size(); ++i) {
      EXPECT_EQ(mine.layers()[i].name, lr.layers()[i].name) << at;
      EXPECT_EQ(mine.layers()[i].rows * 1000 + mine.layers()[i].cols, lr.layers()[i].rows * 1000 + lr.layers()[i].cols)
          << at << lr.layers()[i].name << ": the whole layer's shape";
      expectNear(torch::linalg::svdvals(mine.matrix(i), c10::nullopt), svals[i], at + "singular values of " + lr.layers()[i].name);
    }
    mine.factorise(ranks, nn::Factor::B);
    const int64_t w = 16 / t;
    for (size_t k = 0; k < 2; ++k) {
      mine.setTrained(k == 0 ? nn::Factor::B : nn::Factor::A);
      const auto logits = mine.forward(x);
      expectNear(logits, want[k].narrow(-1, rank * w, w), at + "logits before step " + std::to_string(k));
      tp->loss(logits, y, 0.0).mean().backward();
      sgdStep(mine, k == 0 ? nn::Factor::B : nn::Factor::A);
    }
    expectNear(mine.forward(x), want[2].narrow(-1, rank * w, w), at + "logits after both steps");
    mine.merge();
    auto back = nn::makeModel(spec);
    tp->gatherInto(*back);
    const auto ref = lr.model().named_parameters();
    for (const auto& p : back->named_parameters()) expectNear(p.value(), ref[p.key()], at + "merged " + p.key());
  }));
}

TEST(TensorParallelGpt, FactorisedWholeOnOneRankEqualsTheFullModel) { checkFactorisedGpt(1); }
TEST(TensorParallelGpt, FactorisedWholeOnTwoRanksEqualsTheFullModel) { checkFactorisedGpt(2); }
TEST(TensorParallelGpt, FactorisedWholeOnFourRanksEqualsTheFullModel) { checkFactorisedGpt(4); }

TEST(TensorParallelGpt, GatheringTheShardsGivesTheFullModelBack) {
  torch::manual_seed(12);
  const auto full = nn::makeModel(gptSpec(false));
  expectNoErrors(test::onRankThreads(4, [&](int, std::shared_ptr<comm::Communicator> comm) {
    auto tp = makeShardedModel(*full, comm);
    EXPECT_EQ(tp->named_parameters().keys(), full->named_parameters().keys());
    EXPECT_LT(nn::parameterCount(*tp), nn::parameterCount(*full));
    auto back = nn::makeModel(gptSpec(false));
    tp->gatherInto(*back);
    for (const auto& p : full->named_parameters())
      EXPECT_TRUE(torch::equal(p.value(), back->named_parameters()[p.key()])) << p.key();
  }));
}

TEST(TensorParallelGpt, WhatDoesNotSplitNamesTheKey) {
  expectNoErrors(test::onRankThreads(3, [&](int, std::shared_ptr<comm::Communicator> comm) {
    auto spec = gptSpec(false);
    spec.classes = 18, spec.dim = 24, spec.heads = 4;  // 4 heads over 3 ranks
    const auto e = errorOf([&] { makeShardedModel(*nn::makeModel(spec), comm); });
    EXPECT_NE(e.find("parallel.tp"), std::string::npos) << e;
    EXPECT_NE(e.find("model.heads"), std::string::npos) << e;
    spec.heads = 3, spec.classes = 16;  // a vocabulary of 16 over 3 ranks
    const auto v = errorOf([&] { makeShardedModel(*nn::makeModel(spec), comm); });
    EXPECT_NE(v.find("model.vocab"), std::string::npos) << v;
    nn::ModelSpec cnn;
    cnn.name = "cnn";
    const auto c = errorOf([&] { makeShardedModel(*nn::makeModel(cnn), comm); });
    EXPECT_NE(c.find("model.name"), std::string::npos) << c;
  }));
}

// Stages cut where the caller says (parallel.balance = "time"): each stage holds its units, runs
// them one by one or composed, and equals the full model's part; cuts that are not cuts name the key.
TEST(StageBounds, GivenBoundsCutTheStages) {
  torch::manual_seed(13);
  const auto full = nn::makeModel(gptSpec(false));  // units: embedding, 2 blocks, head
  auto gen = at::make_generator<at::CPUGeneratorImpl>(6);
  const auto x = at::randint(0, 16, {3, 8}, gen);
  const auto logits = full->forward(x).detach();
  const auto params = full->named_parameters();
  const auto h = (F::embedding(x, params["stem.weight"]) + params["pos.weight"].narrow(0, 0, 8)).detach();
  expectNoErrors(test::onRankThreads(2, [&](int rank, std::shared_ptr<comm::Communicator> pp) {
    auto tp = pp->split(rank, 0);
    auto stage = makeShardedModel(*full, tp, pp, {0, 1, 4});
    EXPECT_EQ(stage->boundaries(), (std::vector<int>{0, 1, 4}));
    if (rank == 0) {
      EXPECT_EQ(stage->units(), std::make_pair(0, 1));
      expectNear(stage->forward(x), h, "stage 0");
      EXPECT_THROW(stage->forwardUnit(1, h), std::exception);  // stage 1's block
    } else {
      EXPECT_EQ(stage->units(), std::make_pair(1, 4));
      EXPECT_EQ(stage->named_parameters().size(), full->named_parameters().size() - 2);  // all but stem, pos
      expectNear(stage->forward(h), logits, "stage 1");
      auto y = stage->forwardUnit(3, stage->forwardUnit(2, stage->forwardUnit(1, h)));
      EXPECT_TRUE(torch::equal(y, stage->forward(h))) << "forward is the composition of the units";
    }
    for (const std::vector<int>& b : {std::vector<int>{0, 4}, {0, 2, 2, 4}, {0, 1, 5}, {1, 2, 4}, {0, 3, 2}, {0, 0, 4}, {0, 4, 4}}) {
      const auto e = errorOf([&] { makeShardedModel(*full, tp, pp, b); });
      EXPECT_NE(e.find("parallel.pp"), std::string::npos) << e;
    }
  }));
}

// Interleaved chunks: 2 ranks x 2 chunks of one unit each; rank 0 holds the embedding and block 1,
// rank 1 block 0 and the head; each chunk equals the full model's part, the whole-stage forward is
// refused, and every chunk's parameters sit on its rank only.
TEST(StageBounds, InterleavedChunksSitOnEveryPthRank) {
  torch::manual_seed(14);
  const auto full = nn::makeModel(gptSpec(false));  // units: embedding, 2 blocks, head
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const auto x = at::randint(0, 16, {3, 8}, gen);
  const auto logits = full->forward(x).detach();
  const auto params = full->named_parameters();
  const auto h0 = (F::embedding(x, params["stem.weight"]) + params["pos.weight"].narrow(0, 0, 8)).detach();
  expectNoErrors(test::onRankThreads(2, [&](int rank, std::shared_ptr<comm::Communicator> pp) {
    auto tp = pp->split(rank, 0);
    auto stage = makeShardedModel(*full, tp, pp, {}, 2);
    EXPECT_EQ(stage->boundaries(), (std::vector<int>{0, 1, 2, 3, 4}));
    EXPECT_EQ(stage->chunks(), 2);
    EXPECT_EQ(stage->globalChunk(1), 2 + rank);
    EXPECT_THROW(stage->forward(x), std::exception);
    std::vector<std::string> names;
    for (const auto& p : stage->named_parameters()) names.push_back(p.key());
    auto holds = [&](const std::string& prefix) {
      return std::any_of(names.begin(), names.end(), [&](const std::string& n) { return n.rfind(prefix, 0) == 0; });
    };
    // Chunk outputs passed by hand: rank 0's chunk 0 is the embedding, rank 1's chunk 0 block 0,
    // rank 0's chunk 1 block 1, rank 1's chunk 1 the head.
    if (rank == 0) {
      EXPECT_EQ(stage->chunkUnits(0), std::make_pair(0, 1));
      EXPECT_EQ(stage->chunkUnits(1), std::make_pair(2, 3));
      EXPECT_TRUE(holds("stem.") && holds("blocks.1.") && !holds("blocks.0.") && !holds("norm.")) << names.size();
      expectNear(stage->forwardChunk(0, x), h0, "chunk 0");
      EXPECT_THROW(stage->forwardUnit(1, h0), std::exception);  // block 0 is rank 1's
    } else {
      EXPECT_EQ(stage->chunkUnits(0), std::make_pair(1, 2));
      EXPECT_EQ(stage->chunkUnits(1), std::make_pair(3, 4));
      EXPECT_TRUE(holds("blocks.0.") && holds("head.") && !holds("stem.") && !holds("blocks.1.")) << names.size();
    }
    // The composed chunks over both ranks give the full model's logits.
    torch::Tensor a = rank == 0 ? stage->forwardChunk(0, x) : torch::empty({3, 8, 16});
    pp->broadcast(a.data_ptr(), a.numel(), comm::DType::f32, 0);
    torch::Tensor b = rank == 1 ? stage->forwardChunk(0, a).detach().contiguous() : torch::empty({3, 8, 16});
    pp->broadcast(b.data_ptr(), b.numel(), comm::DType::f32, 1);
    torch::Tensor c = rank == 0 ? stage->forwardChunk(1, b).detach().contiguous() : torch::empty({3, 8, 16});
    pp->broadcast(c.data_ptr(), c.numel(), comm::DType::f32, 0);
    if (rank == 1) expectNear(stage->forwardChunk(1, c), logits, "the last chunk's logits");
    for (const std::vector<int>& bad : {std::vector<int>{0, 1, 4}, {0, 1, 2, 2, 4}}) {
      const auto e = errorOf([&] { makeShardedModel(*full, tp, pp, bad, 2); });
      EXPECT_NE(e.find("parallel.virtual_stages"), std::string::npos) << e;
    }
  }));
}

// Stages by parameter count: contiguous, non-empty, the heaviest part as light as possible.
TEST(StageBounds, BalanceByWeight) {
  EXPECT_EQ(stageBounds({5, 10, 10, 10, 10, 5}, 1), (std::vector<int>{0, 6}));
  EXPECT_EQ(stageBounds({5, 10, 10, 10, 10, 5}, 2), (std::vector<int>{0, 3, 6}));
  EXPECT_EQ(stageBounds({5, 10, 10, 10, 5}, 2), (std::vector<int>{0, 3, 5}));  // 25 | 15: uneven layers
  EXPECT_EQ(stageBounds({40, 10, 10, 10, 10}, 2), (std::vector<int>{0, 1, 5}));
  EXPECT_EQ(stageBounds({1, 1, 1}, 3), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(stageBounds({3, 1, 1, 1, 3}, 3), (std::vector<int>{0, 1, 4, 5}));
  const auto e = errorOf([] { stageBounds({1, 1}, 3); });
  EXPECT_NE(e.find("parallel.pp"), std::string::npos) << e;
}

// The world ranks of a communicator's members, in its rank order.
std::vector<double> members(comm::Communicator& c, int world_rank) {
  std::vector<double> all(c.size());
  double me = world_rank;
  c.allgather(&me, all.data(), 1, comm::DType::f64);
  return all;
}

// Ranks 0..7 as dp x pp x tp = 2 x 2 x 2: which ranks share each axis.
TEST(Grid, AxesFollowMegatronsOrder) {
  expectNoErrors(test::onRankThreads(8, [&](int rank, std::shared_ptr<comm::Communicator> world) {
    const Grid g = makeGrid(world, 2, 2);
    EXPECT_EQ(g.dp, 2);
    EXPECT_EQ(g.tp_rank, rank % 2);
    EXPECT_EQ(g.dp_rank, (rank / 2) % 2);
    EXPECT_EQ(g.pp_rank, rank / 4);
    const int base = rank - g.tp_rank;
    EXPECT_EQ(members(*g.tp_comm, rank), (std::vector<double>{double(base), double(base + 1)}));
    const int d0 = rank - 2 * g.dp_rank;
    EXPECT_EQ(members(*g.dp_comm, rank), (std::vector<double>{double(d0), double(d0 + 2)}));
    const int p0 = rank - 4 * g.pp_rank;
    EXPECT_EQ(members(*g.pp_comm, rank), (std::vector<double>{double(p0), double(p0 + 4)}));
    EXPECT_EQ(g.tp_comm->phase(), kTensorParallelPhase);
    EXPECT_EQ(g.pp_comm->phase(), kPipelineParallelPhase);
  }));
}

// The same 2 x 2 x 2 grid with the data-parallel axis fastest, then the pipeline axis fastest.
TEST(Grid, OrderChoosesWhichAxisHoldsNeighbouringRanks) {
  expectNoErrors(test::onRankThreads(8, [&](int rank, std::shared_ptr<comm::Communicator> world) {
    const Grid d = makeGrid(world, 2, 2, "dp-tp-pp");  // rank = (pp * tp + tp_rank) * dp + dp_rank
    EXPECT_EQ(d.order, "dp-tp-pp");
    EXPECT_EQ(d.dp_rank, rank % 2);
    EXPECT_EQ(d.tp_rank, (rank / 2) % 2);
    EXPECT_EQ(d.pp_rank, rank / 4);
    const int d0 = rank - d.dp_rank;
    EXPECT_EQ(members(*d.dp_comm, rank), (std::vector<double>{double(d0), double(d0 + 1)}));
    const int t0 = rank - 2 * d.tp_rank;
    EXPECT_EQ(members(*d.tp_comm, rank), (std::vector<double>{double(t0), double(t0 + 2)}));
    const Grid p = makeGrid(world, 2, 2, "pp-tp-dp");  // rank = (dp * tp + tp_rank) * pp + pp_rank
    EXPECT_EQ(p.pp_rank, rank % 2);
    EXPECT_EQ(p.tp_rank, (rank / 2) % 2);
    EXPECT_EQ(p.dp_rank, rank / 4);
    const int p0 = rank - p.pp_rank;
    EXPECT_EQ(members(*p.pp_comm, rank), (std::vector<double>{double(p0), double(p0 + 1)}));
    const int q0 = rank - 4 * p.dp_rank;
    EXPECT_EQ(members(*p.dp_comm, rank), (std::vector<double>{double(q0), double(q0 + 4)}));
  }));
  for (const char* bad : {"tp-dp", "tp-dp-pp-dp", "tp-tp-pp", "TP-dp-pp", ""}) {
    const auto e = errorOf([&] { gridAxes(bad); });
    EXPECT_NE(e.find("parallel.order"), std::string::npos) << bad << ": " << e;
  }
  EXPECT_EQ(gridAxes("pp-dp-tp"), (std::array<std::string, 3>{"pp", "dp", "tp"}));
}

TEST(Grid, DataParallelOnlyIsTheWorldAndBadSizesNameTheKey) {
  expectNoErrors(test::onRankThreads(4, [&](int, std::shared_ptr<comm::Communicator> world) {
    const Grid g = makeGrid(world, 1, 1);
    EXPECT_EQ(g.dp_comm, world);
    EXPECT_EQ(g.tp_comm, nullptr);
    EXPECT_EQ(g.dp, 4);
    const auto e = errorOf([&] { makeGrid(world, 3, 1); });
    EXPECT_NE(e.find("parallel.tp"), std::string::npos) << e;
    const Grid all_tp = makeGrid(world, 4, 1);
    EXPECT_EQ(all_tp.dp, 1);
    EXPECT_EQ(all_tp.dp_comm->size(), 1);
    EXPECT_EQ(all_tp.tp_comm->size(), 4);
  }));
}

}  // namespace
}  // namespace lowcomm::parallel
