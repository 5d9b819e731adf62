#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lowcomm/base/error.h"
#include "lowcomm/parallel/ab_training.h"
#include "lowcomm/train/config.h"

using namespace lowcomm;
using namespace lowcomm::train;
namespace fs = std::filesystem;

namespace {
const parallel::AbOptions& ab(const TrainConfig& c) { return c.section<parallel::AbOptions>("ab"); }

std::string writeToml(const std::string& text) {
  const auto p = fs::temp_directory_path() / ("lc_cfg_" + std::to_string(::getpid()) + "_" +
                                              std::to_string(std::hash<std::string>{}(text)) + ".toml");
  std::ofstream(p) << text;
  return p.string();
}

std::string errorOf(const std::string& text, std::vector<std::string> sets = {}) {
  try {
    loadConfig(text.empty() ? "" : writeToml(text), sets);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Config, ShippedConfigsLoad) {
  for (const char* name : {"fmnist_cnn_ddp.toml", "fmnist_vgg_ddp.toml", "fmnist_cnn_ab.toml", "fmnist_vgg_ab.toml",
                           "fmnist_vgg16timm_ddp.toml", "fmnist_vgg16timm_ab.toml", "fmnist_vit_ddp.toml",
                           "fmnist_vit_ab.toml", "text_gpt.toml"}) {
    const auto c = loadConfig(std::string(LC_SOURCE_DIR) + "/configs/" + name);
    EXPECT_FALSE(c.model.name.empty()) << name;
  }
}

// Each AB config's baseline is the DDP config: identical but for the strategy, [ab] and the
// output directory.
TEST(Config, AbConfigsDifferFromTheirDdpBaselinesOnlyInStrategy) {
  for (const char* model : {"cnn", "vgg", "vgg16timm", "vit"}) {
    const std::string dir = std::string(LC_SOURCE_DIR) + "/configs/fmnist_" + model;
    const auto ab = loadConfig(dir + "_ab.toml");
    auto ddp = loadConfig(dir + "_ddp.toml");
    EXPECT_EQ(ab.strategy.name, "ab") << model;
    EXPECT_EQ(ddp.strategy.name, "ddp") << model;
    ddp.strategy.name = ab.strategy.name;
    ddp.strategy_options.at("ab") = ab.strategy_options.at("ab");
    ddp.logging.out_dir = ab.logging.out_dir;
    EXPECT_EQ(toToml(ddp), toToml(ab)) << model;
  }
}

// Each `--set key=value` is a ConfigError naming the key.
void expectKeyErrors(const std::vector<std::string>& sets) {
  for (const auto& bad : sets) {
    try {
      loadConfig("", {bad});
      ADD_FAILURE() << bad << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(bad.substr(0, bad.find('='))), std::string::npos) << e.what();
    }
  }
}

// The reference-setup config keeps the reference's proportions: its step fractions give the
// reference's counts at the reference's 15,000 steps, and 14 syncs at ours as at theirs.
TEST(Config, Vgg16TimmConfigKeepsTheReferenceFractions) {
  const auto c = loadConfig(std::string(LC_SOURCE_DIR) + "/configs/fmnist_vgg16timm_ab.toml");
  EXPECT_EQ(c.model.init, "ortho-sigma");
  EXPECT_EQ(c.model.autocast, "bf16");
  EXPECT_EQ(ab(c).sync_mode, "only-b");
  EXPECT_EQ(ab(c).group_size, -2);  // "node"
  EXPECT_EQ(c.optimizer.name, "adamw");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.003);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_EQ(runSteps(c.schedule.warmup_steps, 15000), 1000);
  EXPECT_EQ(ab(c).warmup_steps.of(15000), 4330);
  EXPECT_EQ(ab(c).steps_btw_syncing.of(15000), 759);
  EXPECT_EQ(ab(c).ddp_steps_after_sync.of(15000), 60);
  EXPECT_EQ(ab(c).lr_rebound_steps.of(15000), 267);
  const int64_t total = c.schedule.max_steps, warm = ab(c).warmup_steps.of(total),
                every = ab(c).steps_btw_syncing.of(total);
  int syncs = 0;
  for (int64_t s = warm + 1; s < total; ++s) syncs += s % every == 0;
  EXPECT_EQ(syncs, 14);
}

