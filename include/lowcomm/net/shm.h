// Shared memory between processes on one host: a named POSIX segment mapped by every local
// rank, and the key that tells which ranks share a host.
#pragma once

#include <cstddef>
#include <string>

namespace lowcomm::net {

// Identifies "the same machine and the same network view": hostname, kernel boot id and the
// network namespace. Ranks in different network namespaces (an emulated cluster's nodes)
// get different keys even though they could share memory.
std::string hostKey();

// A mapped POSIX shared-memory segment. The creator makes it (zero-filled); others open it by
// name. unlink() removes the name (the mapping stays valid): call it once everyone has opened
// it, so a crash never leaves a segment behind in /dev/shm.
class ShmSegment {
 public:
  static ShmSegment create(const std::string& name, size_t bytes);  // throws ConfigError
  static ShmSegment open(const std::string& name, size_t bytes);    // throws ConfigError
  ShmSegment() = default;
  ShmSegment(ShmSegment&& o) noexcept;
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  void unlink();
  char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  void release();

  std::string name_;
  char* data_ = nullptr;
  size_t size_ = 0;
  bool owner_ = false;
};

}  // namespace lowcomm::net
