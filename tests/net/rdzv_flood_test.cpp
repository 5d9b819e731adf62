// The rendezvous store under a flood of unauthenticated connections: whoever can reach MASTER_PORT
// without the token must not be able to take rank 0 down (threads, fds, a spinning acceptor).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "lowcomm/base/error.h"
#include "lowcomm/net/rdzv_store.h"

using namespace lowcomm;
using namespace lowcomm::net;
using namespace std::chrono_literals;

namespace {
const std::string kToken = "flood-test-token-0123456789";

// -1 when the connection could not be made (e.g. at the fd limit).
int tryConnect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int threadsOfThisProcess() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

void raiseFdLimit() {
  rlimit r{};
  ::getrlimit(RLIMIT_NOFILE, &r);
  r.rlim_cur = r.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &r);
}
}  // namespace

// 2000 idle connections and 1000 that stop half-way through the handshake, plus a stream of new
// ones while a member works: the member is served, and the server's threads stay bounded (a thread
// per unauthenticated connection is what let a stranger exhaust rank 0).
TEST(RdzvFlood, IdleAndHalfOpenConnectionsKeepThreadsBoundedAndTheJobServed) {
  raiseFdLimit();
  const int before = threadsOfThisProcess();
  RdzvServer server("127.0.0.1", 0, kToken);
  std::vector<int> held;
  for (int i = 0; i < 3000; ++i) {
    const int fd = tryConnect(server.port());
    ASSERT_GE(fd, 0) << "connection " << i;
    if (i >= 2000) {  // half-open: the magic and a few bytes of the answer, then silence
      const char part[12] = {'L', 'C', 'R', 'D', 'Z', 'V', '0', '1', 1, 2, 3, 4};
      ASSERT_EQ(::send(fd, part, sizeof(part), MSG_NOSIGNAL), 12);
    }
    held.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread churn([&] {  // new strangers keep arriving while the member works
    while (!stop) {
      const int fd = tryConnect(server.port());
      if (fd >= 0) ::close(fd);
    }
  });
  std::this_thread::sleep_for(300ms);
  const int during = threadsOfThisProcess();
  {
    RdzvClient member("127.0.0.1", server.port(), kToken, 20s);
    member.set("k", toBytes("v"));
    EXPECT_EQ(toString(member.get("k", 5s)), "v");
    EXPECT_EQ(member.add("n", 3), 3);
  }
  stop = true;
  churn.join();
  // The server's own threads: its acceptor and one per authenticated member (+ the churn thread).
  EXPECT_LE(during - before, 4) << "threads before " << before << ", during the flood " << during;
  for (int fd : held) ::close(fd);
}

// At the fd limit, accept() fails with EMFILE while the listening socket stays readable: an
// acceptor that retries at once spins a core. It must back off, and serve again once fds are free.
TEST(RdzvFlood, AtTheFdLimitTheAcceptorBacksOffInsteadOfSpinning) {
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipefd[0]);
    int verdict = 0;  // bit 0: spun; bit 1: not served afterwards
    {
      rlimit r{256, 256};
      ::setrlimit(RLIMIT_NOFILE, &r);
      RdzvServer server("127.0.0.1", 0, kToken);
      std::vector<int> strangers, filler;
      for (int i = 0; i < 20; ++i) strangers.push_back(tryConnect(server.port()));
      std::this_thread::sleep_for(200ms);
      for (int fd; (fd = ::dup(0)) >= 0;) filler.push_back(fd);  // every fd taken
      for (int i = 0; i < 20; ++i) {  // connections the server cannot accept: they wait in the backlog
        if (!filler.empty()) {
          ::close(filler.back());
          filler.pop_back();
        }
        strangers.push_back(tryConnect(server.port()));
      }
      for (int fd; (fd = ::dup(0)) >= 0;) filler.push_back(fd);
      rusage u0{}, u1{};
      ::getrusage(RUSAGE_SELF, &u0);
      std::this_thread::sleep_for(1s);
      ::getrusage(RUSAGE_SELF, &u1);
      const double cpu = (u1.ru_utime.tv_sec - u0.ru_utime.tv_sec) + (u1.ru_stime.tv_sec - u0.ru_stime.tv_sec) +
                         1e-6 * ((u1.ru_utime.tv_usec - u0.ru_utime.tv_usec) + (u1.ru_stime.tv_usec - u0.ru_stime.tv_usec));
      if (cpu > 0.3) verdict |= 1;
      for (int fd : filler) ::close(fd);
      for (int fd : strangers)
        if (fd >= 0) ::close(fd);
      try {
        RdzvClient member("127.0.0.1", server.port(), kToken, 10s);
        member.set("k", toBytes("v"));
      } catch (const std::exception&) {
        verdict |= 2;
      }
    }
    if (::write(pipefd[1], &verdict, sizeof(verdict)) != sizeof(verdict)) ::_exit(3);
    ::_exit(0);
  }
  ::close(pipefd[1]);
  int verdict = -1;
  ASSERT_EQ(::read(pipefd[0], &verdict, sizeof(verdict)), static_cast<ssize_t>(sizeof(verdict)));
  ::close(pipefd[0]);
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(verdict & 1, 0) << "the acceptor spun at the fd limit (more than 0.3 s of CPU in 1 s)";
  EXPECT_EQ(verdict & 2, 0) << "no member was served once fds were free again";
}

// The two limits on strangers: past `max_pending` the oldest unfinished handshake is closed, and
// none outlives `handshake` (the peer sees the greeting, then the end of the connection).
TEST(RdzvFlood, UnfinishedHandshakesAreClosedByAgeAndByCount) {
  RdzvLimits limits;
  limits.handshake = 300ms;
  limits.max_pending = 8;
  RdzvServer server("127.0.0.1", 0, kToken, limits);
  std::vector<int> fds;
  for (int i = 0; i < 20; ++i) fds.push_back(tryConnect(server.port()));
  for (int i = 0; i < 100 && server.dropped() < 12; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_GE(server.dropped(), 12) << "more than max_pending unfinished handshakes were kept";
  std::this_thread::sleep_for(600ms);
  EXPECT_EQ(server.dropped(), 20) << "an unfinished handshake outlived its deadline";
  for (int fd : fds) {
    char buf[64];
    ssize_t n = 0, got;
    while ((got = ::recv(fd, buf, sizeof(buf), 0)) > 0) n += got;
    EXPECT_EQ(n, 40) << "the greeting, then the end of the connection";
    ::close(fd);
  }
  RdzvClient member("127.0.0.1", server.port(), kToken, 5s);
  member.set("k", toBytes("v"));
  EXPECT_EQ(server.refused(), 0);
}