TEST(Config, StepKeysTakeCountsOrFractions) {
  auto c = loadConfig("", {"ab.warmup_steps=0.25", "ab.steps_btw_syncing=40", "schedule.warmup_steps=0"});
  EXPECT_EQ(ab(c).warmup_steps.of(1000), 250);
  EXPECT_EQ(ab(c).warmup_steps.of(2), 1);  // at least one step
  EXPECT_EQ(ab(c).steps_btw_syncing.of(1000), 40);
  EXPECT_EQ(runSteps(c.schedule.warmup_steps, 1000), 0);
  // The resolved file loads back to the same values.
  const auto again = loadConfig(writeToml(toToml(c)));
  EXPECT_EQ(toToml(again), toToml(c));
  expectKeyErrors({"ab.warmup_steps=1.5", "ab.warmup_steps=-3", "ab.lr_rebound_steps=1.0", "ab.steps_btw_syncing=0"});
}

TEST(Config, AbGroupSizeNamesAndNewKeys) {
  EXPECT_EQ(ab(loadConfig("", {"ab.group_size=node"})).group_size, -2);
  EXPECT_EQ(ab(loadConfig("", {"ab.group_size=world"})).group_size, -3);
  EXPECT_EQ(ab(loadConfig("", {"ab.group_size=-1"})).group_size, -1);
  EXPECT_EQ(ab(loadConfig("", {"ab.group_size=4"})).group_size, 4);
  const auto c = loadConfig("", {"ab.group_size=world", "ab.train_setup=individual", "ab.reset_opt=true",
                                 "model.autocast=bf16", "model.init=ortho-sigma", "model.width=0.25"});
  EXPECT_EQ(toToml(loadConfig(writeToml(toToml(c)))), toToml(c));
  expectKeyErrors({"ab.group_size=-2", "ab.group_size=0", "ab.group_size=rack", "ab.train_setup=alone",
                   "model.autocast=fp16", "model.init=xavier", "model.width=0", "model.dropout=1", "ab.svd=qr"});
}

TEST(Config, FileValuesAndOverrides) {
  const auto path = writeToml("seed = 7\n[model]\nname = \"mlp\"\n[optimizer]\nlr = 0.5\nnesterov = true\n");
  auto c = loadConfig(path, {"optimizer.lr=0.25", "data.dataset=synthetic", "schedule.epochs=3"});
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.model.name, "mlp");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.25);
  EXPECT_TRUE(c.optimizer.nesterov);
  EXPECT_EQ(c.data.dataset, "synthetic");  // a bare word is a string
  EXPECT_EQ(c.schedule.epochs, 3);
}

TEST(Config, ErrorsNameTheFileAndKey) {
  std::string e = errorOf("[model]\nnmae = \"cnn\"\n");
  EXPECT_NE(e.find("model.nmae"), std::string::npos) << e;
  EXPECT_NE(e.find(".toml"), std::string::npos) << e;
  e = errorOf("[optimizer]\nlr = \"fast\"\n");
  EXPECT_NE(e.find("optimizer.lr"), std::string::npos) << e;
  e = errorOf("[optimizer]\nlr = -1.0\n");
  EXPECT_NE(e.find("optimizer.lr"), std::string::npos) << e;
  e = errorOf("[schedule]\nname = \"linear\"\n");
  EXPECT_NE(e.find("schedule.name"), std::string::npos) << e;
  EXPECT_NE(e.find("cosine"), std::string::npos) << e;
  e = errorOf("[data\nbatch_size = 3\n");
  EXPECT_FALSE(e.empty());  // TOML syntax error with line:column
  e = errorOf("", {"data.batch_size=0"});
  EXPECT_NE(e.find("data.batch_size"), std::string::npos) << e;
  e = errorOf("", {"nokey"});
  EXPECT_NE(e.find("--set"), std::string::npos) << e;
  e = errorOf("", {"comm.algo=fastest"});
  EXPECT_NE(e.find("comm.algo"), std::string::npos) << e;
  e = errorOf("", {"comm.allgather=tree"});  // an algorithm, but not an allgather's
  EXPECT_NE(e.find("comm.allgather"), std::string::npos) << e;
}

