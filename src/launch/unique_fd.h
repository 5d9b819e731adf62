// An owned file descriptor, and the pipes the launcher makes (private to lowcomm_launch).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "lowcomm/base/error.h"

namespace lowcomm::launch {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Both ends close-on-exec so no worker inherits another worker's pipe (it would hold it open
// and delay EOF); the read end non-blocking so a drain can never block.
inline void makePipe(UniqueFd& read_end, UniqueFd& write_end) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw Error(std::string("pipe2: ") + std::strerror(errno));
  read_end.reset(p[0]);
  write_end.reset(p[1]);
  ::fcntl(p[0], F_SETFL, ::fcntl(p[0], F_GETFL) | O_NONBLOCK);
}

}  // namespace lowcomm::launch
