// DataParallel: N ranks (threads) on slices of a batch match one model on the whole batch;
// buckets launch in order with unused parameters; accumulation; consistency checks.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <map>

#include "comm/harness.h"
#include "lowcomm/base/error.h"
#include "lowcomm/parallel/ddp.h"

using namespace lowcomm;
using namespace lowcomm::parallel;

namespace {

std::shared_ptr<torch::nn::Module> mlp(uint64_t seed, int hidden = 16) {
  torch::manual_seed(seed);
  torch::nn::Sequential s(torch::nn::Linear(10, hidden), torch::nn::ReLU(), torch::nn::Linear(hidden, hidden),
                          torch::nn::ReLU(), torch::nn::Linear(hidden, 4));
  return s.ptr();
}

torch::Tensor forward(torch::nn::Module& m, const torch::Tensor& x) {
  return dynamic_cast<torch::nn::SequentialImpl&>(m).forward(x);
}

struct Data {
  torch::Tensor x, y;
};

Data globalBatch(int rows) {
  torch::manual_seed(1234);
  return {torch::randn({rows, 10}), torch::randint(0, 4, {rows}, torch::kInt64)};
}

void sgd(torch::nn::Module& m, double lr) {
  torch::NoGradGuard g;
  for (auto& p : m.parameters()) p.sub_(lr * p.grad());
}

// One model trained on the whole batch (mean loss) for `steps` SGD steps.
std::vector<torch::Tensor> reference(const Data& d, int steps) {
  auto m = mlp(0);
  for (int s = 0; s < steps; ++s) {
    for (auto& p : m->parameters()) p.mutable_grad() = torch::Tensor();
    torch::nn::functional::cross_entropy(forward(*m, d.x), d.y).backward();
    sgd(*m, 0.1);
  }
  return m->parameters();
}

void expectClose(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-6)) << what << ": parameter " << i << " max diff "
                                                         << (a[i] - b[i]).abs().max().item<float>();
}

class DdpWorld : public ::testing::TestWithParam<int> {};

