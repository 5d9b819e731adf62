#include "lowcomm/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "lowcomm/base/error.h"

namespace lowcomm::train {

namespace fs = std::filesystem;

namespace {
constexpr int64_t kMagic = 0x4c4f57434b5054;  // "LOWCKPT"
constexpr int64_t kVersion = 1;

torch::Tensor scalar(int64_t v) { return torch::tensor({v}, torch::kInt64); }
torch::Tensor scalarD(double v) { return torch::tensor({v}, torch::kFloat64); }
}  // namespace

std::string checkpointFile(const std::string& dir, int64_t step, int rank) {
  return (fs::path(dir) / ("step" + std::to_string(step) + ".rank" + std::to_string(rank) + ".pt")).string();
}

void saveCheckpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& opt,
                    const TrainState& state, const parallel::BucketHook* hook, const SectionWriter& strategy) {
  torch::serialize::OutputArchive ar;
  ar.write("magic", scalar(kMagic));
  ar.write("version", scalar(kVersion));
  ar.write("step", scalar(state.step));
  ar.write("epoch", scalar(state.position.epoch));
  ar.write("batch", scalar(state.position.batch));
  ar.write("elapsed_s", scalarD(state.elapsed_s));
  ar.write("config_hash", scalar(static_cast<int64_t>(state.config_hash)));
  if (state.schedule_hash != 0) ar.write("schedule_hash", scalar(static_cast<int64_t>(state.schedule_hash)));
  ar.write("bytes_sent", scalar(state.bytes_sent));
  ar.write("bytes_recv", scalar(state.bytes_recv));
  if (!state.grid.empty()) ar.write("grid", torch::tensor(state.grid, torch::kInt64));
  if (!state.stage_bounds.empty()) ar.write("stage_bounds", torch::tensor(state.stage_bounds, torch::kInt64));
  torch::serialize::OutputArchive m;
  for (const auto& p : model.named_parameters()) m.write(p.key(), p.value());
  for (const auto& b : model.named_buffers()) m.write(b.key(), b.value(), /*is_buffer=*/true);
  ar.write("model", m);
  torch::serialize::OutputArchive o;
  opt.save(o);
  ar.write("optimizer", o);
  torch::serialize::OutputArchive h;
  if (hook) hook->saveState(h);  // an empty section without one: the file layout stays the same
  ar.write("hook", h);
  if (strategy) {
    torch::serialize::OutputArchive st;
    strategy(st);
    ar.write("strategy", st);
  }
  ar.write("rng", at::detail::getDefaultCPUGenerator().get_state());
  // Streamed to the file: no copy of the archive in memory (it is as large as the model and the
  // optimizer state together).
  writeFileAtomicallyWith(path, [&](const FileSink& sink) {
    ar.save_to([&](const void* data, size_t size) {
      sink(data, size);
      return size;
    });
  });
}

void loadStrategySection(const std::string& path, const SectionReader& read) {
  if (!fs::exists(path)) throw DataError("checkpoint '" + path + "' does not exist");
  torch::serialize::InputArchive ar, st;
  try {
    ar.load_from(path);
  } catch (const std::exception& e) {
    throw DataError("checkpoint '" + path + "' is truncated or not a lowcomm checkpoint: " +
                    std::string(e.what()).substr(0, 200));
  }
  if (!ar.try_read("strategy", st))
    throw DataError("checkpoint '" + path + "' has no strategy state (written by strategy.name = \"ddp\"?)");
  try {
    read(st);
  } catch (const DataError& e) {
    throw DataError("checkpoint '" + path + "': " + e.what());
  }
}

namespace {
// Reads `path` into `ar`; DataError naming the file when it is missing or not an archive.
void openArchive(const std::string& path, torch::serialize::InputArchive& ar) {
  if (!fs::exists(path)) throw DataError("checkpoint '" + path + "' does not exist");
  try {
    ar.load_from(path);
  } catch (const std::exception& e) {
    throw DataError("checkpoint '" + path + "' is truncated or not a lowcomm checkpoint: " +
                    std::string(e.what()).substr(0, 200));
  }
}
}  // namespace

