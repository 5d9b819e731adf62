#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "lowcomm/base/error.h"
#include "train/temp_dir.h"
#include "lowcomm/train/checkpoint.h"

using namespace lowcomm;
using namespace lowcomm::train;
namespace fs = std::filesystem;

namespace {
using Dir = test::TempDir;

std::shared_ptr<torch::nn::Module> smallNet(uint64_t seed) {
  torch::manual_seed(seed);
  torch::nn::Sequential s(torch::nn::Linear(4, 8), torch::nn::BatchNorm1d(8), torch::nn::Linear(8, 2));
  return s.ptr();
}

void step(torch::nn::Module& m, torch::optim::Optimizer& opt) {
  auto x = torch::randn({6, 4});
  auto out = dynamic_cast<torch::nn::SequentialImpl&>(m).forward(x);
  opt.zero_grad();
  out.pow(2).mean().backward();
  opt.step();
}
}  // namespace

TEST(Checkpoint, RoundTripRestoresModelOptimizerStateAndRng) {
  Dir d;
  auto a = smallNet(1);
  torch::optim::SGD opt_a(a->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  step(*a, opt_a);
  TrainState st;
  st.step = 17;
  st.position = {2, 5};
  st.config_hash = 99;
  st.bytes_sent = 1234;
  parallel::AllreduceHook hook;
  const auto file = checkpointFile(d.path.string(), 17, 0);
  saveCheckpoint(file, *a, opt_a, st, &hook);
  const auto after_save = torch::rand({3});  // draws that must repeat after loading

  auto b = smallNet(2);
  torch::optim::SGD opt_b(b->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  const auto got = loadCheckpoint(file, *b, opt_b, &hook);
  EXPECT_EQ(got.step, 17);
  EXPECT_EQ(got.position, (data::BatchLoader::Position{2, 5}));
  EXPECT_EQ(got.config_hash, 99u);
  EXPECT_EQ(got.bytes_sent, 1234);
  EXPECT_TRUE(torch::equal(torch::rand({3}), after_save)) << "RNG state restored";
  auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i]));
  auto ba = a->buffers(), bb = b->buffers();
  for (size_t i = 0; i < ba.size(); ++i) EXPECT_TRUE(torch::equal(ba[i], bb[i]));
  // Momentum buffers restored: the next step is identical.
  torch::manual_seed(5);
  step(*a, opt_a);
  torch::manual_seed(5);
  step(*b, opt_b);
  pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i]));
}

