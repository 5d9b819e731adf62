#include "resume_point.h"

#include <cstdio>

#include "lowcomm/base/error.h"
#include "lowcomm/train/checkpoint.h"

namespace lowcomm::train {
namespace {

// Rank 0's choice (see the header); only reads.
int64_t chooseOnRank0(const std::string& ckpt_dir, const TrainOptions& opts) {
  const int64_t latest = readLatest(ckpt_dir);
  if (opts.resume || latest < 0) return latest;
  if (opts.restart_count == 0) return -1;
  const std::string writer = readLatestJob(ckpt_dir);
  if (!opts.job_id.empty() && writer == opts.job_id) return latest;
  std::fprintf(stderr,
               "restart %d: '%s/latest' (step %lld) was written by %s, not by this job (%s): starting afresh; "
               "pass --resume to continue another job's checkpoint\n",
               opts.restart_count, ckpt_dir.c_str(), static_cast<long long>(latest),
               writer.empty() ? "a job that recorded no id" : ("job " + writer).c_str(),
               opts.job_id.empty() ? "no job id" : opts.job_id.c_str());
  return -1;
}

}  // namespace

int64_t resumeStep(comm::Communicator& world, const std::string& ckpt_dir, const TrainOptions& opts) {
  int64_t step = -1;
  if (!opts.resume && opts.restart_count == 0) return step;
  if (world.rank() == 0) step = chooseOnRank0(ckpt_dir, opts);
  world.broadcast(&step, 1, comm::DType::i64, 0);
  if (step < 0 && opts.resume)
    throw ConfigError("--resume: no checkpoint in '" + ckpt_dir + "' (no 'latest' file)");
  return step;
}

}  // namespace lowcomm::train
