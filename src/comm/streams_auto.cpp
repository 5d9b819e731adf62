#include "streams_auto.h"

// linux/tcp.h, not netinet/tcp.h: only the kernel's header has tcpi_min_rtt.
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "congestion.h"
#include "link.h"

namespace lowcomm::comm {

double mathisBound(double rtt_s, double loss, double mss) {
  if (loss <= 0) return std::numeric_limits<double>::infinity();
  return mss / rtt_s * std::sqrt(1.5) / std::sqrt(loss);
}

int autoStreams(const PathSample& path) {
  if (!(path.rtt_s >= kLanRtt)) return 1;  // also NaN
  const double loss = path.loss >= 0 ? path.loss : kDesignLoss;
  const double rate = path.rate_Bps > 0 ? path.rate_Bps : kDesignRate;
  const double mss = path.mss > 0 ? path.mss : kDefaultMss;
  const double k = std::ceil(rate / mathisBound(path.rtt_s, loss, mss));
  return static_cast<int>(std::clamp(k, 1.0, static_cast<double>(kAutoMaxStreams)));
}

namespace {

// The socket's smallest RTT sample in microseconds (tcpi_rtt, the smoothed one, where the
// kernel keeps no minimum); 0 when TCP_INFO fails.
uint64_t minRttUs(int fd) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return 0;
  const bool has_min = len >= offsetof(tcp_info, tcpi_min_rtt) + sizeof(info.tcpi_min_rtt);
  return has_min && info.tcpi_min_rtt > 0 ? info.tcpi_min_rtt : info.tcpi_rtt;
}

}  // namespace

double measureCrossSiteRtt(Link& link, std::chrono::milliseconds timeout) {
  const int me = link.rank(), n = link.size();
  const auto fds = pairSockets(link, timeout);
  uint64_t mine = 0;
  for (int p = 0; p < n; ++p)
    if (p != me && fds[p] >= 0 && link.crossSite(p)) mine = std::max(mine, minRttUs(fds[p]));
  // Every rank's largest to every other rank, so all take the same maximum.
  std::vector<uint64_t> theirs(n, 0);
  TrafficMeter not_metered;
  {
    GlooExchange ex(link, not_metered, "streams", "setup", timeout, link.nextSeq());
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      ex.isend(p, &mine, sizeof(mine), ex.slot(0, static_cast<uint32_t>(p)));
      ex.irecv(p, &theirs[p], sizeof(uint64_t), ex.slot(0, static_cast<uint32_t>(me)));
    }
    ex.waitAll();
  }
  uint64_t most = mine;
  for (uint64_t t : theirs) most = std::max(most, t);
  return static_cast<double>(most) * 1e-6;
}

}  // namespace lowcomm::comm
