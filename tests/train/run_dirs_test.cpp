// A run's directories: which job's checkpoint a restart continues, resuming with a checkpoint
// directory per host, and one job at a time in an out_dir (lock, stale temporaries).
#include <gtest/gtest.h>
#include <sys/file.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "lowcomm/base/error.h"
#include "lowcomm/train/checkpoint.h"
#include "lowcomm/train/config.h"
#include "lowcomm/train/trainer.h"
#include "train/rank_threads.h"
#include "train/temp_dir.h"

using namespace lowcomm;
using namespace lowcomm::train;
namespace fs = std::filesystem;

namespace {

TrainConfig run(const fs::path& out, int64_t steps, std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = {"data.dataset=synthetic", "model.name=mlp", "data.batch_size=16",
                                   "data.train_limit=512", "data.test_limit=64", "schedule.epochs=100",
                                   "schedule.max_steps=" + std::to_string(steps), "checkpoint.every_steps=6",
                                   "logging.progress=false", "logging.log_every=2", "logging.out_dir=" + out.string()};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return loadConfig("", sets);
}

// Rank 0's summary of `cfg(rank)` on 2 ranks as threads; errors as "rank R: ..." lines.
nlohmann::json onTwoRanks(const std::function<TrainConfig(int)>& cfg, const TrainOptions& o, std::string& errors) {
  nlohmann::json s;
  const auto errs = test::onRankThreads(2, [&](int r, auto w) {
    auto out = runTraining(cfg(r), w, o);
    if (r == 0) s = out;
  }, 20);
  errors.clear();
  for (int r = 0; r < 2; ++r)
    if (!errs[r].empty()) errors += "rank " + std::to_string(r) + ": " + errs[r] + "\n";
  return s;
}

nlohmann::json single(const TrainConfig& c, const TrainOptions& o) {
  std::string errors;
  nlohmann::json s;
  const auto errs = test::onRankThreads(1, [&](int, auto w) { s = runTraining(c, w, o); }, 20);
  if (!errs[0].empty()) throw std::runtime_error(errs[0]);
  return s;
}

}  // namespace

// Job "a" finished 12 steps here; job "b" is restarted (its first attempt died before its first
// checkpoint): it starts afresh. A restart of job "a" itself, and an explicit --resume by anyone,
// continue a's checkpoint.
TEST(RunDirs, RestartResumesOnlyItsOwnJobsCheckpoint) {
  test::TempDir d;
  TrainOptions a;
  a.job_id = "aaaa";
  single(run(d.path / "run", 12), a);
  TrainOptions b;
  b.job_id = "bbbb";
  b.restart_count = 1;
  auto s = single(run(d.path / "run", 18), b);
  EXPECT_EQ(s["resumes"].size(), 0u) << "job b's restart continued job a's checkpoint: " << s["resumes"].dump();
  EXPECT_EQ(readLatestJob((d.path / "run/checkpoints").string()), "bbbb");

  single(run(d.path / "own", 12), a);
  TrainOptions a_again = a;
  a_again.restart_count = 1;
  s = single(run(d.path / "own", 18), a_again);
  ASSERT_EQ(s["resumes"].size(), 1u) << s.dump();
  EXPECT_EQ(s["resumes"][0]["from_step"], 12);

  single(run(d.path / "other", 12), a);
  TrainOptions resume;
  resume.resume = true;
  resume.job_id = "cccc";
  s = single(run(d.path / "other", 18), resume);
  ASSERT_EQ(s["resumes"].size(), 1u) << s.dump();
  EXPECT_EQ(s["resumes"][0]["from_step"], 12);
}

// Checkpoint directories on node-local disks (checkpoint.dir differs per host; here per rank):
// `latest` and rank 0's file exist only on rank 0's host. Resume reads each rank's own file.
TEST(RunDirs, ResumeWithACheckpointDirectoryPerHost) {
  test::TempDir d;
  auto cfg = [&](int64_t steps) {
    return [&, steps](int r) {
      return run(d.path / "out", steps, {"checkpoint.dir=" + (d.path / ("host" + std::to_string(r))).string()});
    };
  };
  std::string errors;
  onTwoRanks(cfg(12), {}, errors);
  ASSERT_EQ(errors, "");
  ASSERT_TRUE(fs::exists(d.path / "host1/step12.rank1.pt"));
  ASSERT_FALSE(fs::exists(d.path / "host1/step12.rank0.pt"));
  TrainOptions resume;
  resume.resume = true;
  const auto s = onTwoRanks(cfg(18), resume, errors);
  EXPECT_EQ(errors, "");
  EXPECT_EQ(s.is_object() ? s.value("steps", -1) : -1, 18) << s.dump();
}

// Another process holds the out_dir's lock: the run fails at once naming it, and writes nothing
// there (the other job's latest and metrics stay).
TEST(RunDirs, OutDirHeldByAnotherJobIsAConfigErrorNamingTheHolder) {
  test::TempDir d;
  const auto c = run(d.path / "run", 12);
  single(c, {});
  const auto metrics = fs::file_size(d.path / "run/metrics.jsonl");
  const int fd = ::open((d.path / "run/lowcomm.lock").c_str(), O_RDWR | O_CREAT, 0644);  // the other job
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  ASSERT_EQ(::ftruncate(fd, 0), 0);
  ASSERT_EQ(::write(fd, "pid 4242 host elsewhere\n", 24), 24);
  std::string error = "no error";
  try {
    single(c, {});
  } catch (const std::exception& e) {
    error = e.what();
  }
  ::close(fd);
  EXPECT_NE(error.find("logging.out_dir '" + (d.path / "run").string() + "' is in use by another job: pid 4242 host "
                       "elsewhere"), std::string::npos) << error;
  EXPECT_EQ(readLatest((d.path / "run/checkpoints").string()), 12);
  EXPECT_EQ(fs::file_size(d.path / "run/metrics.jsonl"), metrics);
  single(c, {});  // the holder is gone: the directory is free again
}

// A killed run leaves its checkpoint's temporary file (stepS.rankR.pt.tmp): the next run in the
// directory removes it (a directory of that name is not a file it wrote, and stays).
TEST(RunDirs, FreshRunRemovesStaleCheckpointTemporaries) {
  test::TempDir d;
  fs::create_directories(d.path / "run/checkpoints");
  std::ofstream(d.path / "run/checkpoints/step6.rank0.pt.tmp") << "partial";
  std::ofstream(d.path / "run/checkpoints/step99.rank0.pt.tmp") << "partial";
  std::ofstream(d.path / "run/model_state.pt.tmp") << "partial";
  fs::create_directories(d.path / "run/checkpoints/step42.rank0.pt.tmp");
  single(run(d.path / "run", 2), {});
  EXPECT_FALSE(fs::exists(d.path / "run/checkpoints/step6.rank0.pt.tmp"));
  EXPECT_FALSE(fs::exists(d.path / "run/checkpoints/step99.rank0.pt.tmp"));
  EXPECT_FALSE(fs::exists(d.path / "run/model_state.pt.tmp"));
  EXPECT_TRUE(fs::is_directory(d.path / "run/checkpoints/step42.rank0.pt.tmp"));
}
