// The tuned allreduce table (lowcomm/comm/tuned_table.h): a file's rules choose per shape and
// size, bad files are errors naming the file and the rule, and a communicator given a table
// follows it for its own shape only (the fixed size table elsewhere; forced algorithms,
// deterministic mode and shared memory still win).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "comm/harness.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/tuned_table.h"

using namespace lowcomm;
using namespace lowcomm::comm;

namespace {

std::string writeFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

std::string errorOf(const std::string& text) {
  const auto path = writeFile("tuned_bad.json", text);
  try {
    TunedTable::load(path);
  } catch (const ConfigError& e) {
    std::remove(path.c_str());
    return e.what();
  }
  std::remove(path.c_str());
  return "";
}

const char* kTable = R"({"setting": "2x2@1gbit", "rules": [
  {"world": 4, "group_size": 2, "algo": "rails"},
  {"world": 4, "group_size": 2, "max_bytes": 16384, "algo": "hd"},
  {"world": 4, "group_size": 2, "max_bytes": 1048576, "algo": "hier"},
  {"world": 4, "group_size": 1, "algo": "ring"}]})";

}  // namespace

TEST(TunedTable, ChoosesByShapeAndSize) {
  const auto path = writeFile("tuned_ok.json", kTable);
  const auto t = TunedTable::load(path);
  std::remove(path.c_str());
  EXPECT_EQ(t.choose(4, 4, 2), Algo::halving_doubling);
  EXPECT_EQ(t.choose(16384, 4, 2), Algo::halving_doubling);
  EXPECT_EQ(t.choose(16385, 4, 2), Algo::hierarchical);
  EXPECT_EQ(t.choose(1 << 20, 4, 2), Algo::hierarchical);
  EXPECT_EQ(t.choose((1 << 20) + 1, 4, 2), Algo::rails);
  EXPECT_EQ(t.choose(SIZE_MAX, 4, 2), Algo::rails);
  EXPECT_EQ(t.choose(64, 4, 1), Algo::ring);
  EXPECT_EQ(t.choose(64, 4, 0), Algo::ring);  // group size 0 or 1: one rank per node
  EXPECT_EQ(t.choose(64, 8, 2), Algo::automatic);  // no rule for this shape
  EXPECT_EQ(t.choose(64, 4, 4), Algo::automatic);
  // Written back, read again: the same rules.
  const auto again = writeFile("tuned_again.json", t.json("2x2@1gbit"));
  const auto u = TunedTable::load(again);
  std::remove(again.c_str());
  ASSERT_EQ(u.rules().size(), t.rules().size());
  for (size_t i = 0; i < t.rules().size(); ++i) {
    EXPECT_EQ(u.rules()[i].world, t.rules()[i].world);
    EXPECT_EQ(u.rules()[i].group_size, t.rules()[i].group_size);
    EXPECT_EQ(u.rules()[i].max_bytes, t.rules()[i].max_bytes);
    EXPECT_EQ(u.rules()[i].algo, t.rules()[i].algo);
  }
}

TEST(TunedTable, BadFilesNameTheFileAndTheRule) {
  EXPECT_NE(errorOf("not json").find("not JSON"), std::string::npos);
  EXPECT_NE(errorOf(R"({"rules": 3})").find("no array 'rules'"), std::string::npos);
  EXPECT_NE(errorOf(R"({"rules": [{"world": 4, "group_size": 1, "algo": "fastest"}]})").find("rules[0]"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"rules": [{"world": 4, "group_size": 1, "algo": "tree"}]})").find("not a network allreduce"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"rules": [{"world": 4, "group_size": 1, "algo": "shm"}]})").find("not a network allreduce"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"rules": [{"world": 4, "group_size": 1, "algo": "hier"}]})").find("needs groups"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"rules": [{"world": -4, "group_size": 1, "algo": "ring"}]})").find("'world'"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"rules": [{"world": 4, "group_size": 1, "max_bytes": 10, "algo": "ring"}]})")
                .find("needs no max_bytes"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"rules": [{"world": 4, "group_size": 1, "max_bytes": 10, "algo": "ring"},
                                  {"world": 4, "group_size": 1, "max_bytes": 10, "algo": "hd"},
                                  {"world": 4, "group_size": 1, "algo": "ring"}]})")
                .find("two rules for the same sizes"),
            std::string::npos);
  const auto missing = ::testing::TempDir() + "no_such_tuning.json";
  try {
    TunedTable::load(missing);
    FAIL() << "a missing file was read";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
}

TEST(TunedTable, TheCommunicatorFollowsItForItsShape) {
  const auto path = writeFile("tuned_comm.json", kTable);
  auto table = std::make_shared<const TunedTable>(TunedTable::load(path));
  std::remove(path.c_str());
  CommOptions o;
  o.shm = ShmMode::off;
  o.group_size = 2;
  o.tuned = table;
  auto comms = test::makeComms(4, o);
  EXPECT_EQ(comms[0]->chooseAllreduce(4096), Algo::halving_doubling);
  EXPECT_EQ(comms[0]->chooseAllreduce(256 << 10), Algo::hierarchical);  // the fixed table: hier too
  EXPECT_EQ(comms[0]->chooseAllreduce(64 << 20), Algo::rails);          // the fixed table: hier
  EXPECT_EQ(comms[0]->chooseAllreduce(64 << 20, Algo::ring), Algo::ring);  // forced wins
  // And it runs: every rank sums the same with the tuned choice.
  std::vector<std::vector<float>> bufs(4, std::vector<float>(1 << 16));
  test::onRanks(4, [&](int r) {
    for (size_t i = 0; i < bufs[r].size(); ++i) bufs[r][i] = static_cast<float>(r + i % 7);
    comms[r]->allreduce(bufs[r].data(), bufs[r].size(), DType::f32, ReduceOp::sum);
  });
  for (int r = 0; r < 4; ++r)
    for (size_t i = 0; i < bufs[r].size(); i += 997) ASSERT_EQ(bufs[r][i], static_cast<float>(6 + 4 * (i % 7)));
  // Another shape: no rule, the fixed table.
  o.group_size = 4;
  comms[0]->setOptions(o);
  EXPECT_EQ(comms[0]->chooseAllreduce(64 << 20), Algo::ring);
  EXPECT_EQ(comms[0]->chooseAllreduce(4096), Algo::halving_doubling);
  o.deterministic = true;  // identical bits whatever the table says
  comms[0]->setOptions(o);
  EXPECT_EQ(comms[0]->chooseAllreduce(64 << 20), Algo::ordered);
}
