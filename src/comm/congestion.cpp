#include "congestion.h"

#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <gloo/context.h>
#include <gloo/transport/tcp/address.h>

#include "link.h"
#include "lowcomm/base/error.h"

namespace lowcomm::comm {

namespace {

constexpr const char* kAvailable = "/proc/sys/net/ipv4/tcp_available_congestion_control";
constexpr const char* kAllowed = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";

std::string readLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Address and port of an IPv4/IPv6 endpoint; equal endpoints compare equal.
struct Endpoint {
  sockaddr_storage ss{};
  bool sameHost(const Endpoint& o) const {
    if (ss.ss_family != o.ss.ss_family) return false;
    if (ss.ss_family == AF_INET)
      return std::memcmp(&in4().sin_addr, &o.in4().sin_addr, sizeof(in_addr)) == 0;
    return std::memcmp(&in6().sin6_addr, &o.in6().sin6_addr, sizeof(in6_addr)) == 0;
  }
  bool operator==(const Endpoint& o) const {
    if (!sameHost(o)) return false;
    return ss.ss_family == AF_INET ? in4().sin_port == o.in4().sin_port : in6().sin6_port == o.in6().sin6_port;
  }
  const sockaddr_in& in4() const { return reinterpret_cast<const sockaddr_in&>(ss); }
  const sockaddr_in6& in6() const { return reinterpret_cast<const sockaddr_in6&>(ss); }
};

struct TcpSocket {
  int fd;
  Endpoint local, remote;
};

// The process's connected TCP sockets (IPv4/IPv6), from /proc/self/fd.
std::vector<TcpSocket> connectedTcpSockets() {
  std::vector<TcpSocket> out;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return out;
  while (dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    int proto = 0;
    socklen_t len = sizeof(proto);
    if (::getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_PROTOCOL, &proto, &len) != 0 || proto != IPPROTO_TCP) continue;
    TcpSocket s{static_cast<int>(fd), {}, {}};
    socklen_t a = sizeof(s.local.ss), b = sizeof(s.remote.ss);
    if (::getsockname(s.fd, reinterpret_cast<sockaddr*>(&s.local.ss), &a) != 0 ||
        ::getpeername(s.fd, reinterpret_cast<sockaddr*>(&s.remote.ss), &b) != 0)
      continue;  // listening or unconnected
    if (s.local.ss.ss_family == AF_INET || s.local.ss.ss_family == AF_INET6) out.push_back(s);
  }
  ::closedir(dir);
  return out;
}

}  // namespace

std::string checkCongestionControl(const std::string& name) {
  if (name.empty() || name == "system") return "";
  const std::string available = readLine(kAvailable);
  std::istringstream words(available);
  for (std::string w; words >> w;)
    if (w == name) return name;
  throw ConfigError("comm.congestion_control: the kernel does not offer '" + name + "' (" + kAvailable + ": " +
                    (available.empty() ? "unreadable" : available) + ")");
}

std::string idleRestartWarning(bool spans_sites, const std::string& effective, int slow_start_after_idle) {
  if (!spans_sites || effective == "bbr" || slow_start_after_idle != 1) return "";
  return "the ranks span sites and their pair sockets use " + (effective.empty() ? std::string("the system's") : effective) +
         " with net.ipv4.tcp_slow_start_after_idle = 1: a connection idle for a retransmission timeout restarts "
         "from its initial window, so each synchronisation across the WAN starts slow (DDP on the emulated "
         "50 ms WAN: 0.71 s per step, 0.54 s with bbr); set comm.congestion_control = \"bbr\" or "
         "sysctl net.ipv4.tcp_slow_start_after_idle=0 (docs/collectives.md)";
}

std::string idleRestartWarning(bool spans_sites, const std::string& congestion_control) {
  if (!spans_sites) return "";
  std::string cc = congestion_control == "system" ? "" : congestion_control;
  if (cc.empty()) cc = readLine("/proc/sys/net/ipv4/tcp_congestion_control");
  const std::string idle = readLine("/proc/sys/net/ipv4/tcp_slow_start_after_idle");
  return idleRestartWarning(true, cc, idle == "1" ? 1 : 0);
}