TrainState loadCheckpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& opt,
                          parallel::BucketHook* hook) {
  torch::serialize::InputArchive ar;
  openArchive(path, ar);
  auto readInt = [&](const char* key) {
    torch::Tensor t;
    if (!ar.try_read(key, t) || t.numel() != 1)
      throw DataError("checkpoint '" + path + "' is not a lowcomm checkpoint (no '" + key + "')");
    return t.item<int64_t>();
  };
  if (readInt("magic") != kMagic) throw DataError("checkpoint '" + path + "' is not a lowcomm checkpoint (bad magic)");
  if (readInt("version") != kVersion)
    throw DataError("checkpoint '" + path + "' has version " + std::to_string(readInt("version")) + ", expected " +
                    std::to_string(kVersion));
  TrainState s;
  s.step = readInt("step");
  s.position.epoch = readInt("epoch");
  s.position.batch = readInt("batch");
  s.config_hash = static_cast<uint64_t>(readInt("config_hash"));
  s.bytes_sent = readInt("bytes_sent");
  s.bytes_recv = readInt("bytes_recv");
  torch::Tensor el, grid, bounds, sched;
  if (ar.try_read("elapsed_s", el)) s.elapsed_s = el.item<double>();
  if (ar.try_read("schedule_hash", sched) && sched.numel() == 1) s.schedule_hash = static_cast<uint64_t>(sched.item<int64_t>());
  if (ar.try_read("grid", grid)) s.grid = std::vector<int64_t>(grid.data_ptr<int64_t>(), grid.data_ptr<int64_t>() + grid.numel());
  if (ar.try_read("stage_bounds", bounds))
    s.stage_bounds = std::vector<int64_t>(bounds.data_ptr<int64_t>(), bounds.data_ptr<int64_t>() + bounds.numel());
  try {
    torch::serialize::InputArchive m;
    ar.read("model", m);
    torch::NoGradGuard no_grad;
    for (auto& p : model.named_parameters()) {
      torch::Tensor t;
      if (!m.try_read(p.key(), t)) throw DataError("checkpoint '" + path + "' has no parameter '" + p.key() + "'");
      if (!t.sizes().equals(p.value().sizes()))
        throw DataError("checkpoint '" + path + "': parameter '" + p.key() + "' has shape " +
                        c10::str(t.sizes()) + ", the model has " + c10::str(p.value().sizes()));
      p.value().copy_(t);
    }
    for (auto& b : model.named_buffers()) {
      torch::Tensor t;
      if (!m.try_read(b.key(), t, /*is_buffer=*/true))
        throw DataError("checkpoint '" + path + "' has no buffer '" + b.key() + "'");
      if (!t.sizes().equals(b.value().sizes()))  // copy_ would broadcast it silently
        throw DataError("checkpoint '" + path + "': buffer '" + b.key() + "' has shape " + c10::str(t.sizes()) +
                        ", the model has " + c10::str(b.value().sizes()));
      b.value().copy_(t);
    }
    torch::serialize::InputArchive o;
    ar.read("optimizer", o);
    opt.load(o);
    torch::serialize::InputArchive h;
    ar.read("hook", h);
    if (hook) hook->loadState(h);
    torch::Tensor rng;
    ar.read("rng", rng);
    auto gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(rng);
  } catch (const DataError&) {
    throw;
  } catch (const std::exception& e) {
    throw DataError("checkpoint '" + path + "' does not match this model/optimizer: " +
                    std::string(e.what()).substr(0, 300));
  }
  return s;
}

void writeLatest(const std::string& dir, int64_t step, const std::string& job) {
  writeFileAtomically((fs::path(dir) / "latest").string(),
                      std::to_string(step) + "\n" + (job.empty() ? "" : "job " + job + "\n"));
}

std::string readLatestJob(const std::string& dir) {
  std::ifstream f(fs::path(dir) / "latest");
  std::string line;
  std::getline(f, line);  // the step
  while (std::getline(f, line))
    if (line.rfind("job ", 0) == 0) return line.substr(4);
  return "";
}

int64_t readLatest(const std::string& dir) {
  std::ifstream f(fs::path(dir) / "latest");
  int64_t step = -1;
  if (!(f >> step) || step < 0) return -1;
  return step;
}

void removeLatest(const std::string& dir) {
  const std::string path = (fs::path(dir) / "latest").string();
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    throw IoError("cannot remove the stale '" + path + "' of an earlier run: " + std::strerror(errno));
}

std::vector<int64_t> pruneCheckpoints(const std::string& dir, int rank, int64_t current, int64_t keep) {
  std::vector<int64_t> steps;
  if (keep <= 0) return steps;
  const std::string suffix = ".rank" + std::to_string(rank) + ".pt";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step", 0) != 0 || name.size() <= 4 + suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string digits = name.substr(4, name.size() - 4 - suffix.size());
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 18) continue;
    const int64_t step = std::stoll(digits);
    if (step <= current) steps.push_back(step);
  }
  std::sort(steps.rbegin(), steps.rend());
  std::vector<int64_t> removed;
  for (size_t i = static_cast<size_t>(keep); i < steps.size(); ++i) {
    const std::string path = checkpointFile(dir, steps[i], rank);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      throw IoError("cannot remove the old checkpoint '" + path + "': " + std::strerror(errno));
    removed.push_back(steps[i]);
  }
  return removed;
}

void savePythonStateDict(const std::string& path, torch::nn::Module& model) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& p : model.named_parameters()) dict.insert(p.key(), p.value().detach().clone());
  for (const auto& b : model.named_buffers()) dict.insert(b.key(), b.value().detach().clone());
  const auto bytes = torch::pickle_save(c10::IValue(dict));
  writeFileAtomicallyWith(path, [&](const FileSink& sink) { sink(bytes.data(), bytes.size()); });
}

namespace {
std::vector<int64_t> readInts(const std::string& path, const char* key) {
  torch::serialize::InputArchive ar;
  openArchive(path, ar);
  torch::Tensor t;
  if (!ar.try_read(key, t)) return {};
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}
}  // namespace

std::vector<int64_t> readCheckpointGrid(const std::string& path) { return readInts(path, "grid"); }

std::vector<int64_t> readCheckpointStageBounds(const std::string& path) { return readInts(path, "stage_bounds"); }

}  // namespace lowcomm::train
