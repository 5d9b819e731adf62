// writeFileAtomically: a regular file is replaced whole; a path that is not a regular file (a
// FIFO here, /dev/null for a user) is written in place and stays what it was (renaming a temp
// file over it turned /dev/null into a file when a test passed `--json /dev/null` as root).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "lowcomm/base/atomic_file.h"
#include "lowcomm/base/error.h"

using namespace lowcomm;
namespace fs = std::filesystem;

namespace {

fs::path tempDir(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / (name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

TEST(AtomicFile, ARegularFileIsReplacedWholeAndNoTempFileStays) {
  const auto d = tempDir("atomic_regular");
  const auto p = d / "out.json";
  std::ofstream(p) << "old content that is longer";
  writeFileAtomically(p.string(), "new");
  EXPECT_EQ(slurp(p), "new");
  EXPECT_FALSE(fs::exists(d / "out.json.tmp"));
  fs::remove_all(d);
}

TEST(AtomicFile, AFifoIsWrittenInPlaceAndStaysAFifo) {
  const auto d = tempDir("atomic_fifo");
  const auto p = d / "pipe";
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
  const int reader = ::open(p.c_str(), O_RDONLY | O_NONBLOCK);  // so that the writer's open succeeds
  ASSERT_GE(reader, 0);
  writeFileAtomically(p.string(), "through the pipe");
  char buf[64] = {};
  const ssize_t n = ::read(reader, buf, sizeof buf);
  ::close(reader);
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced by a file";
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), "through the pipe");
  EXPECT_FALSE(fs::exists(d / "pipe.tmp"));
  fs::remove_all(d);
}

TEST(AtomicFile, ADirectoryIsAnIoErrorNamingIt) {
  const auto d = tempDir("atomic_dir");
  try {
    writeFileAtomically(d.string(), "x");
    FAIL() << "wrote over a directory";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(d.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("directory"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_directory(d));
  fs::remove_all(d);
}
