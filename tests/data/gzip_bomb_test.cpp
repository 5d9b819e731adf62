// Gzip bombs: a ~1 MB file that expands past the cap on one data file (1024 MiB) is a DataError
// naming the file and the cap, before the memory runs out. Each load runs in a child process
// whose address space may grow by only 2.5 GiB, as on a rank of a machine without room to
// spare: there an unbounded read ends in std::bad_alloc, naming nothing.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "lowcomm/base/error.h"
#include "lowcomm/data/dataset.h"
#include "test_util.h"

namespace lowcomm::data {
namespace {

using testing::TempDir;

constexpr size_t kMember = size_t{16} << 20;  // zeros per gzip member (~16 KB compressed)

// gzip members concatenated (gzread reads them as one stream): `head`, then `members` x 16 MiB
// of zeros, built from one compressed member so the bomb costs milliseconds to make.
void writeBomb(const std::string& path, const std::vector<uint8_t>& head, int members) {
  const std::string tmp = path + ".member";
  testing::writeGz(tmp, std::vector<uint8_t>(kMember, 0));
  const std::vector<uint8_t> zeros = testing::readRaw(tmp);
  std::remove(tmp.c_str());
  if (!head.empty()) testing::writeGz(path, head);
  std::ofstream out(path, std::ios::binary | std::ios::app);
  for (int i = 0; i < members; ++i) out.write(reinterpret_cast<const char*>(zeros.data()), zeros.size());
  ASSERT_TRUE(out.good());
}

long vmBytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmSize:", 0) == 0) return std::stol(line.substr(7)) * 1024;
  return 0;
}

// Runs `load` in a child with RLIMIT_AS = its size now + 2.5 GiB; returns "<type>: <message>"
// of what it threw ("" when it returned).
std::string errorInLimitedChild(const std::function<void()>& load) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(120);
    const rlim_t limit = static_cast<rlim_t>(vmBytes()) + (rlim_t{5} << 29);
    const rlimit rl{limit, limit};
    ::setrlimit(RLIMIT_AS, &rl);
    std::string what;
    try {
      load();
    } catch (const DataError& e) {
      what = std::string("DataError: ") + e.what();
    } catch (const std::exception& e) {
      what = std::string("other: ") + e.what();
    }
    [[maybe_unused]] ssize_t n = ::write(fds[1], what.data(), what.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string what;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) what.append(buf, n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status)) << "the child died (status " << status << ")";
  return what;
}

TEST(GzipBomb, TextCorpusFileOverTheCapIsADataErrorNamingFileAndCap) {
  TempDir d;
  testing::writeRaw(d.file("a.txt"), std::vector<uint8_t>(1000, 'a'));
  writeBomb(d.file("b.txt.gz"), {}, 65);  // 1040 MiB of zeros, ~1 MB on disk
  const std::string e = errorInLimitedChild([&] { loadTextCorpus(d.path(), "*", false, 16); });
  EXPECT_EQ(e.rfind("DataError: ", 0), 0u) << e;
  EXPECT_NE(e.find("b.txt.gz"), std::string::npos) << e;
  EXPECT_NE(e.find("1024 MiB"), std::string::npos) << e;
}

TEST(GzipBomb, IdxFileOverTheCapIsADataErrorNamingFileAndCap) {
  TempDir d;
  const std::vector<uint32_t> dims = {1400000, 28, 28};  // 1.1e9 bytes of images declared
  writeBomb(d.file("train-images-idx3-ubyte.gz"), testing::idxBytes(dims, {}), 66);
  testing::writeGz(d.file("train-labels-idx1-ubyte.gz"), testing::idxBytes({1}, {0}));
  const std::string e = errorInLimitedChild([&] { loadFashionMnist(d.path(), true); });
  EXPECT_EQ(e.rfind("DataError: ", 0), 0u) << e;
  EXPECT_NE(e.find("train-images-idx3-ubyte.gz"), std::string::npos) << e;
  EXPECT_NE(e.find("1024 MiB"), std::string::npos) << e;
}

// The corpus is held once, as int64 tokens: inputs and targets are two views of it (not copies).
TEST(GzipBomb, TextCorpusInputsAndTargetsShareOneTokenTensor) {
  TempDir d;
  testing::writeRaw(d.file("a.txt"), std::vector<uint8_t>(4096, 'a'));
  testing::writeRaw(d.file("b.txt"), std::vector<uint8_t>(64, 'b'));
  const Dataset ds = loadTextCorpus(d.path(), "*", true, 16);
  ASSERT_EQ(ds.size(), (4096 - 1) / 16);
  EXPECT_TRUE(ds.images.is_alias_of(ds.labels)) << "inputs and targets are separate copies of the corpus";
  EXPECT_EQ(ds.labels.data_ptr<int64_t>(), ds.images.data_ptr<int64_t>() + 1);
  EXPECT_EQ(ds.images.storage().nbytes(), static_cast<size_t>(ds.size() * 16 + 1) * sizeof(int64_t));
}

}  // namespace
}  // namespace lowcomm::data
