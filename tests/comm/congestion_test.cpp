// Per-socket congestion control (src/comm/congestion.h): set on every pair socket of every
// stream, read back with getsockopt, and an algorithm the kernel lacks is a ConfigError.
#include <gtest/gtest.h>

#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

#include "comm/congestion.h"
#include "comm/harness.h"
#include "comm/lanes.h"
#include "comm/mesh.h"
#include "lowcomm/base/error.h"
#include "lowcomm/net/store.h"

using namespace lowcomm;
using namespace lowcomm::comm;
using namespace std::chrono;

namespace {

// The system default, and an algorithm the kernel offers that differs from it (reno is always
// built in).
std::string systemDefault() {
  std::ifstream in("/proc/sys/net/ipv4/tcp_congestion_control");
  std::string s;
  in >> s;
  return s;
}
std::string another() { return systemDefault() == "reno" ? "cubic" : "reno"; }

// The process's connected TCP sockets per congestion control, found independently of the library.
std::map<std::string, int> socketsByAlgorithm() {
  std::map<std::string, int> out;
  DIR* dir = ::opendir("/proc/self/fd");
  while (dirent* e = ::readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    int proto = 0;
    socklen_t len = sizeof(proto);
    sockaddr_storage peer{};
    socklen_t plen = sizeof(peer);
    if (fd <= 2 || ::getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) != 0 || proto != IPPROTO_TCP ||
        ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0)
      continue;
    out[socketCongestionControl(fd)]++;
  }
  ::closedir(dir);
  return out;
}

}  // namespace

TEST(Congestion, EveryPairSocketReportsTheChosenAlgorithm) {
  const std::string cc = another();
  auto store = std::make_shared<net::MemoryStore>();
  auto dev = net::makeDevice([] {
    net::TransportOptions t;
    t.address = "127.0.0.1";
    return t;
  }());
  std::vector<std::unique_ptr<Link>> links(3);
  std::vector<std::vector<int>> fds(3);
  test::onRanks(3, [&](int r) {
    links[r] = connectLink(store, "cc", r, 3, dev, "", seconds(10), cc);
    fds[r] = pairSockets(*links[r], seconds(10));
  });
  for (int r = 0; r < 3; ++r)
    for (int p = 0; p < 3; ++p) {
      if (p == r) {
        EXPECT_EQ(fds[r][p], -1);
        continue;
      }
      ASSERT_GE(fds[r][p], 0) << "rank " << r << " peer " << p;
      EXPECT_EQ(socketCongestionControl(fds[r][p]), cc) << "rank " << r << " peer " << p;
    }
  // Six distinct sockets: both ends of each of the three connections.
  std::set<int> all;
  for (auto& v : fds) all.insert(v.begin(), v.end());
  all.erase(-1);
  EXPECT_EQ(all.size(), 6u);
}

// Every stream's pairs get it (and split()'s), other sockets of the process keep the default.
TEST(Congestion, CommunicatorsSetItOnEveryStream) {
  const std::string cc = another();
  const int before = socketsByAlgorithm()[cc];
  auto comms = test::makeComms(3, [&](int r) {
    CommOptions o;
    o.site = r == 2;
    o.streams = 2;
    o.congestion_control = cc;
    return o;
  });
  // 2 streams x 3 connections x 2 ends.
  EXPECT_EQ(socketsByAlgorithm()[cc] - before, 12);
  std::vector<test::CommPtr> kids(3);
  test::onRanks(3, [&](int r) { kids[r] = comms[r]->split(r == 1 ? -1 : 0, r); });  // {0, 2}: two sites
  EXPECT_EQ(socketsByAlgorithm()[cc] - before, 12 + 2 * 2);
  auto plain = test::makeComms(2);
  EXPECT_EQ(socketsByAlgorithm()[cc] - before, 12 + 2 * 2);
  EXPECT_GE(socketsByAlgorithm()[systemDefault()], 2);
}

// The process's connected TCP sockets whose TCP_NOTSENT_LOWAT is the lanes' (src/comm/lanes.h).
int socketsWithLanesLowat() {
  int out = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  while (dirent* e = ::readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    int proto = 0, lowat = 0;
    socklen_t len = sizeof(proto), llen = sizeof(lowat);
    if (fd <= 2 || ::getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) != 0 || proto != IPPROTO_TCP ||
        ::getsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, &llen) != 0)
      continue;
    out += lowat == kLaneNotSentLowat;
  }
  ::closedir(dir);
  return out;
}

// Sends on lanes complete when their data is nearly on the wire: the cross-site pairs of every
// stream (and only those) get TCP_NOTSENT_LOWAT.
TEST(Congestion, CrossSitePairsOfEveryStreamGetTheLanesLowat) {
  const int before = socketsWithLanesLowat();
  auto comms = test::makeComms(3, [&](int r) {
    CommOptions o;
    o.site = r == 2;
    o.streams = 2;
    return o;
  });
  // 2 streams x 2 cross-site connections (0-2, 1-2) x 2 ends; not 0-1.
  EXPECT_EQ(socketsWithLanesLowat() - before, 8);
  auto one_stream = test::makeComms(2, [&](int r) {
    CommOptions o;
    o.site = r;
    o.streams = 1;
    return o;
  });
  EXPECT_EQ(socketsWithLanesLowat() - before, 8);  // nothing is laned with one stream
}

TEST(Congestion, SystemIsTheDefault) {
  EXPECT_EQ(checkCongestionControl(""), "");
  EXPECT_EQ(checkCongestionControl("system"), "");
  EXPECT_EQ(checkCongestionControl("reno"), "reno");
}

TEST(Congestion, AnAlgorithmTheKernelLacksIsAConfigError) {
  auto store = std::make_shared<net::MemoryStore>();
  CommOptions o;
  o.congestion_control = "no-such-cc";
  try {
    Communicator::create(store, 0, 1, o);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("no-such-cc"), std::string::npos) << m;
    EXPECT_NE(m.find("tcp_available_congestion_control"), std::string::npos) << m;
    EXPECT_NE(m.find("reno"), std::string::npos) << m;  // the list
  }
}

// The warning for sites on a congestion control that restarts slow after idle: only when the
// ranks span sites, the sockets do not use bbr and the sysctl is on.
TEST(Congestion, IdleRestartWarningOnlyAcrossSitesWithoutBbr) {
  EXPECT_NE(idleRestartWarning(true, "cubic", 1).find("tcp_slow_start_after_idle"), std::string::npos);
  EXPECT_NE(idleRestartWarning(true, "reno", 1).find("comm.congestion_control = \"bbr\""), std::string::npos);
  EXPECT_EQ(idleRestartWarning(true, "bbr", 1), "");
  EXPECT_EQ(idleRestartWarning(true, "cubic", 0), "");
  EXPECT_EQ(idleRestartWarning(false, "cubic", 1), "");
  EXPECT_EQ(idleRestartWarning(false, "system"), "");  // reads nothing without sites
  EXPECT_EQ(idleRestartWarning(true, "bbr"), "");       // a forced bbr, whatever this namespace's sysctl
}
