// Helpers of the trainer tests: the trainer on ranks as threads, its metrics.jsonl read back,
// config errors.
#pragma once

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lowcomm/base/error.h"
#include "lowcomm/train/checkpoint.h"
#include "lowcomm/train/config.h"
#include "lowcomm/train/trainer.h"
#include "train/rank_threads.h"

namespace lowcomm::test {

// Runs the trainer on `n` ranks as threads (declaring `sites`, if given); returns rank 0's
// summary, or throws naming the first rank that failed.
inline nlohmann::json trainOnThreads(int n, const train::TrainConfig& c, const train::TrainOptions& o,
                                     const std::vector<int>& sites = {}) {
  std::vector<nlohmann::json> out(n);
  const auto errors = onRankThreads(n, [&](int r, auto world) { out[r] = train::runTraining(c, world, o); }, 60, sites);
  for (int r = 0; r < n; ++r)
    if (!errors[r].empty()) throw std::runtime_error("rank " + std::to_string(r) + ": " + errors[r]);
  return out[0];
}

// The records of one "type" in a metrics.jsonl, in order.
inline std::vector<nlohmann::json> jsonlRecords(const std::filesystem::path& jsonl, const std::string& type) {
  std::vector<nlohmann::json> out;
  std::ifstream f(jsonl);
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] == type) out.push_back(j);
  }
  return out;
}

// A run's checkpoint file of `rank` after `step` steps.
inline std::filesystem::path checkpointOf(const std::filesystem::path& run, int step, int rank) {
  return run / ("checkpoints/step" + std::to_string(step) + ".rank" + std::to_string(rank) + ".pt");
}

// Bit-for-bit equality of two tensor lists.
inline bool sameTensors(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

// Makes run `to` resumable from run `from`'s checkpoints after `step` steps (all `n` ranks).
inline void copyCheckpoints(const std::filesystem::path& from, const std::filesystem::path& to, int step, int n) {
  std::filesystem::create_directories(to / "checkpoints");
  for (int r = 0; r < n; ++r) std::filesystem::copy_file(checkpointOf(from, step, r), checkpointOf(to, step, r));
  train::writeLatest((to / "checkpoints").string(), step);
}

// The ConfigError message loadConfig("", sets) throws, or "no error".
inline std::string configErrorOf(const std::vector<std::string>& sets) {
  try {
    train::loadConfig("", sets);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace lowcomm::test
