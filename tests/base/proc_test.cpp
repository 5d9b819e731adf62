// readProcFile / processStateOf on real processes: running, zombie, reaped, never existed.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "lowcomm/base/proc.h"

using namespace lowcomm;

TEST(Proc, StateOfARunningAZombieAndAReapedProcess) {
  const char self = processStateOf(::getpid());
  EXPECT_TRUE(self == 'R' || self == 'S') << self;
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char c;
    while (::read(pipe_fds[0], &c, 1) < 0) {
    }
    ::_exit(0);
  }
  ::close(pipe_fds[0]);
  const char waiting = processStateOf(child);
  EXPECT_TRUE(waiting == 'S' || waiting == 'R') << waiting;
  ASSERT_EQ(::write(pipe_fds[1], "x", 1), 1);
  ::close(pipe_fds[1]);
  char state = '?';
  for (int i = 0; i < 2000 && (state = processStateOf(child)) != 'Z'; ++i) ::usleep(1000);
  EXPECT_EQ(state, 'Z') << "an exited, unreaped child is a zombie";
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(processStateOf(child), '\0') << "a reaped process has no state";
  EXPECT_EQ(readProcFile("/proc/" + std::to_string(child) + "/stat"), "");
}

TEST(Proc, ReadsAFileAndReturnsEmptyForAMissingOne) {
  const std::string stat = readProcFile("/proc/self/stat");
  EXPECT_NE(stat.find(std::to_string(::getpid()) + " ("), std::string::npos) << stat;
  EXPECT_EQ(readProcFile("/proc/no-such-file"), "");
  EXPECT_EQ(processStateOf(-1), '\0');
}