TEST_P(DdpWorld, MatchesOneRankOnTheWholeBatch) {
  const int n = GetParam(), per = 6, steps = 3;
  const Data d = globalBatch(n * per);
  const auto want = reference(d, steps);
  for (bool overlap : {true, false}) {
    auto comms = test::makeComms(n);
    std::vector<std::vector<torch::Tensor>> got(n);
    // Built before the threads start (torch's global RNG is shared). Different initialisations:
    // the broadcast from rank 0 must unify them.
    std::vector<std::shared_ptr<torch::nn::Module>> models;
    for (int r = 0; r < n; ++r) models.push_back(mlp(r == 0 ? 0 : 100 + r));
    test::onRanks(n, [&](int r) {
      auto m = models[r];
      DdpOptions o;
      o.bucket_bytes = 300;  // several buckets
      o.overlap = overlap;
      DataParallel ddp(comms[r], m, o);
      EXPECT_GT(ddp.buckets().size(), 2u);
      const auto x = d.x.narrow(0, r * per, per), y = d.y.narrow(0, r * per, per);
      for (int s = 0; s < steps; ++s) {
        for (auto& p : m->parameters()) p.mutable_grad() = torch::Tensor();
        torch::nn::functional::cross_entropy(forward(*m, x), y).backward();
        ddp.finish();
        sgd(*m, 0.1);
      }
      got[r] = m->parameters();
    });
    for (int r = 0; r < n; ++r) expectClose(got[r], want, "rank " + std::to_string(r) + (overlap ? " overlap" : ""));
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, DdpWorld, ::testing::Values(1, 2, 3, 4));

// Ranks use different heads (data-dependent unused parameters): every rank still ends with the
// same gradients, unused heads counting as zero.
struct TwoHeads : torch::nn::Module {
  TwoHeads() {
    torch::manual_seed(5);
    body = register_module("body", torch::nn::Linear(10, 8));
    a = register_module("a", torch::nn::Linear(8, 4));
    b = register_module("b", torch::nn::Linear(8, 4));
  }
  torch::Tensor forward(const torch::Tensor& x, bool use_a) {
    auto h = torch::relu(body->forward(x));
    return use_a ? a->forward(h) : b->forward(h);
  }
  torch::nn::Linear body{nullptr}, a{nullptr}, b{nullptr};
};

TEST(Ddp, UnusedParametersCountAsZeroAndAllRanksAgree) {
  const int n = 3;
  auto comms = test::makeComms(n);
  std::vector<std::shared_ptr<TwoHeads>> models(n);
  for (auto& m : models) m = std::make_shared<TwoHeads>();
  const Data d = globalBatch(n * 4);
  test::onRanks(n, [&](int r) {
    DdpOptions o;
    o.bucket_bytes = 64;  // one parameter per bucket: unused ones sit between used ones
    DataParallel ddp(comms[r], models[r], o);
    const bool use_a = r != 1;
    torch::nn::functional::cross_entropy(models[r]->forward(d.x.narrow(0, r * 4, 4), use_a), d.y.narrow(0, r * 4, 4))
        .backward();
    ddp.finish();
  });
  for (int r = 1; r < n; ++r) {
    auto p0 = models[0]->parameters(), pr = models[r]->parameters();
    for (size_t i = 0; i < p0.size(); ++i)
      EXPECT_TRUE(torch::equal(p0[i].grad(), pr[i].grad())) << "rank " << r << " parameter " << i;
  }
  // Head b was used by rank 1 only: its gradient is rank 1's divided by 3, nonzero.
  EXPECT_GT(models[0]->b->weight.grad().abs().sum().item<float>(), 0.f);
}

TEST(Ddp, AccumulationSyncsOnlyTheLastMicroBatch) {
  const int n = 2, per = 4;
  const Data d = globalBatch(n * per * 2);
  const auto want = reference(d, 1);
  auto comms = test::makeComms(n);
  std::vector<std::vector<torch::Tensor>> got(n);
  std::vector<std::shared_ptr<torch::nn::Module>> models{mlp(0), mlp(0)};
  test::onRanks(n, [&](int r) {
    auto m = models[r];
    DataParallel ddp(comms[r], m);
    const auto before = comms[r]->meter().snapshot().total.bytes_sent;
    for (int micro = 0; micro < 2; ++micro) {
      ddp.setSync(micro == 1);
      const int64_t row = (micro * n + r) * per;
      // Each micro-batch's mean loss, halved: the sum over micro-batches is the batch mean.
      (torch::nn::functional::cross_entropy(forward(*m, d.x.narrow(0, row, per)), d.y.narrow(0, row, per)) / 2)
          .backward();
      if (micro == 0) {
        EXPECT_EQ(comms[r]->meter().snapshot().total.bytes_sent, before) << "no traffic before sync";
      }
      ddp.finish();
    }
    sgd(*m, 0.1);
    got[r] = m->parameters();
  });
  for (int r = 0; r < n; ++r) expectClose(got[r], want, "rank " + std::to_string(r));
}

TEST(Ddp, DifferentModelsAreAConfigErrorNamingTheParameter) {
  const int n = 2;
  auto comms = test::makeComms(n);
  std::vector<std::string> errors(n);
  std::vector<std::shared_ptr<torch::nn::Module>> models{mlp(0, 16), mlp(0, 17)};
  test::onRanks(n, [&](int r) {
    try {
      DataParallel ddp(comms[r], models[r]);
    } catch (const ConfigError& e) {
      errors[r] = e.what();
    }
  });
  EXPECT_NE(errors[1].find("0.weight"), std::string::npos) << errors[1];
  EXPECT_NE(errors[1].find("rank 1 has"), std::string::npos) << errors[1];
  EXPECT_FALSE(errors[0].empty());
}

// Ranks that built the same model from the same seed exchange only hashes; a rank whose values
// differ in one element gets rank 0's whole model.
TEST(Ddp, BroadcastModelSendsNothingWhenValuesAlreadyMatch) {
  const int n = 3;
  const auto modelBytes = [](torch::nn::Module& m) {
    uint64_t b = 0;
    for (const auto& p : m.parameters()) b += p.numel() * sizeof(float);
    return b;
  };
  for (bool differ : {false, true}) {
    auto comms = test::makeComms(n);
    std::vector<std::shared_ptr<torch::nn::Module>> models{mlp(0), mlp(0), mlp(0)};
    if (differ) {
      torch::NoGradGuard g;
      models[2]->parameters()[1].view({-1})[3] += 1.0f;
    }
    test::onRanks(n, [&](int r) { broadcastModel(*comms[r], *models[r]); });
    const uint64_t sent0 = comms[0]->meter().snapshot().total.bytes_sent;
    if (differ) EXPECT_GE(sent0, modelBytes(*models[0])) << "rank 0 must send its model";
    else EXPECT_LE(sent0, 64u * n) << "only the hashes should cross";
    for (int r = 1; r < n; ++r)
      for (size_t i = 0; i < models[0]->parameters().size(); ++i)
        EXPECT_TRUE(torch::equal(models[r]->parameters()[i], models[0]->parameters()[i]));
  }
}

TEST(Ddp, TraceRecordsEveryBucket) {
  const int n = 2;
  auto comms = test::makeComms(n);
  std::vector<Trace> traces(n);
  std::vector<std::shared_ptr<torch::nn::Module>> models{mlp(0), mlp(0)};
  const Data d = globalBatch(8);
  test::onRanks(n, [&](int r) {
    auto m = models[r];
    DdpOptions o;
    o.bucket_bytes = 300;
    DataParallel ddp(comms[r], m, o, nullptr, &traces[r]);
    torch::nn::functional::cross_entropy(forward(*m, d.x), d.y).backward();
    ddp.finish();
    int comm_events = 0;
    for (const auto& e : traces[r].events()) comm_events += e.cat == "comm";
    EXPECT_EQ(comm_events, static_cast<int>(ddp.buckets().size()));
    EXPECT_GT(ddp.stats().comm_s, 0.0);
  });
}

// The communication thread adds to the stats while buckets are in flight; the training thread may
// read them at any moment (a gradient hook here, the progress line in the trainer). Under the
// ThreadSanitizer build (ctest -R tsan) an unlocked access on either side is a reported race.
TEST(Ddp, StatsAreReadableWhileBucketsAreInFlight) {
  const int n = 2, steps = 3;
  auto comms = test::makeComms(n);
  std::vector<std::shared_ptr<torch::nn::Module>> models{mlp(0), mlp(0)};
  const Data d = globalBatch(8);
  test::onRanks(n, [&](int r) {
    auto m = models[r];
    DdpOptions o;
    o.bucket_bytes = 64;  // one parameter per bucket: the last layers' buckets leave first
    DataParallel ddp(comms[r], m, o);
    std::vector<DdpStats> mid;
    // The first layer's weight gets its gradient last: earlier buckets are on the wire by then.
    m->parameters().front().register_hook([&](const torch::Tensor& g) {
      mid.push_back(ddp.stats());
      return g;
    });
    for (int s = 0; s < steps; ++s) {
      for (auto& p : m->parameters()) p.mutable_grad() = torch::Tensor();
      torch::nn::functional::cross_entropy(forward(*m, d.x), d.y).backward();
      ddp.finish();
    }
    const auto end = ddp.stats();
    ASSERT_EQ(mid.size(), static_cast<size_t>(steps));
    for (int s = 0; s < steps; ++s) {
      EXPECT_EQ(mid[s].buckets, s * static_cast<int64_t>(ddp.buckets().size())) << "step " << s;
      EXPECT_LE(mid[s].comm_s, end.comm_s);
    }
    EXPECT_EQ(end.buckets, steps * static_cast<int64_t>(ddp.buckets().size()));
    EXPECT_GT(end.comm_s, 0.0);
  });
}

// The mode ZeRO-2 builds on: buckets padded to a multiple of 3, each bucket's buffer alive only
// while its hook runs, every .grad released once copied, and finish() writing nothing back. The
// hook still sees the padded local gradients (zeros in the padding) and returns their average.
struct CopyOutHook : BucketHook {
  std::string name() const override { return "copy-out"; }
  void run(comm::Communicator& comm, GradBucket& b) override {
    padding_zero = padding_zero && b.flat.numel() % 3 == 0 &&
                   b.flat.narrow(0, b.offsets.back(), b.flat.numel() - b.offsets.back()).abs().sum().item<float>() == 0;
    comm.allreduce(b.flat.data_ptr<float>(), b.flat.numel(), comm::DType::f32, comm::ReduceOp::avg);
    out[b.index] = b.flat.clone();
  }
  std::map<int, torch::Tensor> out;
  bool padding_zero = true;
};

TEST(Ddp, ReleasedGradientsAndTransientBucketsStillAverage) {
  const int n = 3, per = 4;
  const Data d = globalBatch(n * per);
  auto want = mlp(0);
  torch::nn::functional::cross_entropy(forward(*want, d.x), d.y).backward();
  auto comms = test::makeComms(n);
  std::vector<std::shared_ptr<torch::nn::Module>> models{mlp(0), mlp(0), mlp(0)};
  test::onRanks(n, [&](int r) {
    DdpOptions o;
    o.bucket_bytes = 300;
    o.release_grads = true;
    o.grads_to_params = false;
    o.pad_to = 3;
    auto hook = std::make_shared<CopyOutHook>();
    DataParallel ddp(comms[r], models[r], o, hook);
    EXPECT_EQ(ddp.bufferBytes(), 0);
    for (int s = 0; s < 2; ++s) {  // the second step re-creates the buffers
      torch::nn::functional::cross_entropy(forward(*models[r], d.x.narrow(0, r * per, per)), d.y.narrow(0, r * per, per))
          .backward();
      ddp.finish();
      EXPECT_EQ(ddp.bufferBytes(), 0) << "step " << s;
      for (const auto& p : models[r]->parameters()) EXPECT_FALSE(p.grad().defined()) << "step " << s;
    }
    EXPECT_TRUE(hook->padding_zero);
    const auto params = ddp.parameters();
    const auto ref = want->parameters();
    ASSERT_EQ(hook->out.size(), ddp.buckets().size());
    for (const auto& b : ddp.buckets()) {
      EXPECT_EQ(hook->out[b.index].numel(), ddp.bucketElems(b.index));
      for (size_t k = 0; k < b.params.size(); ++k) {
        const auto got = hook->out[b.index].narrow(0, b.offsets[k], params[b.params[k]].numel());
        EXPECT_TRUE(torch::allclose(got, ref[b.params[k]].grad().reshape({-1}), 1e-5, 1e-6)) << b.names[k];
      }
    }
  });
}

}  // namespace