// Every numeric key has a range: a value LibTorch would reject later (AdamW's betas), one that
// overflows a deadline or an allocation, or a non-finite one is a config error naming the key.
TEST(Config, NumericKeysOutOfRangeNameTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[optimizer]\nbeta1 = 1.0\n", "optimizer.beta1"},
      {"[optimizer]\nbeta2 = -0.1\n", "optimizer.beta2"},
      {"[optimizer]\neps = 0.0\n", "optimizer.eps"},
      {"[optimizer]\nlr = inf\n", "optimizer.lr"},
      {"[optimizer]\nlr = nan\n", "optimizer.lr"},
      {"[optimizer]\nweight_decay = inf\n", "optimizer.weight_decay"},
      {"[schedule]\ngamma = 0.0\n", "schedule.gamma"},
      {"[schedule]\nmin_lr = 1.0\n", "schedule.min_lr"},  // above optimizer.lr (0.05)
      {"[schedule]\nmin_lr = -1e-5\n", "schedule.min_lr"},
      {"[strategy]\nbucket_mb = inf\n", "strategy.bucket_mb"},
      {"[comm]\ntimeout_s = 99999999999999\n", "comm.timeout_s"},
  };
  for (const auto& [text, key] : cases) {
    const std::string e = errorOf(text);
    EXPECT_NE(e.find("'" + key + "'"), std::string::npos) << text << " gave: " << e;
  }
  EXPECT_EQ(errorOf("[optimizer]\nbeta1 = 0.0\nbeta2 = 0.95\n[schedule]\nmin_lr = 0.05\ngamma = 1.0\n"), "");
}

// Every integer key has a range that fits the narrowest type it is read into: model.dim =
// 4294967424 (2^32 + 128) must not become a width-128 model, and no key wraps around.
TEST(Config, IntegerKeysOutOfRangeNameTheKeyAndTheRange) {
  const std::vector<std::string> keys = {
      "model.vit_patch", "model.vit_depth", "model.layers", "model.dim", "model.heads", "model.seq_len",
      "model.vocab", "data.batch_size", "data.test_batch_size", "data.train_limit", "data.test_limit",
      "schedule.epochs", "schedule.max_steps", "schedule.warmup_steps", "schedule.step_size",
      "strategy.accumulation", "strategy.zero", "parallel.tp", "parallel.pp", "parallel.micro_batches",
      "parallel.virtual_stages", "ab.group_size", "ab.warmup_steps", "ab.steps_btw_syncing",
      "ab.ddp_steps_after_sync", "ab.lr_rebound_steps", "local_sgd.period", "local_sgd.start_step",
      "diloco.period", "gossip.period", "gossip.consensus_every", "ssp.staleness", "fault.slow_rank",
      "compress.levels", "compress.block", "compress.min_numel", "compress.rank", "compress.start_step",
      "compress.auto_trial_steps", "compress.auto_recheck_every", "comm.timeout_s", "logging.log_every",
      "logging.eval_every", "checkpoint.every_steps", "checkpoint.keep_last"};
  for (const auto& key : keys) {
    for (const std::string value : {"4294967424", "-4294967296"}) {
      const std::string e = errorOf("", {key + "=" + value});
      EXPECT_NE(e.find("'" + key + "'"), std::string::npos) << key << "=" << value << " gave: " << e;
      EXPECT_NE(e.find("must be in ["), std::string::npos) << key << "=" << value << " gave: " << e;
      EXPECT_NE(e.find(value), std::string::npos) << key << "=" << value << " gave: " << e;
    }
  }
  const std::string e = errorOf("[model]\ndim = 4294967424\n");
  EXPECT_NE(e.find("'model.dim' must be in [1, "), std::string::npos) << e;
  EXPECT_NE(e.find(".toml"), std::string::npos) << e;
  EXPECT_EQ(loadConfig("", {"model.dim=256", "seed=4294967424"}).model.dim, 256);  // a seed is 64 bits
}

// The language model and the text data set come together; their keys are checked where they are
// read, naming the key.
TEST(Config, TextAndGptKeys) {
  const auto c = loadConfig(std::string(LC_SOURCE_DIR) + "/configs/text_gpt.toml",
                            {"model.layers=2", "model.tied=true", "data.glob=*/*.txt"});
  EXPECT_EQ(c.model.name, "gpt");
  EXPECT_EQ(c.model.layers, 2);
  EXPECT_TRUE(c.model.tied);
  EXPECT_EQ(c.data.glob, "*/*.txt");
  EXPECT_EQ(loadConfig(writeToml(toToml(c))).data.glob, "*/*.txt");
  const std::string text = "[model]\nname = \"gpt\"\n[data]\ndataset = \"text\"\ndir = \"/tmp\"\n";
  EXPECT_EQ(errorOf(text), "");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"model.heads=3"}, "'model.heads'"},        // does not divide dim 128
      {{"model.dim=0"}, "'model.dim'"},
      {{"model.layers=0"}, "'model.layers'"},
      {{"model.seq_len=0"}, "'model.seq_len'"},
      {{"model.vocab=512"}, "'model.vocab'"},       // the bytes are 256 tokens
      {{"data.augment=true"}, "'data.augment'"},
      {{"data.glob="}, "'data.glob'"},
      {{"model.name=cnn"}, "'model.name'"},         // an image model on text
  };
  for (const auto& [sets, key] : cases) {
    const std::string e = errorOf(text, sets);
    EXPECT_NE(e.find(key), std::string::npos) << sets[0] << " gave: " << e;
  }
  const std::string e = errorOf("[model]\nname = \"gpt\"\n");  // on Fashion-MNIST
  EXPECT_NE(e.find("'data.dataset'"), std::string::npos) << e;
}

