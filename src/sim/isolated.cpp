#include "isolated.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

#include "lowcomm/base/error.h"

namespace lowcomm::sim {

namespace {

void writeAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t k = ::write(fd, s.data() + done, s.size() - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return;
    done += static_cast<size_t>(k);
  }
}

std::string readAll(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t k = ::read(fd, buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    out.append(buf, static_cast<size_t>(k));
  }
  return out;
}

}  // namespace

// The child's reply: one tag byte ('O' result, 'C' ConfigError, 'E' other error) and the text.
std::string runIsolated(const std::function<std::string()>& f) {
  int fds[2];
  if (::pipe(fds) != 0) throw Error(std::string("simulate: pipe failed: ") + std::strerror(errno));
  std::fflush(nullptr);  // or the child's exit would print what the parent buffered, again
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error(std::string("simulate: fork failed: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(fds[0]);
    std::string reply;
    try {
      reply = "O" + f();
    } catch (const ConfigError& e) {
      reply = std::string("C") + e.what();
    } catch (const std::exception& e) {
      reply = std::string("E") + e.what();
    }
    writeAll(fds[1], reply);
    ::close(fds[1]);
    ::_exit(0);
  }
  ::close(fds[1]);
  const std::string reply = readAll(fds[0]);
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status))
    throw Error("simulate: the simulation crashed (signal " + std::to_string(WTERMSIG(status)) + ")" +
                (reply.size() > 1 ? ": " + reply.substr(1) : std::string()));
  if (reply.empty()) throw Error("simulate: the simulation ended without a result");
  if (reply[0] == 'C') throw ConfigError(reply.substr(1));
  if (reply[0] == 'E') throw Error(reply.substr(1));
  return reply.substr(1);
}

}  // namespace lowcomm::sim
