// The training driver: data, model, strategy, optimizer and schedule from a TrainConfig, the
// loop with gradient accumulation, evaluation every epoch, metrics, timeline and checkpoints.
//
// Collective over `world`. Rank 0 writes the outputs under logging.out_dir: config.toml (the
// resolved configuration), metrics.jsonl, summary.json, model_state.pt (torch.load-able
// weights) and checkpoints/. One job at a time: a run whose directories another live job holds
// fails at start with ConfigError naming that job's pid and host (src/train/dir_lock.h).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "lowcomm/comm/communicator.h"
#include "lowcomm/train/config.h"
#include "lowcomm/train/elastic.h"

namespace lowcomm::train {

struct TrainOptions {
  std::string summary_path;   // also write the summary JSON here (rank 0)
  std::string timeline_path;  // Chrome trace of every rank
  bool resume = false;        // continue from <checkpoint dir>/latest
  // > 0: this is a restart by `lowcomm launch --max-restarts` (LOWCOMM_RESTART_COUNT): resume from
  // the latest checkpoint when there is one (rank 0 decides for all), else start afresh. The
  // summary's `restarts` is this count; each resume adds a {"type": "resume", "from_step",
  // "steps_lost"} record to metrics.jsonl, and the summary lists them under `resumes`.
  int restart_count = 0;
  // The id of this job (net::jobId of LOWCOMM_JOB_TOKEN, the same for every restart of one
  // launch; "" when there is none). `latest` records it, and a restart resumes only a checkpoint
  // its own job wrote: one whose first attempt died before its first checkpoint starts afresh
  // instead of continuing an earlier job's run in the same directory. --resume ignores it.
  std::string job_id;
  // --elastic (docs/elastic.md): the membership; `world` is then its initial epoch's (null for a
  // replacement, which joins once built). Strategies other than ddp are a ConfigError.
  std::shared_ptr<ElasticMembership> elastic;
  // What fault.kill does when due: SIGKILL this process (empty). Tests of ranks as threads, where
  // a thread cannot die alone, pass a function that throws to unwind that rank's run.
  std::function<void()> kill;
};

// Returns the summary (on every rank): {strategy, world, steps, epochs, wall_s, test_accuracy,
// test_loss, bytes_sent (all ranks), bytes_sent_per_rank, bytes_by_phase (rank 0),
// compression_ratio, checkpoint, samples_per_s, comm_s, wait_s, comm_hidden_fraction,
// straggler_rank, ...}.
nlohmann::json runTraining(const TrainConfig& cfg, std::shared_ptr<comm::Communicator> world,
                           const TrainOptions& opts);

}  // namespace lowcomm::train
