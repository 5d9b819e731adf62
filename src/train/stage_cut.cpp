#include "stage_cut.h"

#include <algorithm>
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

// The boundaries the latest checkpoint recorded, the same on every rank; false when there is no
// checkpoint to resume from (a checkpoint that recorded none gives true and no boundaries).
bool checkpointBounds(comm::Communicator& world, const std::string& ckpt_dir, std::vector<int>& out) {
  std::vector<int64_t> b;
  int64_t n = -1;
  if (world.rank() == 0) {
    const int64_t step = readLatest(ckpt_dir);
    if (step >= 0) b = readCheckpointStageBounds(checkpointFile(ckpt_dir, step, 0));
    n = step >= 0 ? static_cast<int64_t>(b.size()) : -1;
  }
  world.broadcast(&n, 1, comm::DType::i64, 0);
  b.resize(std::max<int64_t>(0, n));
  if (n > 0) world.broadcast(b.data(), b.size(), comm::DType::i64, 0);
  out.assign(b.begin(), b.end());
  return n >= 0;
}

}  // namespace

nlohmann::json StageCut::json(const std::string& balance) const {
  return {{"balance", balance}, {"boundaries", bounds}, {"unit_weights", unit_weights}, {"unit_weight", weight_unit}};
}

StageCut cutStages(const TrainConfig& cfg, const nn::Model& full, comm::Communicator& world, int pp,
                   const std::string& ckpt_dir, bool resuming) {
  StageCut cut;
  if (pp <= 1) return cut;
  // A checkpoint written before boundaries were recorded was cut by parameters.
  const bool old_checkpoint =
      cfg.parallel.balance == "time" && resuming && checkpointBounds(world, ckpt_dir, cut.bounds) && cut.bounds.empty();
  const int chunks = pp * static_cast<int>(cfg.parallel.virtual_stages);
  if (!cut.bounds.empty()) {
    if (static_cast<int>(cut.bounds.size()) != chunks + 1)
      throw ConfigError("parallel.virtual_stages: --resume: the checkpoint in '" + ckpt_dir + "' cut the model into " +
                        std::to_string(cut.bounds.size() - 1) + " pipeline chunks at units " + list(cut.bounds) +
                        ", this run needs " + std::to_string(chunks) + " (parallel.pp x parallel.virtual_stages)");
    cut.weight_unit = "checkpoint";
    return cut;
  }
  if (chunks > full.spec().layers + 2)  // before any timing
    throw ConfigError(std::string(chunks > pp ? "parallel.virtual_stages" : "parallel.pp") + ": " + std::to_string(pp) +
                      " pipeline stages x " + std::to_string(cfg.parallel.virtual_stages) + " chunks for a model of " +
                      std::to_string(full.spec().layers + 2) +
                      " units (embedding, blocks, head): at most one chunk per unit");
  if (cfg.parallel.balance == "params" || old_checkpoint) {
    cut.unit_weights = parallel::unitParameters(full);
    cut.weight_unit = "parameters";
  } else {
    const auto& p = cfg.parallel;
    const int64_t micro_batch = cfg.data.batch_size * p.tp * p.pp / p.micro_batches;
    // A quarter of the timeout per unit: the other ranks wait for each unit's time in a broadcast.
    cut.unit_weights = parallel::measuredUnitTimes(full, world, micro_batch, /*reps=*/5,
                                                   static_cast<double>(cfg.comm.timeout_s) / 4);
    cut.weight_unit = "us";
  }
  cut.bounds = parallel::stageBounds(cut.unit_weights, chunks);
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
  if (was.size() != bounds.size())
    throw ConfigError("parallel.virtual_stages: --resume: '" + file + "' was written with the model cut into " +
                      std::to_string(was.size() - 1) + " pipeline chunks, this run cuts " +
                      std::to_string(bounds.size() - 1) + " (parallel.pp x parallel.virtual_stages)");
  throw ConfigError("parallel.balance: --resume: '" + file + "' was written with pipeline stages cut at units " +
                    list(std::vector<int>(was.begin(), was.end())) + ", this run cuts at " + list(bounds) +
                    " (resume with the parallel.balance and parallel.virtual_stages the checkpoint was written with)");
}

}  // namespace lowcomm::train