TEST(Checkpoint, TruncatedForeignAndMissingFilesAreDataErrors) {
  Dir d;
  auto m = smallNet(1);
  torch::optim::SGD opt(m->parameters(), torch::optim::SGDOptions(0.1));
  parallel::AllreduceHook hook;
  const auto file = (d.path / "c.pt").string();
  saveCheckpoint(file, *m, opt, TrainState{}, &hook);
  const auto size = fs::file_size(file);
  fs::resize_file(file, size / 2);
  try {
    loadCheckpoint(file, *m, opt, &hook);
    FAIL() << "truncated checkpoint loaded";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
  const auto foreign = (d.path / "f.pt").string();
  std::ofstream(foreign) << "not a checkpoint at all";
  EXPECT_THROW(loadCheckpoint(foreign, *m, opt, &hook), DataError);
  // A valid archive of something else (torch::save of a tensor) is foreign too.
  const auto other = (d.path / "o.pt").string();
  torch::save(torch::ones({2}), other);
  EXPECT_THROW(loadCheckpoint(other, *m, opt, &hook), DataError);
  EXPECT_THROW(loadCheckpoint((d.path / "missing.pt").string(), *m, opt, &hook), DataError);
  // A checkpoint of another model shape names the parameter.
  const auto good = (d.path / "g.pt").string();
  saveCheckpoint(good, *m, opt, TrainState{}, &hook);
  torch::nn::Sequential s(torch::nn::Linear(4, 9), torch::nn::BatchNorm1d(9), torch::nn::Linear(9, 2));
  torch::optim::SGD opt2(s->parameters(), torch::optim::SGDOptions(0.1));
  try {
    loadCheckpoint(good, *s.ptr(), opt2, &hook);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("0.weight"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, LatestPointerAndAtomicWrite) {
  Dir d;
  EXPECT_EQ(readLatest(d.path.string()), -1);
  writeLatest(d.path.string(), 40);
  EXPECT_EQ(readLatest(d.path.string()), 40);
  EXPECT_FALSE(fs::exists(d.path / "latest.tmp"));
}

// A write that fails part-way (here: the file size limit, which fails write() with EFBIG like a
// full disk fails it with ENOSPC) is an IoError naming the file; the temp file is gone and the
// old content is still there. An unwritable directory fails at open.
TEST(Checkpoint, FailedWriteNamesTheFileAndKeepsTheOldContent) {
  Dir d;
  const std::string path = (d.path / "step6.rank0.pt").string();
  writeFileAtomically(path, "old");
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string error;
  try {
    writeFileAtomically(path, std::string(1 << 20, 'x'));
  } catch (const IoError& e) {
    error = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(error.find("cannot write '" + path + "': write"), std::string::npos) << error;
  EXPECT_NE(error.find("too large"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  std::ifstream f(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), "old");
  try {
    writeFileAtomically((d.path / "no_such_dir" / "latest").string(), "6\n");
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_dir/latest': open"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, PruneKeepsTheNewestOfThisRankAndNothingLater) {
  Dir d;
  for (int step : {2, 4, 6, 8, 10, 12}) std::ofstream(checkpointFile(d.path.string(), step, 0)) << "x";
  std::ofstream(checkpointFile(d.path.string(), 4, 1)) << "x";  // another rank's
  std::ofstream(d.path / "step3.rank0.pt.tmp") << "x";          // not a checkpoint
  const auto removed = pruneCheckpoints(d.path.string(), 0, 10, 2);
  EXPECT_EQ(removed, (std::vector<int64_t>{6, 4, 2}));
  for (int step : {8, 10, 12}) EXPECT_TRUE(fs::exists(checkpointFile(d.path.string(), step, 0))) << step;
  for (int step : {2, 4, 6}) EXPECT_FALSE(fs::exists(checkpointFile(d.path.string(), step, 0))) << step;
  EXPECT_TRUE(fs::exists(checkpointFile(d.path.string(), 4, 1)));
  EXPECT_TRUE(fs::exists(d.path / "step3.rank0.pt.tmp"));
  EXPECT_TRUE(pruneCheckpoints(d.path.string(), 0, 10, 0).empty());  // 0 keeps everything
}

TEST(Checkpoint, PythonTorchLoadReadsTheStateDict) {
  if (!fs::exists("/usr/lib/python3/dist-packages/torch/__init__.py"))
    GTEST_SKIP() << "python3-torch is not installed (scripts/setup installs it)";
  Dir d;
  auto m = smallNet(3);
  const auto file = (d.path / "model_state.pt").string();
  savePythonStateDict(file, *m);
  const std::string cmd = "/usr/bin/python3 -c \"import torch; d = torch.load('" + file +
                          "'); assert list(d['0.weight'].shape) == [8, 4], d['0.weight'].shape; "
                          "assert abs(float(d['0.weight'][0][0]) - " +
                          std::to_string(m->parameters()[0][0][0].template item<float>()) +
                          ") < 1e-5; assert '1.running_mean' in d; print('ok')\" > " + (d.path / "out").string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream out(d.path / "out");
  std::string text((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("ok"), std::string::npos) << text;
}

// A buffer of another shape is an error naming the buffer and the file (copy_ would broadcast a
// one-element buffer over the model's silently).
TEST(Checkpoint, BufferOfAnotherShapeIsADataError) {
  struct WithBuffer : torch::nn::Module {
    explicit WithBuffer(int64_t n) {
      register_parameter("w", torch::zeros({2}));
      register_buffer("stat", torch::full({n}, 7.0));
    }
  };
  Dir d;
  WithBuffer one(1), three(3);
  torch::optim::SGD opt_one(one.parameters(), 0.1), opt_three(three.parameters(), 0.1);
  parallel::AllreduceHook hook;
  const auto file = checkpointFile(d.path.string(), 1, 0);
  saveCheckpoint(file, one, opt_one, TrainState{}, &hook);
  try {
    loadCheckpoint(file, three, opt_three, &hook);
    FAIL() << "a buffer of shape [1] loaded into one of shape [3]";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("buffer 'stat' has shape [1], the model has [3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
}
