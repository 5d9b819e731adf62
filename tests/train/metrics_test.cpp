// Rank 0's metrics and timeline files: a write that fails (here /dev/full, a disk that is always
// full) is an error naming the file, never a silent gap.
#include <gtest/gtest.h>

#include <string>

#include "lowcomm/base/error.h"
#include "lowcomm/train/config.h"
#include "lowcomm/train/metrics.h"
#include "lowcomm/train/trainer.h"
#include "train/temp_dir.h"

using namespace lowcomm;
using namespace lowcomm::train;

TEST(Metrics, RecordOnAFullDiskIsAnIoErrorNamingTheFile) {
  JsonlWriter w("/dev/full", /*append=*/false);
  try {
    w.write({{"type", "step"}, {"step", 1}});
    FAIL() << "a metrics record written to a full disk passed silently";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("'/dev/full'"), std::string::npos) << e.what();
  }
}

TEST(Metrics, TimelineOnAFullDiskIsAnIoError) {
  test::TempDir d;
  const auto c = loadConfig("", {"data.dataset=synthetic", "model.name=mlp", "data.batch_size=16", "data.train_limit=256",
                                 "data.test_limit=64", "schedule.max_steps=2", "logging.progress=false",
                                 "logging.out_dir=" + (d.path / "run").string()});
  net::TransportOptions t;
  t.address = "127.0.0.1";
  TrainOptions o;
  o.timeline_path = "/dev/full";
  try {
    runTraining(c, comm::Communicator::create(std::make_shared<net::MemoryStore>(), 0, 1, {}, t), o);
    FAIL() << "a timeline written to a full disk passed silently";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("timeline '/dev/full'"), std::string::npos) << e.what();
  }
}
