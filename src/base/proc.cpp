#include "lowcomm/base/proc.h"

#include <fcntl.h>
#include <unistd.h>

namespace lowcomm {

std::string readProcFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char buf[4096];
  const ssize_t n = ::read(fd, buf, sizeof(buf));
  ::close(fd);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

char processStateOf(long pid) {
  const std::string stat = readProcFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');  // the command name may contain spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= stat.size()) return '\0';
  return stat[paren + 2];
}

}  // namespace lowcomm
