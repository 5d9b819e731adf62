// `lowcomm bench train`: 1-process training throughput of `lowcomm train` against a plain
// LibTorch loop (same model, data, batch, optimizer) measured in the same process and run.
#include <CLI/CLI.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "lowcomm/base/error.h"
#include "lowcomm/data/dataset.h"
#include "lowcomm/data/loader.h"
#include "lowcomm/nn/models.h"
#include "lowcomm/runtime/worker.h"
#include "lowcomm/train/trainer.h"

namespace lowcomm::cli {

namespace {

using Clock = std::chrono::steady_clock;

// The reference: the loop a LibTorch user writes by hand.
double plainLoop(const train::TrainConfig& c, const data::Dataset& ds, int64_t warmup, int64_t steps) {
  torch::manual_seed(c.seed);
  nn::ModelSpec spec{c.model.name, static_cast<int>(ds.channels()), static_cast<int>(ds.height()), ds.classes};
  spec.width = c.model.width, spec.dropout = c.model.dropout, spec.init = c.model.init;
  auto model = nn::makeModel(spec);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(c.optimizer.lr)
                                                 .momentum(c.optimizer.momentum)
                                                 .nesterov(c.optimizer.nesterov)
                                                 .weight_decay(c.optimizer.weight_decay));
  data::BatchLoader loader(ds, 0, 1, c.data.batch_size, c.seed);
  loader.startEpoch(0);
  model->train();
  Clock::time_point t0;
  data::Batch b;
  for (int64_t s = 0; s < warmup + steps; ++s) {
    if (s == warmup) t0 = Clock::now();
    if (!loader.next(b)) {
      loader.startEpoch(loader.position().epoch + 1);
      loader.next(b);
    }
    auto loss = torch::nn::functional::cross_entropy(model->forward(b.x), b.y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  return static_cast<double>(steps * c.data.batch_size) / std::chrono::duration<double>(Clock::now() - t0).count();
}

// lowcomm train on one process; throughput from its JSONL step windows after warm-up.
double lowcommTrain(train::TrainConfig c, int64_t warmup, int64_t steps, const std::string& dir) {
  c.schedule.max_steps = warmup + steps;
  c.schedule.epochs = 1000;
  c.schedule.warmup_steps = 0;
  c.logging.log_every = warmup;
  c.logging.progress = false;
  c.logging.out_dir = dir;
  c.data.test_limit = c.data.test_batch_size;
  net::TransportOptions t;
  t.address = "127.0.0.1";
  auto world = comm::Communicator::create(std::make_shared<net::MemoryStore>(), 0, 1, {}, t);
  train::runTraining(c, world, {});
  std::ifstream f(std::filesystem::path(dir) / "metrics.jsonl");
  double samples = 0, seconds = 0;
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] != "step" || j["step"].get<int64_t>() <= warmup) continue;
    const double sps = j["samples_per_s"].get<double>();
    samples += static_cast<double>(warmup * c.data.batch_size);
    seconds += static_cast<double>(warmup * c.data.batch_size) / sps;
  }
  if (seconds <= 0) throw Error("bench train: no step records after warm-up in " + dir);
  return samples / seconds;
}

}  // namespace

int benchTrain(int argc, char** argv) {
  std::string config, json, dir = "runs/bench_train";
  std::vector<std::string> sets;
  int64_t steps = 200, warmup = 20;
  int rounds = 2;
  CLI::App app{"Training throughput: lowcomm train vs a plain LibTorch loop, 1 process", "lowcomm bench train"};
  app.add_option("--config", config, "TOML configuration (model, data, batch, optimizer)");
  app.add_option("--set", sets, "override a key: section.key=value");
  app.add_option("--steps", steps, "timed steps per measurement")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps first")->capture_default_str();
  app.add_option("--rounds", rounds, "alternate the two loops this many times")->capture_default_str();
  app.add_option("--json", json, "write the results here");
  app.add_option("--dir", dir, "scratch output directory for the lowcomm runs")->capture_default_str();
  if (!parseArgs(app, argc, argv)) return 0;
  const auto cfg = train::loadConfig(config, sets);
  if (cfg.data.dataset == "text")
    throw ConfigError("data.dataset: lowcomm bench train compares image classifiers with a plain LibTorch loop; "
                      "the text data set is not supported here (time it with lowcomm train)");
  runtime::pinTorchThreads(1);
  auto ds = data::loadDataset(cfg.data.dataset, cfg.data.dir, true, cfg.seed);
  if (cfg.data.train_limit > 0) ds = ds.take(cfg.data.train_limit);
  nlohmann::json rows = nlohmann::json::array();
  double best_plain = 0, best_ours = 0;
  for (int r = 0; r < rounds; ++r) {
    const double plain = plainLoop(cfg, ds, warmup, steps);
    const double ours = lowcommTrain(cfg, warmup, steps, dir);
    best_plain = std::max(best_plain, plain);
    best_ours = std::max(best_ours, ours);
    std::printf("round %d: plain LibTorch %.0f samples/s, lowcomm train %.0f samples/s (%.3f)\n", r + 1, plain, ours,
                ours / plain);
    rows.push_back({{"round", r + 1}, {"plain_samples_per_s", plain}, {"lowcomm_samples_per_s", ours}});
  }
  std::printf("best: plain %.0f, lowcomm %.0f samples/s: lowcomm at %.1f %% of plain (model %s, batch %lld)\n",
              best_plain, best_ours, 100.0 * best_ours / best_plain, cfg.model.name.c_str(),
              static_cast<long long>(cfg.data.batch_size));
  if (!json.empty())
    std::ofstream(json) << nlohmann::json{{"model", cfg.model.name}, {"batch", cfg.data.batch_size}, {"rounds", rows},
                                          {"ratio_best", best_ours / best_plain}}
                               .dump(1)
                        << "\n";
  return 0;
}

}  // namespace lowcomm::cli
