#include "resume_check.h"

#include <cstdio>

#include "all_ranks.h"
#include "lowcomm/base/error.h"
#include "lowcomm/train/checkpoint.h"
#include "stage_cut.h"
#include "lowcomm/parallel/strategy_spec.h"

namespace lowcomm::train {
namespace {

// Keys a resumed run must share with the run that wrote the checkpoint.
// Compressor state only fits the compressor that wrote it (codec, memory, auto candidates).
std::string compressKey(const compress::CompressConfig& z) {
  std::string k = z.codec + "/" + z.memory;
  if (z.codec == "auto")
    for (const auto& c : z.auto_candidates) k += "/" + c;
  return k == "none/default" ? "" : k;  // checkpoints from before [compress] existed stay valid
}

// Width, dropout and init joined the key later: defaults add nothing, so older checkpoints stay valid.
std::string modelKey(const TrainConfig& c) {
  std::string k;
  if (c.model.width != 1.0) k += "|w" + std::to_string(c.model.width);
  if (c.model.dropout != 0.0) k += "|d" + std::to_string(c.model.dropout);
  if (c.model.init != "default") k += "|" + c.model.init;
  if (c.model.autocast != "off") k += "|amp-" + c.model.autocast;
  return k;
}

// The part that depends on the strategy: its state only fits a run with the same structure.
std::string strategyResumeKey(const TrainConfig& c) {
  const auto& spec = strategySpec(c);
  return spec.resume_key ? spec.resume_key(strategyOptions(c), static_cast<int>(c.strategy.zero)) : "";
}

}  // namespace

uint64_t resumeHash(const TrainConfig& c, int world) {
  const std::string key = c.model.name + "|" + std::to_string(c.model.vit_patch) + "|" +
                          std::to_string(c.model.vit_depth) + modelKey(c) + "|" + c.data.dataset + "|" +
                          std::to_string(c.data.batch_size) + "|" + std::to_string(c.data.train_limit) + "|" +
                          std::to_string(c.strategy.accumulation) + "|" + c.optimizer.name + "|" +
                          std::to_string(c.seed) + "|" + std::to_string(world) + "|" + compressKey(c.compress) +
                          strategyResumeKey(c);
  uint64_t h = 1469598103934665603ull;
  for (char ch : key) h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
  return h >> 1;  // stored as int64
}

uint64_t resumeScheduleHash(const TrainConfig& c) {
  char key[256];
  std::snprintf(key, sizeof(key), "%.17g|%s|%.17g|%lld|%.17g|%.17g", c.optimizer.lr, c.schedule.name.c_str(),
                c.schedule.warmup_steps, static_cast<long long>(c.schedule.step_size), c.schedule.gamma,
                c.schedule.min_lr);
  uint64_t h = 1469598103934665603ull;
  for (const char* ch = key; *ch; ++ch) h = (h ^ static_cast<uint8_t>(*ch)) * 1099511628211ull;
  return (h >> 1) | 1;  // stored as int64; 0 means "not recorded"
}

std::vector<int64_t> gridRecord(const parallel::Grid& g) {
  std::vector<int64_t> r = {g.dp, g.tp, g.pp};
  for (const auto& a : parallel::gridAxes(g.order)) r.push_back(a == "tp" ? 0 : a == "dp" ? 1 : 2);
  return r;
}

int64_t weightsHash(torch::nn::Module& model) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& p : model.parameters()) {
    const auto t = p.detach().contiguous();
    const auto* bytes = static_cast<const uint8_t*>(t.data_ptr());
    for (size_t i = 0, e = static_cast<size_t>(t.numel()) * t.element_size(); i < e; ++i)
      h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return static_cast<int64_t>(h >> 1);
}

void checkResumedAlike(comm::Communicator& world, comm::Communicator* replicas, int64_t loaded_step, int64_t latest,
                       torch::nn::Module& model, const std::string& file) {
  int64_t step = loaded_step;
  std::vector<int64_t> steps(world.size());
  world.allgather(&step, steps.data(), 1, comm::DType::i64);
  for (int r = 0; r < world.size(); ++r)
    if (steps[r] != latest)
      throw DataError("--resume: rank " + std::to_string(r) + " loaded step " + std::to_string(steps[r]) +
                      " from its checkpoint file, but 'latest' names step " + std::to_string(latest) +
                      (r == world.rank() ? " ('" + file + "')" : std::string()));
  if (!replicas) return;
  int64_t mine[2] = {world.rank(), weightsHash(model)};
  std::vector<int64_t> all(2 * replicas->size());
  replicas->allgather(mine, all.data(), 2, comm::DType::i64);
  int64_t verdict[2] = {-1, all[0]};  // a rank of this group holding other weights, and whose
  for (int r = 1; r < replicas->size() && verdict[0] < 0; ++r)
    if (all[2 * r + 1] != all[1]) verdict[0] = all[2 * r];
  // Every rank learns every group's verdict, so no group trains on while another has stopped.
  std::vector<int64_t> verdicts(2 * world.size());
  world.allgather(verdict, verdicts.data(), 2, comm::DType::i64);
  for (int r = 0; r < world.size(); ++r)
    if (verdicts[2 * r] >= 0)
      throw DataError("--resume: rank " + std::to_string(verdicts[2 * r]) + "'s checkpoint of step " +
                      std::to_string(latest) + " holds other weights than rank " + std::to_string(verdicts[2 * r + 1]) +
                      "'s, which it trains in step with" +
                      (verdicts[2 * r] == world.rank() ? " ('" + file + "')" : std::string()));
}

// A checkpoint holds each rank's shard of its grid: it only loads under the same grid.
void checkResumedGrid(const std::string& file, const std::vector<int64_t>& now) {
  const auto was = readCheckpointGrid(file);
  auto str = [](std::vector<int64_t> g) {
    if (g.size() == 3) g.insert(g.end(), {0, 1, 2});  // written before parallel.order: the default order
    g.resize(6, -1);
    auto axis = [](int64_t a) { return a == 0 ? "tp" : a == 1 ? "dp" : a == 2 ? "pp" : "?"; };
    return "dp " + std::to_string(g[0]) + " x tp " + std::to_string(g[1]) + " x pp " + std::to_string(g[2]) + " (order " +
           axis(g[3]) + "-" + axis(g[4]) + "-" + axis(g[5]) + ")";
  };
  if (!was.empty() && str(was) != str(now))
    throw ConfigError("--resume: '" + file + "' was written by a " + str(was) + " grid, this run is " + str(now) +
                      "; a checkpoint is resharded only through model_state.pt (resume with the same parallel.tp, "
                      "parallel.pp, parallel.order and number of processes)");
}

TrainState loadResumed(comm::Communicator& world, const std::string& file, const std::vector<int64_t>& now,
                       const std::vector<int>* bounds, const std::function<TrainState()>& load) {
  TrainState state;
  std::exception_ptr error;
  try {
    checkResumedGrid(file, now);
    if (bounds) checkResumedCut(file, *bounds);
    state = load();
  } catch (...) {
    error = std::current_exception();
  }
  throwIfAnyRankFailed(world, error, "--resume");
  return state;
}

}  // namespace lowcomm::train
