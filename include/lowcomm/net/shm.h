// Shared memory between processes on one host: a segment mapped by every local rank, and the
// key that tells which ranks share a host.
#pragma once

#include <cstddef>
#include <string>

namespace lowcomm::net {

// Identifies "the same machine and the same network view": hostname, kernel boot id and the
// network namespace. Ranks in different network namespaces (an emulated cluster's nodes)
// get different keys even though they could share memory.
std::string hostKey();

// Shared memory that no kill can leak: the creator makes an anonymous memfd (zero-filled,
// `label` shows in /proc/PID/maps) and keeps its descriptor; name() is "/proc/PID/fd/FD", which
// processes of the same user on this host open. unlink() closes the creator's descriptor: nobody
// can open it any more, the mappings stay valid. The kernel frees the memory when the last
// mapping or descriptor goes, however the processes end; nothing ever appears in /dev/shm.
class ShmSegment {
 public:
  static ShmSegment create(const std::string& label, size_t bytes);  // throws ConfigError
  static ShmSegment open(const std::string& name, size_t bytes);     // throws ConfigError
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
  int fd_ = -1;  // the creator's memfd until unlink()
};

}  // namespace lowcomm::net
