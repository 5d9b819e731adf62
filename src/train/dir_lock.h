// One job at a time in a run's directories (private to lowcomm_train).
//
// Every output file has one writer: rank 0 writes logging.out_dir's files (config.toml,
// metrics.jsonl, summary.json, model_state.pt, `latest`), rank r its checkpoint files. Each writer
// holds an flock on a lock file next to what it writes — rank 0 on <out_dir>/lowcomm.lock, rank r
// on <checkpoint dir>/rank<r>.lock — so ranks of one job never lock each other out (also with
// per-host checkpoint directories), while a second job on the same directories finds a held lock.
// The lock file says "pid P host H" of its holder; the kernel drops the lock when the holder dies
// (a killed job leaves nothing to clean up, a restart finds the lock free).
#pragma once

#include <filesystem>
#include <vector>

#include "lowcomm/comm/communicator.h"

namespace lowcomm::train {

class DirLocks {
 public:
  // Collective over `world`: creates the directories, takes this rank's locks, then removes the
  // temporary files a killed run of this rank left (step*.rank<r>.pt.tmp; on rank 0 also the
  // .tmp of out_dir's files and of `latest`). When any rank cannot lock, every rank throws
  // ConfigError (the rank that could not names the directory and the holder's pid and host), and
  // no rank keeps a lock.
  DirLocks(comm::Communicator& world, const std::filesystem::path& out_dir, const std::filesystem::path& ckpt_dir);
  ~DirLocks();
  DirLocks(const DirLocks&) = delete;
  DirLocks& operator=(const DirLocks&) = delete;

 private:
  void release();
  std::vector<int> fds_;
};

}  // namespace lowcomm::train