// Gloo does not expose a pair's socket. What identifies it: Gloo's pair p listens on its own
// address (Pair::address(), bound to a port the kernel chose), and of the two pairs of a
// connection one accepts on its listening address while the other, closing its own listener,
// connects from an ephemeral port to that address. So the connection's socket is, on the
// accepting side, the one whose local endpoint is this pair's listening address, and on the
// connecting side the one whose remote endpoint is the peer pair's listening address — which
// the ranks therefore exchange first. The accepted connection keeps that port in the kernel's
// bind table, and the kernel never hands a port still held that way to another bind to port 0
// (as Gloo's listeners bind), so no other socket of the namespace matches; the other half of
// each match (the far end's host) is checked too. Ranks that are threads of one process share
// /proc/self/fd, and this still picks exactly each pair's own socket.
std::vector<int> pairSockets(Link& link, std::chrono::milliseconds timeout) {
  const int me = link.rank(), n = link.size();
  std::vector<Endpoint> mine(n), theirs(n);
  std::vector<int> out(n, -1);
  if (n == 1) return out;
  TrafficMeter not_metered;
  {
    GlooExchange ex(link, not_metered, "congestion", "setup", timeout, link.nextSeq());
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      const auto& a = dynamic_cast<const gloo::transport::tcp::Address&>(link.context().getPair(p)->address());
      mine[p].ss = a.getSockaddr();
      ex.isend(p, &mine[p].ss, sizeof(sockaddr_storage), ex.slot(0, static_cast<uint32_t>(p)));
      ex.irecv(p, &theirs[p].ss, sizeof(sockaddr_storage), ex.slot(0, static_cast<uint32_t>(me)));
    }
    ex.waitAll();
  }
  const auto sockets = connectedTcpSockets();
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    for (const auto& s : sockets)
      if ((s.local == mine[p] && s.remote.sameHost(theirs[p])) || (s.remote == theirs[p] && s.local.sameHost(mine[p])))
        out[p] = s.fd;
  }
  return out;
}

void setCongestionControl(Link& link, const std::string& name, std::chrono::milliseconds timeout) {
  const std::string cc = checkCongestionControl(name);
  if (cc.empty()) return;
  const auto fds = pairSockets(link, timeout);
  for (int r = 0; r < link.size(); ++r) {
    if (r == link.rank()) continue;
    if (fds[r] < 0)
      throw ConfigError("comm.congestion_control: rank " + std::to_string(link.rank()) +
                        " found no socket for its pair with rank " + std::to_string(r));
    if (::setsockopt(fds[r], IPPROTO_TCP, TCP_CONGESTION, cc.c_str(), static_cast<socklen_t>(cc.size())) != 0) {
      const int err = errno;
      throw ConfigError("comm.congestion_control: the kernel refused '" + cc + "' on the socket to rank " +
                        std::to_string(r) + ": " + std::strerror(err) + " (without CAP_NET_ADMIN only " + kAllowed +
                        ": " + readLine(kAllowed) + ")");
    }
  }
}

void setNotSentLowat(Link& link, const std::vector<bool>& peers, int bytes, std::chrono::milliseconds timeout) {
  const auto fds = pairSockets(link, timeout);
  for (int r = 0; r < link.size(); ++r) {
    if (r == link.rank() || r >= static_cast<int>(peers.size()) || !peers[r]) continue;
    if (fds[r] < 0 || ::setsockopt(fds[r], IPPROTO_TCP, TCP_NOTSENT_LOWAT, &bytes, sizeof(bytes)) != 0)
      throw ConfigError("rank " + std::to_string(link.rank()) + " could not set TCP_NOTSENT_LOWAT on its pair with rank " +
                        std::to_string(r) + (fds[r] < 0 ? ": no socket found" : std::string(": ") + std::strerror(errno)));
  }
}

std::string socketCongestionControl(int fd) {
  char buf[32] = {0};
  socklen_t len = sizeof(buf) - 1;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, buf, &len) != 0) return "";
  return std::string(buf, strnlen(buf, len));
}

}  // namespace lowcomm::comm
