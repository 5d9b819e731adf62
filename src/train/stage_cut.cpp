#include "stage_cut.h"

#include <cstdio>

#include "lowcomm/base/error.h"
#include "lowcomm/parallel/sharded_model.h"
#include "lowcomm/parallel/stage_balance.h"
#include "lowcomm/train/checkpoint.h"

namespace lowcomm::train {
namespace {

std::string list(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return "[" + s + "]";
}

// The boundaries the latest checkpoint recorded (empty: none), the same on every rank.
std::vector<int> checkpointBounds(comm::Communicator& world, const std::string& ckpt_dir) {
  std::vector<int64_t> b;
  if (world.rank() == 0) {
    const int64_t step = readLatest(ckpt_dir);
    if (step >= 0) b = readCheckpointStageBounds(checkpointFile(ckpt_dir, step, 0));
  }
  int64_t n = static_cast<int64_t>(b.size());
  world.broadcast(&n, 1, comm::DType::i64, 0);
  b.resize(n);
  if (n > 0) world.broadcast(b.data(), b.size(), comm::DType::i64, 0);
  return std::vector<int>(b.begin(), b.end());
}

}  // namespace

nlohmann::json StageCut::json(const std::string& balance) const {
  return {{"balance", balance}, {"boundaries", bounds}, {"unit_weights", unit_weights}, {"unit_weight", weight_unit}};
}

StageCut cutStages(const TrainConfig& cfg, const nn::Model& full, comm::Communicator& world, int pp,
                   const std::string& ckpt_dir, bool resuming) {
  StageCut cut;
  if (pp <= 1) return cut;
  if (cfg.parallel.balance == "params") {
    cut.unit_weights = parallel::unitParameters(full);
    cut.weight_unit = "parameters";
  } else {
    if (resuming) cut.bounds = checkpointBounds(world, ckpt_dir);
    if (!cut.bounds.empty()) {
      cut.weight_unit = "checkpoint";
      return cut;
    }
    const auto& p = cfg.parallel;
    const int64_t micro_batch = cfg.data.batch_size * p.tp * p.pp / p.micro_batches;
    cut.unit_weights = parallel::measuredUnitTimes(full, world, micro_batch, /*reps=*/5);
    cut.weight_unit = "us";
  }
  cut.bounds = parallel::stageBounds(cut.unit_weights, pp);
  if (world.rank() == 0 && cut.weight_unit == "us") {
    std::string t;
    for (auto x : cut.unit_weights) t += (t.empty() ? "" : " ") + std::to_string(x);
    std::fprintf(stderr, "pipeline: unit forward+backward times on rank 0 (us, embedding blocks head): %s; stages cut at %s\n",
                 t.c_str(), list(cut.bounds).c_str());
  }
  return cut;
}

void checkResumedCut(const std::string& file, const std::vector<int>& bounds) {
  const auto was = readCheckpointStageBounds(file);
  if (was.empty() || std::vector<int>(was.begin(), was.end()) == bounds) return;
  throw ConfigError("parallel.balance: --resume: '" + file + "' was written with pipeline stages cut at units " +
                    list(std::vector<int>(was.begin(), was.end())) + ", this run cuts at " + list(bounds) +
                    " (resume with the parallel.balance the checkpoint was written with)");
}

}  // namespace lowcomm::train
