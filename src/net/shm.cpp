#include "lowcomm/net/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "lowcomm/base/error.h"

namespace lowcomm::net {

std::string hostKey() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat ns {};
  const bool have_ns = ::stat("/proc/self/ns/net", &ns) == 0;
  return std::string(host) + "|" + boot + "|" + (have_ns ? std::to_string(ns.st_ino) : "?");
}

namespace {
char* mapFd(int fd, size_t bytes, const std::string& name) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    throw ConfigError("shared memory: cannot map '" + name + "' (" + std::to_string(bytes) + " bytes): " +
                      std::strerror(errno));
  return static_cast<char*>(p);
}
}  // namespace

ShmSegment ShmSegment::create(const std::string& label, size_t bytes) {
  const int fd = ::memfd_create(label.c_str(), MFD_CLOEXEC);
  if (fd < 0) throw ConfigError("shared memory: cannot create '" + label + "': " + std::strerror(errno));
  // posix_fallocate reserves the pages now: on a too-small tmpfs, ftruncate alone succeeds and
  // the first write far into the segment dies with SIGBUS.
  int err = ::ftruncate(fd, static_cast<off_t>(bytes)) != 0 ? errno : ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err != 0) {
    ::close(fd);
    throw ConfigError("shared memory: cannot size '" + label + "' to " + std::to_string(bytes) +
                      " bytes (is there enough memory?): " + std::strerror(err));
  }
  ShmSegment s;
  s.name_ = "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd);
  s.size_ = bytes;
  s.fd_ = fd;
  s.data_ = mapFd(fd, bytes, label);  // on failure s's destructor closes fd
  return s;
}

ShmSegment ShmSegment::open(const std::string& name, size_t bytes) {
  const int fd = ::open(name.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw ConfigError("shared memory: cannot open '" + name + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
    ::close(fd);
    throw ConfigError("shared memory: '" + name + "' is smaller than the expected " + std::to_string(bytes) + " bytes");
  }
  ShmSegment s;
  s.name_ = name;
  s.size_ = bytes;
  try {
    s.data_ = mapFd(fd, bytes, name);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return s;
}

ShmSegment::ShmSegment(ShmSegment&& o) noexcept { *this = std::move(o); }

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    release();
    name_ = std::move(o.name_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

ShmSegment::~ShmSegment() { release(); }

void ShmSegment::release() {
  unlink();
  if (data_) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

void ShmSegment::unlink() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace lowcomm::net
