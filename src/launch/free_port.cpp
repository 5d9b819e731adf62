// findFreePort: bind port 0 on the address, read back the port the kernel chose, close.
//
// The port is only known to be free at the moment of the call; another process may take it
// before rank 0 binds it. torchrun accepts the same race (its _get_free_port does the same).
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "lowcomm/base/error.h"
#include "lowcomm/launch/launcher.h"

namespace lowcomm::launch {

namespace {

// Closes the socket on every path out of findFreePort.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

int portOf(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(ss).sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(ss).sin6_port);
  return 0;
}

}  // namespace

int findFreePort(const std::string& addr) {
  if (addr.empty()) throw ConfigError("findFreePort: empty address");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(addr.c_str(), "0", &hints, &res);
  if (gai != 0) {
    throw ConfigError("cannot resolve master address '" + addr + "': " + ::gai_strerror(gai));
  }

  // Try every resolved address ("localhost" may give ::1 first on a host without IPv6).
  std::string last_error = "no usable address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    FdGuard sock{::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol)};
    if (sock.fd < 0) {
      last_error = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    if (::bind(sock.fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      last_error = std::string("bind: ") + std::strerror(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    if (::getsockname(sock.fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
      last_error = std::string("getsockname: ") + std::strerror(errno);
      continue;
    }
    const int port = portOf(bound);
    if (port > 0) {
      ::freeaddrinfo(res);
      return port;
    }
  }
  ::freeaddrinfo(res);
  throw Error("cannot find a free port on '" + addr + "': " + last_error);
}

}  // namespace lowcomm::launch
