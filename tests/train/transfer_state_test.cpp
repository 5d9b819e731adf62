// The elastic state format (src/train/transfer_state.h): equal state packs to equal bytes in two
// separately built models (torch's archive does not: tensor addresses), unpacking restores the
// weights and the optimizer's moments and step counts, and malformed bytes are a DataError.
#include <gtest/gtest.h>

#include "lowcomm/base/error.h"
#include "lowcomm/nn/models.h"
#include "lowcomm/train/config.h"
#include "lowcomm/train/optim.h"
#include "train/transfer_state.h"

using namespace lowcomm;
using namespace lowcomm::train;

namespace {

struct Replica {
  std::shared_ptr<nn::Model> model;
  std::unique_ptr<torch::optim::Optimizer> opt;
};

Replica replica(const TrainConfig& c, int steps) {
  torch::manual_seed(3);
  nn::ModelSpec spec;
  spec.name = "mlp";
  spec.classes = 10;
  spec.in_channels = 1;
  spec.image_size = 8;
  Replica r{nn::makeModel(spec), nullptr};
  r.opt = makeOptimizer(c, r.model->parameters());
  torch::manual_seed(4);
  for (int s = 0; s < steps; ++s) {
    const auto x = torch::randn({4, 1, 8, 8});
    r.model->forward(x).square().mean().backward();
    r.opt->step();
    r.opt->zero_grad();
  }
  return r;
}

TrainState stateAt(int64_t step) {
  TrainState st;
  st.step = step;
  st.position = {2, 7};
  st.config_hash = 11;
  st.schedule_hash = 13;
  return st;
}

}  // namespace

TEST(TransferState, EqualStatePacksToEqualBytesAndRestores) {
  for (const std::string opt : {"adamw", "sgd"}) {
    const auto c = loadConfig("", {"optimizer.name=" + opt, "optimizer.momentum=0.9"});
    Replica a = replica(c, 3), b = replica(c, 3);
    const std::string pa = packState(*a.model, *a.opt, stateAt(3)), pb = packState(*b.model, *b.opt, stateAt(3));
    ASSERT_EQ(pa, pb) << opt;  // the hash of equal states is equal across processes
    Replica fresh = replica(c, 0);  // a replacement: no optimizer state yet
    const TrainState st = unpackState(pa, "a test donor", *fresh.model, *fresh.opt);
    EXPECT_EQ(st.step, 3);
    EXPECT_EQ(st.position.epoch, 2);
    EXPECT_EQ(st.position.batch, 7);
    EXPECT_EQ(packState(*fresh.model, *fresh.opt, stateAt(3)), pa) << opt;  // weights, moments, step counts
    // One more identical step keeps them identical: the restored optimizer state is live.
    for (Replica* r : {&a, &fresh}) {
      torch::manual_seed(9);
      r->model->forward(torch::randn({4, 1, 8, 8})).square().mean().backward();
      r->opt->step();
    }
    EXPECT_EQ(packState(*fresh.model, *fresh.opt, stateAt(4)), packState(*a.model, *a.opt, stateAt(4))) << opt;
  }
}

TEST(TransferState, MalformedBytesAreADataErrorNamingTheSender) {
  const auto c = loadConfig("", {"optimizer.name=adamw"});
  Replica a = replica(c, 2);
  const std::string good = packState(*a.model, *a.opt, stateAt(2));
  for (const std::string& bad : {std::string(), good.substr(0, 40), good.substr(0, good.size() - 1), good + "x",
                                std::string(good.size(), '\0')}) {
    Replica r = replica(c, 0);
    try {
      unpackState(bad, "slots 1,3 (epoch 5)", *r.model, *r.opt);
      FAIL() << "accepted " << bad.size() << " bytes";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("slots 1,3 (epoch 5)"), std::string::npos) << e.what();
    }
  }
}