// A DataParallel rebuilt over the same model (local SGD's phases, a heal under --elastic) leaves
// one hook per parameter: while anything else holds the gradient accumulators (an autograd graph
// still alive), the destroyed one's hooks would stay on them and call into freed memory.
TEST(Ddp, ADestroyedDataParallelLeavesNoHookBehind) {
  auto model = mlp(3);
  net::TransportOptions t;
  t.address = "127.0.0.1";
  auto world = comm::Communicator::create(std::make_shared<net::MemoryStore>(), 0, 1, {}, t);
  std::vector<std::shared_ptr<torch::autograd::Node>> held;  // as a live graph would
  for (auto& p : model->parameters()) held.push_back(torch::autograd::impl::grad_accumulator(p));
  auto hooks = [&] {
    size_t n = 0;
    for (auto& acc : held) n += acc->post_hooks().size();
    return n;
  };
  const size_t before = hooks();
  { DataParallel a(world, model); }
  EXPECT_EQ(hooks(), before);
  DataParallel b(world, model);
  EXPECT_EQ(hooks(), before + model->parameters().size());
  const Data d = globalBatch(8);
  auto loss = torch::nn::functional::cross_entropy(forward(*model, d.x), d.y);
  loss.backward();
  b.finish();  // only b's hooks ran
}

