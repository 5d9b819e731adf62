// Checkpoints: one file per rank per save (model, optimizer, schedule position, loader
// position, RNG state, strategy hook state), written atomically (temp file, fsync, rename);
// a `latest` file names the newest complete checkpoint. Weights also go to a state dict that
// Python's torch.load reads.
//
// Contract: a checkpoint only becomes `latest` after every rank has written and synced its
// file. Loading a truncated, foreign or mismatched file throws DataError naming the file.
#pragma once

#include "lowcomm/base/atomic_file.h"

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "lowcomm/data/loader.h"
#include "lowcomm/parallel/bucket.h"

namespace lowcomm::train {

struct TrainState {
  int64_t step = 0;   // optimizer steps done
  data::BatchLoader::Position position;  // next batch
  double elapsed_s = 0;  // wall time spent before this checkpoint (for the summary)
  int64_t bytes_sent = 0;  // this rank's traffic before this checkpoint (metrics stay cumulative)
  int64_t bytes_recv = 0;
  uint64_t config_hash = 0;  // of the keys that must not change across a resume
  // Of optimizer.lr and the schedule's shape (resumeScheduleHash); 0: not recorded (a checkpoint
  // written before it was), which any run may resume.
  uint64_t schedule_hash = 0;
  std::vector<int64_t> grid;  // {dp, tp, pp, order: axes fastest first, tp 0 dp 1 pp 2} of the run that wrote it; empty: not recorded
  std::vector<int64_t> stage_bounds;  // a sharded model's unit boundaries (ShardedModel::boundaries); empty: none
};

std::string checkpointFile(const std::string& dir, int64_t step, int rank);

// `strategy`, when given, writes a strategy's own state (AB-training) into a section that
// loadStrategySection() reads back before the model is loaded (it may change the model's shape).
using SectionWriter = std::function<void(torch::serialize::OutputArchive&)>;
using SectionReader = std::function<void(torch::serialize::InputArchive&)>;
void saveCheckpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& opt,
                    const TrainState& state, const parallel::BucketHook* hook, const SectionWriter& strategy = nullptr);
// DataError naming the file if it has no strategy section.
void loadStrategySection(const std::string& path, const SectionReader& read);
TrainState loadCheckpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& opt,
                          parallel::BucketHook* hook);

// The {dp, tp, pp[, order]} grid a checkpoint was written under (empty for a checkpoint that predates
// grids); DataError naming the file if it is not a lowcomm checkpoint.
std::vector<int64_t> readCheckpointGrid(const std::string& path);
// The stage boundaries a checkpoint of a sharded model recorded (empty: none recorded); errors as
// readCheckpointGrid.
std::vector<int64_t> readCheckpointStageBounds(const std::string& path);

// `latest` pointer: written by rank 0 once all ranks saved (atomically), read by everyone.
// `job` (when not empty) records the id of the job that wrote it ("<step>\njob <id>\n"): a restart
// resumes only its own job's checkpoint.
void writeLatest(const std::string& dir, int64_t step, const std::string& job = "");
int64_t readLatest(const std::string& dir);  // -1 when there is none
std::string readLatestJob(const std::string& dir);  // "" when there is none or it recorded none
// A fresh run (no --resume) removes `latest` before training, so that a --resume after it dies
// before its first checkpoint cannot continue an older run's checkpoint instead.
void removeLatest(const std::string& dir);
// Removes this rank's checkpoint files (stepS.rankR.pt) in `dir` except the `keep` newest with
// S <= `current`; files of later steps (left by a run that died and resumed from an earlier
// checkpoint) are not touched. keep = 0 keeps everything. Returns the steps removed.
std::vector<int64_t> pruneCheckpoints(const std::string& dir, int rank, int64_t current, int64_t keep);

// name -> tensor dict pickled for Python: torch.load(path) returns {"stem.weight": tensor, ...}.
void savePythonStateDict(const std::string& path, torch::nn::Module& model);

// Checkpoints, metrics and summaries are written with lowcomm/base/atomic_file.h.
using ::lowcomm::FileSink;
using ::lowcomm::writeFileAtomically;
using ::lowcomm::writeFileAtomicallyWith;

}  // namespace lowcomm::train
