// Shared memory that no kill can leak: an anonymous memfd opened through /proc, never a name in /dev/shm.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <set>

#include "lowcomm/base/error.h"
#include "lowcomm/net/shm.h"

using namespace lowcomm;
using namespace lowcomm::net;
namespace fs = std::filesystem;

namespace {
std::set<std::string> devShm() {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev/shm", ec)) out.insert(e.path().filename().string());
  return out;
}
}  // namespace

TEST(ShmSegment, OpenedThroughProcAndClosedForNewcomersAfterUnlink) {
  const auto before = devShm();
  ShmSegment a = ShmSegment::create("lowcomm-test", 1 << 16);
  EXPECT_EQ(a.name().rfind("/proc/" + std::to_string(::getpid()) + "/fd/", 0), 0u) << a.name();
  EXPECT_EQ(devShm(), before) << "a segment appeared in /dev/shm";
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a.data()[i], 0) << "not zero-filled at " << i;
  ShmSegment b = ShmSegment::open(a.name(), 1 << 16);
  std::strcpy(a.data() + 100, "hello");
  EXPECT_STREQ(b.data() + 100, "hello");
  EXPECT_THROW(ShmSegment::open(a.name(), 1 << 20), ConfigError);  // smaller than expected
  const std::string name = a.name();
  a.unlink();
  EXPECT_THROW(ShmSegment::open(name, 1 << 16), ConfigError);  // nobody new can open it
  std::strcpy(b.data() + 200, "still shared");
  EXPECT_STREQ(a.data() + 200, "still shared");
}

// The creator is SIGKILLed while its segment is open (as rank 0 could be at any stage of the
// shared-memory setup): nothing remains that anyone could open, and /dev/shm is untouched.
TEST(ShmSegment, NothingSurvivesAKilledCreator) {
  const auto before = devShm();
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipefd[0]);
    ShmSegment s = ShmSegment::create("lowcomm-test-child", 1 << 16);
    std::strcpy(s.data(), "from the child");
    const std::string name = s.name() + "\n";
    if (::write(pipefd[1], name.data(), name.size()) < 0) ::_exit(2);
    ::pause();
    ::_exit(0);
  }
  ::close(pipefd[1]);
  std::string name;
  char c;
  while (::read(pipefd[0], &c, 1) == 1 && c != '\n') name += c;
  ::close(pipefd[0]);
  {
    ShmSegment seen = ShmSegment::open(name, 1 << 16);
    EXPECT_STREQ(seen.data(), "from the child");
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_THROW(ShmSegment::open(name, 1 << 16), ConfigError);
  EXPECT_EQ(devShm(), before);
}