// The model-parallel grid: gpt with any strategy on the dp axis, micro-batches only for a pipeline that divides the batch.
TEST(Config, ParallelKeys) {
  const auto c = loadConfig(std::string(LC_SOURCE_DIR) + "/configs/text_gpt.toml",
                            {"parallel.tp=2", "parallel.pp=2", "parallel.micro_batches=4", "parallel.schedule=gpipe",
                             "parallel.order=dp-tp-pp", "parallel.balance=time"});
  const auto inter = loadConfig(std::string(LC_SOURCE_DIR) + "/configs/text_gpt.toml",
                                {"parallel.pp=2", "parallel.schedule=interleaved", "parallel.virtual_stages=3",
                                 "parallel.micro_batches=4"});
  EXPECT_EQ(loadConfig(writeToml(toToml(inter))).parallel.virtual_stages, 3);
  EXPECT_EQ(c.parallel.tp, 2);
  EXPECT_EQ(c.parallel.balance, "time");
  EXPECT_EQ(c.parallel.pp, 2);
  EXPECT_EQ(c.parallel.micro_batches, 4);
  EXPECT_EQ(c.parallel.schedule, "gpipe");
  const auto back = loadConfig(writeToml(toToml(c)));
  EXPECT_EQ(back.parallel.pp, 2);
  EXPECT_EQ(back.parallel.schedule, "gpipe");
  EXPECT_EQ(back.parallel.order, "dp-tp-pp");
  EXPECT_EQ(back.parallel.balance, "time");
  EXPECT_EQ(loadConfig(std::string(LC_SOURCE_DIR) + "/configs/text_gpt.toml").parallel.order, "tp-dp-pp");
  const std::string text = "[model]\nname = \"gpt\"\n[data]\ndataset = \"text\"\ndir = \"/tmp\"\nbatch_size = 16\n";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"parallel.tp=0"}, "'parallel.tp'"},
      {{"parallel.pp=0"}, "'parallel.pp'"},
      {{"parallel.schedule=zigzag"}, "'parallel.schedule'"},
      {{"parallel.order=tp-dp"}, "'parallel.order'"},
      {{"parallel.order=tp-tp-pp"}, "'parallel.order'"},
      {{"parallel.micro_batches=2"}, "'parallel.micro_batches'"},                       // no pipeline
      {{"parallel.pp=2", "parallel.balance=flops"}, "'parallel.balance'"},
      {{"parallel.balance=time"}, "'parallel.balance'"},                                // no pipeline
      {{"parallel.pp=2", "parallel.micro_batches=3"}, "'parallel.micro_batches'"},     // 3 does not divide 2 x 16
      {{"parallel.pp=2", "parallel.virtual_stages=2"}, "'parallel.virtual_stages'"},     // not interleaved
      {{"parallel.pp=2", "parallel.schedule=interleaved"}, "'parallel.virtual_stages'"},  // one chunk per rank
      {{"parallel.schedule=interleaved", "parallel.virtual_stages=2"}, "'parallel.schedule'"},  // no pipeline
      {{"parallel.pp=2", "parallel.schedule=interleaved", "parallel.virtual_stages=0"}, "'parallel.virtual_stages'"},
      {{"parallel.pp=4", "parallel.schedule=interleaved", "parallel.virtual_stages=2", "parallel.micro_batches=2"},
       "'parallel.micro_batches'"},  // not a multiple of pp
      {{"parallel.pp=2", "parallel.schedule=interleaved", "parallel.virtual_stages=2", "parallel.micro_batches=2",
        "strategy.name=ab"},
       "'parallel.virtual_stages'"},
  };
  for (const auto& [sets, key] : cases) {
    const std::string e = errorOf(text, sets);
    EXPECT_NE(e.find(key), std::string::npos) << sets.back() << " gave: " << e;
  }
  EXPECT_EQ(errorOf(text, {"parallel.tp=2", "parallel.pp=2", "parallel.micro_batches=4"}), "");
  EXPECT_EQ(errorOf(text, {"parallel.pp=2", "parallel.schedule=interleaved", "parallel.virtual_stages=3",
                           "parallel.micro_batches=4", "strategy.zero=1"}),
            "");
  EXPECT_EQ(errorOf(text, {"parallel.tp=2", "strategy.zero=2"}), "");  // ZeRO on the data-parallel axis
  EXPECT_EQ(errorOf(text, {"parallel.pp=2", "strategy.name=ab"}), "");  // AB-training on the dp axis
  EXPECT_EQ(errorOf(text, {"parallel.tp=2", "strategy.name=ab"}), "");
  EXPECT_EQ(errorOf(text, {"parallel.pp=2", "strategy.name=local_sgd"}), "");  // relaxed sync on the dp axis
  EXPECT_EQ(errorOf(text, {"parallel.tp=2", "strategy.name=diloco"}), "");
  EXPECT_EQ(errorOf(text, {"parallel.pp=2", "strategy.name=gossip"}), "");
  EXPECT_EQ(errorOf(text, {"parallel.tp=2", "strategy.name=ssp"}), "");
  const std::string image = errorOf("", {"parallel.tp=2"});  // the default cnn
  EXPECT_NE(image.find("'parallel.tp'"), std::string::npos) << image;
}