// DDP on the caller's communicator (no split, as the trainer under --elastic builds it): the
// gradient traffic is labelled "grad", the caller's own traffic keeps the caller's label.
TEST(Ddp, OnTheCallersCommunicatorLabelsOnlyItsOwnCalls) {
  const int n = 2, per = 4;
  const Data d = globalBatch(n * per);
  const auto want = reference(d, 1);
  auto comms = test::makeComms(n);
  std::vector<std::vector<torch::Tensor>> got(n);
  std::vector<std::shared_ptr<torch::nn::Module>> models{mlp(0), mlp(0)};
  test::onRanks(n, [&](int r) {
    auto m = models[r];
    DdpOptions o;
    o.split_comm = false;
    o.label_own_calls = true;
    DataParallel ddp(comms[r], m, o);
    EXPECT_EQ(comms[r]->phase(), "");
    torch::nn::functional::cross_entropy(forward(*m, d.x.narrow(0, r * per, per)), d.y.narrow(0, r * per, per)).backward();
    ddp.finish();
    EXPECT_EQ(comms[r]->phase(), "");
    float x = 1.f;
    comms[r]->allreduce(&x, 1, comm::DType::f32, comm::ReduceOp::sum);  // the caller's, between steps
    sgd(*m, 0.1);
    got[r] = m->parameters();
  });
  for (int r = 0; r < n; ++r) {
    expectClose(got[r], want, "rank " + std::to_string(r));
    const auto snap = comms[r]->meter().snapshot();
    ASSERT_TRUE(snap.by_phase.count("grad"));
    EXPECT_GT(snap.by_phase.at("grad").bytes_sent, 0u);
    ASSERT_TRUE(snap.by_phase.count(""));
    EXPECT_GT(snap.by_phase.at("").bytes_sent, 0u);
  }
}
