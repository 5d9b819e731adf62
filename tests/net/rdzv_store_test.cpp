// The authenticated rendezvous store: the Store contract between clients, and what it refuses.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <csignal>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <thread>

#include "lowcomm/base/error.h"
#include "lowcomm/net/rdzv_store.h"

using namespace lowcomm;
using namespace lowcomm::net;
using namespace std::chrono_literals;

namespace {
const std::string kToken = "0123456789abcdef-test-token";

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// A raw TCP connection to the server, for clients that do not follow the protocol.
int rawConnect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// Waits until the server has counted `n` refused connections (it counts when it closes them).
bool refusedReaches(const RdzvServer& s, int64_t n) {
  for (int i = 0; i < 200 && s.refused() < n; ++i) std::this_thread::sleep_for(10ms);
  return s.refused() >= n;
}
}  // namespace

TEST(RdzvStore, SetGetCheckAddAcrossClients) {
  RdzvServer server("127.0.0.1", 0, kToken);
  RdzvClient a("127.0.0.1", server.port(), kToken, 5s), b("127.0.0.1", server.port(), kToken, 5s);
  EXPECT_FALSE(b.check("k"));
  a.set("k", toBytes("value"));
  EXPECT_TRUE(b.check("k"));
  EXPECT_EQ(toString(b.get("k", 1s)), "value");
  EXPECT_EQ(a.add("n", 2), 2);
  EXPECT_EQ(b.add("n", 5), 7);
  EXPECT_EQ(toString(a.get("n", 1s)), "7");  // counters read back as decimal text, as in c10d
  std::thread late([&] {
    std::this_thread::sleep_for(100ms);
    a.set("late", toBytes("x"));
  });
  EXPECT_EQ(toString(b.get("late", 5s)), "x");  // get blocks until the key is set
  late.join();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NE(errorOf([&] { b.get("never", 300ms); }).find("key 'never' not set within 300 ms"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_EQ(server.refused(), 0);
}

// A process with another token (or none) is refused with a clear message; the job goes on.
TEST(RdzvStore, WrongTokenIsRefusedAndTheJobGoesOn) {
  RdzvServer server("127.0.0.1", 0, kToken);
  RdzvClient member("127.0.0.1", server.port(), kToken, 5s);
  member.set("k", toBytes("v"));
  try {
    RdzvClient intruder("127.0.0.1", server.port(), "another-job-token-xyz", 5s);
    FAIL() << "a wrong token was admitted";
  } catch (const AuthError& e) {
    EXPECT_NE(std::string(e.what()).find("refused this process"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(refusedReaches(server, 1));
  // A raw connection that sends garbage instead of the handshake is refused too.
  const int fd = rawConnect(server.port());
  const std::string junk(4096, 'x');
  ASSERT_EQ(::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL), static_cast<ssize_t>(junk.size()));
  EXPECT_TRUE(refusedReaches(server, 2));
  ::close(fd);
  EXPECT_EQ(toString(member.get("k", 1s)), "v");
  member.set("k2", toBytes("still working"));
  EXPECT_EQ(toString(member.get("k2", 1s)), "still working");
}

// Two jobs on one port: the second job's server cannot bind and says why; the second job's
// clients reaching the first job's server are refused, and a client does not accept a server that
// cannot prove its own token either (both directions are checked: here the server is the other job's).
TEST(RdzvStore, ASecondJobOnThePortFailsFastAndSaysWhy) {
  RdzvServer first("127.0.0.1", 0, kToken);
  const std::string e = errorOf([&] { RdzvServer second("127.0.0.1", first.port(), "second-job-token-1234"); });
  EXPECT_NE(e.find("cannot listen on 127.0.0.1:" + std::to_string(first.port())), std::string::npos) << e;
  EXPECT_NE(e.find("another job"), std::string::npos) << e;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(RdzvClient("127.0.0.1", first.port(), "second-job-token-1234", 30s), AuthError);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);  // fails fast, not at the rendezvous timeout
}

// After a correct handshake, a frame announcing more than a key and the largest value closes the
// connection before anything is allocated for it; malformed requests close it too.
TEST(RdzvStore, OversizeAndMalformedFramesAreRejected) {
  RdzvServer server("127.0.0.1", 0, kToken);
  auto authenticated = [&] {
    const int fd = rawConnect(server.port());
    std::array<uint8_t, 40> hello{};
    EXPECT_EQ(::recv(fd, hello.data(), hello.size(), MSG_WAITALL), 40);
    std::array<uint8_t, 32> cn{};
    cn.fill(7);
    std::vector<uint8_t> msg;
    const std::string label = "lowcomm-rdzv-client";
    msg.insert(msg.end(), label.begin(), label.end());
    msg.insert(msg.end(), hello.begin() + 8, hello.end());
    msg.insert(msg.end(), cn.begin(), cn.end());
    std::array<uint8_t, 32> mac{};
    unsigned int len = 0;
    HMAC(EVP_sha256(), kToken.data(), static_cast<int>(kToken.size()), msg.data(), msg.size(), mac.data(), &len);
    std::vector<uint8_t> answer(hello.begin(), hello.begin() + 8);
    answer.insert(answer.end(), cn.begin(), cn.end());
    answer.insert(answer.end(), mac.begin(), mac.end());
    EXPECT_EQ(::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL), 72);
    uint8_t verdict[33];
    EXPECT_EQ(::recv(fd, verdict, sizeof(verdict), MSG_WAITALL), 33);
    EXPECT_EQ(verdict[0], 'A');
    return fd;
  };
  int fd = authenticated();
  const uint32_t huge = htonl(0xfffffff0u);
  ASSERT_EQ(::send(fd, &huge, 4, MSG_NOSIGNAL), 4);
  EXPECT_TRUE(refusedReaches(server, 1));
  char c;
  EXPECT_EQ(::recv(fd, &c, 1, 0), 0) << "connection still open after an oversize frame";
  ::close(fd);
  fd = authenticated();
  const std::vector<uint8_t> bad = {0, 0, 0, 3, 9, 0, 0};  // length 3, unknown op 9
  ASSERT_EQ(::send(fd, bad.data(), bad.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bad.size()));
  EXPECT_TRUE(refusedReaches(server, 2));
  ::close(fd);
  RdzvClient ok("127.0.0.1", server.port(), kToken, 5s);
  ok.set("k", toBytes("fine"));
  EXPECT_EQ(toString(ok.get("k", 1s)), "fine");
}

TEST(RdzvStore, BindsOnlyToMasterAddrsAddress) {
  // 192.0.2.1 (TEST-NET-1) is no address of this host: rank 0 cannot listen there.
  const std::string e = errorOf([] { RdzvServer s("192.0.2.1", 0, kToken); });
  EXPECT_NE(e.find("not an address of rank 0's host"), std::string::npos) << e;
  // Bound to 127.0.0.1, the server is not reachable through another local address.
  RdzvServer server("127.0.0.1", 0, kToken);
  EXPECT_THROW(RdzvClient("127.0.0.2", server.port(), kToken, 300ms), TimeoutError);
}

TEST(RdzvStore, JobIdsDifferByToken) {
  EXPECT_EQ(jobId(kToken).size(), 16u);
  EXPECT_EQ(jobId(kToken), jobId(kToken));
  EXPECT_NE(jobId(kToken), jobId(kToken + "x"));
}

// Rank 0 hosts the store in its own process. When that process is SIGKILLed while another rank
// waits in the rendezvous, the waiting rank fails at once with a PeerError naming rank 0, not at
// the rendezvous timeout.
TEST(RdzvStore, ARank0ThatDiesDuringRendezvousIsNamed) {
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // rank 0: host the store until killed
    ::close(pipefd[0]);
    RdzvServer server("127.0.0.1", 0, kToken);
    const int port = server.port();
    if (::write(pipefd[1], &port, sizeof(port)) != sizeof(port)) ::_exit(1);
    for (;;) ::pause();
  }
  ::close(pipefd[1]);
  int port = 0;
  ASSERT_EQ(::read(pipefd[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  ::close(pipefd[0]);
  RdzvClient client("127.0.0.1", port, kToken, 5s);
  client.set("rank1/addr", toBytes("x"));
  std::thread killer([&] {
    std::this_thread::sleep_for(300ms);
    ::kill(child, SIGKILL);
  });
  const auto t0 = std::chrono::steady_clock::now();
  int rank = -1;
  std::string what;
  try {
    client.get("rank0/addr", 60s);  // rank 0 never publishes: it dies first
  } catch (const PeerError& e) {
    rank = e.rank();
    what = e.what();
  }
  killer.join();
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(rank, 0) << what;
  EXPECT_NE(what.find("hosted by rank 0"), std::string::npos) << what;
  EXPECT_NE(what.find("rank0/addr"), std::string::npos) << what;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}