TEST(Config, ResolvedTomlLoadsBackToTheSameValues) {
  auto c = loadConfig("", {"model.name=vgg11", "optimizer.lr=0.125", "strategy.overlap=false", "data.dir=/x y/z",
                           "schedule.min_lr=1e-5"});
  const auto back = loadConfig(writeToml(toToml(c)));
  EXPECT_EQ(toToml(back), toToml(c));
  EXPECT_EQ(back.model.name, "vgg11");
  EXPECT_EQ(back.data.dir, "/x y/z");
  EXPECT_FALSE(back.strategy.overlap);
  EXPECT_DOUBLE_EQ(back.schedule.min_lr, 1e-5);
}

TEST(Config, CompressSection) {
  auto c = loadConfig("", {"compress.codec=topk", "compress.ratio=0.02", "compress.exclude=[\"head\", \"stem\"]",
                           "compress.auto_candidates=bf16,powersgd"});
  EXPECT_EQ(c.compress.codec, "topk");
  EXPECT_DOUBLE_EQ(c.compress.codec_params.ratio, 0.02);
  EXPECT_EQ(c.compress.exclude, (std::vector<std::string>{"head", "stem"}));
  EXPECT_EQ(c.compress.auto_candidates, (std::vector<std::string>{"bf16", "powersgd"}));
  std::string e = errorOf("[compress]\ncodec = \"top-k\"\n");
  EXPECT_NE(e.find("compress.codec"), std::string::npos) << e;
  EXPECT_NE(e.find("powersgd"), std::string::npos) << e;  // lists the valid names
  e = errorOf("", {"compress.ratio=0"});
  EXPECT_NE(e.find("compress.ratio"), std::string::npos) << e;
  e = errorOf("", {"compress.exclude=[1, 2]"});
  EXPECT_NE(e.find("compress.exclude"), std::string::npos) << e;
  e = errorOf("", {"compress.auto_candidates=auto"});
  EXPECT_NE(e.find("compress.auto_candidates"), std::string::npos) << e;
  // DGC carries momentum itself; SGD momentum on top is refused with the fix in the message.
  e = errorOf("", {"compress.codec=dgc", "optimizer.momentum=0.9"});
  EXPECT_NE(e.find("optimizer.momentum = 0"), std::string::npos) << e;
  EXPECT_EQ(errorOf("", {"compress.codec=dgc", "optimizer.momentum=0", "optimizer.nesterov=false"}), "");
  // Error feedback over a quantiser that is not contractive diverges: refused before training.
  e = errorOf("", {"compress.codec=qsgd", "compress.levels=7", "compress.block=256", "compress.memory=residual"});
  EXPECT_NE(e.find("compress.memory"), std::string::npos) << e;
  EXPECT_NE(e.find("not contractive"), std::string::npos) << e;
  EXPECT_EQ(errorOf("", {"compress.codec=qsgd", "compress.levels=7", "compress.block=32", "compress.memory=residual"}), "");
  EXPECT_EQ(errorOf("", {"compress.codec=qsgd", "compress.levels=7", "compress.block=256"}), "");
  e = errorOf("", {"optimizer.name=adamw", "optimizer.sign=true"});
  EXPECT_NE(e.find("optimizer.sign"), std::string::npos) << e;
}
