#include "rdzv_wire.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "lowcomm/base/error.h"

namespace lowcomm::net::rdzv {

int msLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left, 200)));
}

Io readAll(int fd, uint8_t* p, size_t n, Clock::time_point deadline, const std::atomic<bool>* stop) {
  while (n > 0) {
    if (stop && stop->load()) return Io::closed;
    if (Clock::now() >= deadline) return Io::timeout;
    pollfd pfd{fd, POLLIN, 0};
    const int r = ::poll(&pfd, 1, msLeft(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Io::closed;
    if (r == 0) continue;
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) return Io::closed;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return Io::ok;
}

bool writeAll(int fd, const uint8_t* p, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    if (Clock::now() >= deadline) return false;
    pollfd pfd{fd, POLLOUT, 0};
    const int r = ::poll(&pfd, 1, msLeft(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    const ssize_t sent = ::send(fd, p, n, MSG_NOSIGNAL);
    if (sent < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (sent <= 0) return false;
    p += sent;
    n -= static_cast<size_t>(sent);
  }
  return true;
}

bool writeFrame(int fd, const std::vector<uint8_t>& payload, Clock::time_point deadline) {
  const uint32_t len = htonl(static_cast<uint32_t>(payload.size()));
  return writeAll(fd, reinterpret_cast<const uint8_t*>(&len), 4, deadline) &&
         writeAll(fd, payload.data(), payload.size(), deadline);
}

Io readFrame(int fd, std::vector<uint8_t>& out, Clock::time_point deadline, const std::atomic<bool>* stop) {
  uint32_t len = 0;
  const Io io = readAll(fd, reinterpret_cast<uint8_t*>(&len), 4, deadline, stop);
  if (io != Io::ok) return io;
  len = ntohl(len);
  if (len == 0 || len > kMaxFrame) return Io::oversize;
  out.resize(len);
  return readAll(fd, out.data(), len, deadline, stop);
}

sockaddr_storage resolve(const std::string& host, int port, socklen_t& len) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0 || !res)
    throw ConfigError("rendezvous: cannot resolve MASTER_ADDR '" + host + "': " + ::gai_strerror(rc));
  sockaddr_storage ss{};
  std::memcpy(&ss, res->ai_addr, res->ai_addrlen);
  len = res->ai_addrlen;
  ::freeaddrinfo(res);
  return ss;
}

}  // namespace lowcomm::net::rdzv
