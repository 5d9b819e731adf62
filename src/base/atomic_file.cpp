// writeFileAtomically (lowcomm/base/atomic_file.h).
#include "lowcomm/base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "lowcomm/base/error.h"

namespace lowcomm {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void ioFail(const std::string& path, const std::string& what, int err) {
  throw IoError("cannot write '" + path + "': " + what + ": " + std::strerror(err));
}

// Removes the temporary file, then throws: a failed write leaves neither it nor a partial target.
[[noreturn]] void ioFailTmp(const std::string& path, const std::string& tmp, const std::string& what, int err) {
  ::unlink(tmp.c_str());
  ioFail(path, what, err);
}

// Writes everything `fill` gives to fd; returns the first write's errno (0: all written).
int fillFd(int fd, const std::function<void(const FileSink&)>& fill) {
  int write_err = 0;
  const FileSink sink = [&](const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    for (size_t done = 0; done < size && write_err == 0;) {
      const ssize_t n = ::write(fd, p + done, size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) write_err = n < 0 ? errno : EIO;
      else done += static_cast<size_t>(n);
    }
  };
  fill(sink);
  return write_err;
}

// A device, FIFO or socket the user named: written as it is, never replaced.
void writeInPlace(const std::string& path, const std::function<void(const FileSink&)>& fill) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) ioFail(path, "open", errno);
  int err = 0;
  try {
    err = fillFd(fd, fill);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  if (err != 0) ioFail(path, "write", err);
}

}  // namespace

void writeFileAtomically(const std::string& path, const std::string& bytes) {
  writeFileAtomicallyWith(path, [&](const FileSink& sink) { sink(bytes.data(), bytes.size()); });
}

void writeFileAtomicallyWith(const std::string& path, const std::function<void(const FileSink&)>& fill) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) ioFail(path, "it is a directory", EISDIR);
    return writeInPlace(path, fill);
  }
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) ioFail(path, "open '" + tmp + "'", errno);
  int write_err = 0;
  try {
    write_err = fillFd(fd, fill);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (write_err != 0) {
    ::close(fd);
    ioFailTmp(path, tmp, "write '" + tmp + "'", write_err);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    ioFailTmp(path, tmp, "fsync '" + tmp + "'", err);
  }
  if (::close(fd) != 0) ioFailTmp(path, tmp, "close '" + tmp + "'", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) ioFailTmp(path, tmp, "rename '" + tmp + "'", errno);
  const std::string dir = fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path().string();
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) ioFail(path, "open directory '" + dir + "'", errno);
  if (::fsync(dfd) != 0) {
    const int err = errno;
    ::close(dfd);
    ioFail(path, "fsync directory '" + dir + "'", err);
  }
  ::close(dfd);
}

}  // namespace lowcomm
