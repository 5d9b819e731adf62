// Which checkpoint a run continues from (private to lowcomm_train).
#pragma once

#include <cstdint>
#include <string>

#include "lowcomm/comm/communicator.h"
#include "lowcomm/train/trainer.h"

namespace lowcomm::train {

// Collective over `world`: rank 0 reads `latest` in `ckpt_dir` and decides for every rank.
// - --resume (opts.resume): the latest checkpoint, whichever job wrote it; ConfigError on every
//   rank when there is none.
// - a restart by the launcher (opts.restart_count > 0): the latest checkpoint only when `latest`
//   records this job's id (opts.job_id): a job whose first attempt died before its first
//   checkpoint starts afresh instead of continuing an earlier job's run in the same directory
//   (rank 0 says so on stderr).
// - otherwise: none.
// Returns the step to resume from, -1 for a fresh start.
int64_t resumeStep(comm::Communicator& world, const std::string& ckpt_dir, const TrainOptions& opts);

}  // namespace lowcomm::train
