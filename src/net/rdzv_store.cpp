// RdzvClient: every rank's side of the authenticated rendezvous store (contract in rdzv_store.h).
#include "lowcomm/net/rdzv_store.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <thread>

#include "lowcomm/base/error.h"
#include "lowcomm/net/auth.h"
#include "rdzv_wire.h"

namespace lowcomm::net {

using namespace rdzv;

namespace {

void putKey(std::vector<uint8_t>& req, uint8_t op, const std::string& key) {
  if (key.size() > kMaxKey) throw ConfigError("store key longer than " + std::to_string(kMaxKey) + " bytes");
  req.push_back(op);
  req.push_back(static_cast<uint8_t>(key.size() >> 8));
  req.push_back(static_cast<uint8_t>(key.size() & 0xff));
  req.insert(req.end(), key.begin(), key.end());
}

template <typename T>
void putInt(std::vector<uint8_t>& v, T x) {
  const auto* p = reinterpret_cast<const uint8_t*>(&x);
  v.insert(v.end(), p, p + sizeof(T));
}

}  // namespace

std::string jobId(const std::string& token) {
  const Nonce zero{};
  const Digest d = hmac(token, "lowcomm-job-id", zero.data(), zero.data());
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 8; ++i) out += {hex[d[i] >> 4], hex[d[i] & 15]};
  return out;
}

// ---------------------------------------------------------------------------------------------
// Client

namespace {
enum class Greeting { ok, lost, foreign, refused, unproven };

// The client's half of the handshake on a connected socket (the server's is in rdzv_server.cpp).
// `lost`: the connection ended before a verdict (a busy or flooded server drops the oldest
// unfinished handshakes), worth another try; the others are final.
Greeting greet(int fd, const std::string& token, Clock::time_point deadline) {
  std::array<uint8_t, kHello> hello{};
  const Io io = readAll(fd, hello.data(), hello.size(), deadline);
  if (io != Io::ok) return Greeting::lost;
  if (std::memcmp(hello.data(), kMagic, sizeof(kMagic)) != 0) return Greeting::foreign;
  const uint8_t* sn = hello.data() + sizeof(kMagic);
  const auto cn = freshNonce();
  const Digest mac = hmac(token, "lowcomm-rdzv-client", sn, cn.data());
  std::vector<uint8_t> answer(kMagic, kMagic + sizeof(kMagic));
  answer.insert(answer.end(), cn.begin(), cn.end());
  answer.insert(answer.end(), mac.begin(), mac.end());
  if (!writeAll(fd, answer.data(), answer.size(), deadline)) return Greeting::lost;
  std::array<uint8_t, kVerdict> verdict{};
  if (readAll(fd, verdict.data(), 1, deadline) != Io::ok) return Greeting::lost;
  if (verdict[0] == 'R') return Greeting::refused;
  if (verdict[0] != 'A') return Greeting::foreign;
  if (readAll(fd, verdict.data() + 1, 32, deadline) != Io::ok) return Greeting::lost;
  const Digest want = hmac(token, "lowcomm-rdzv-server", cn.data(), sn);
  return sameDigest(want.data(), verdict.data() + 1) ? Greeting::ok : Greeting::unproven;
}
}  // namespace

// Connects and greets until one handshake succeeds: refused connections (rank 0 not up yet) and
// lost handshakes are retried until `timeout`; a refusal or a foreign server ends it at once.
RdzvClient::RdzvClient(const std::string& host, int port, const std::string& token, std::chrono::milliseconds timeout)
    : host_(host), port_(port), token_(token), connect_timeout_(timeout), where_(host + ":" + std::to_string(port)),
      prefix_("job/" + jobId(token) + "/") {
  const auto deadline = Clock::now() + timeout;
  socklen_t len = 0;
  const sockaddr_storage addr = resolve(host, port, len);
  std::string last = "no answer";
  for (;;) {
    const int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw Error(std::string("rendezvous: socket: ") + std::strerror(errno));
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
      last = std::strerror(errno);
      ::close(fd);
    } else {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      const Greeting g = greet(fd, token, std::min(deadline, Clock::now() + kClientHandshake));
      if (g == Greeting::ok) {
        fd_ = fd;
        return;
      }
      ::close(fd);
      if (g == Greeting::foreign)
        throw PeerError(0, "the rendezvous store at " + where_ +
                               " did not greet as a lowcomm store (another service on MASTER_PORT?)");
      if (g == Greeting::refused)
        throw AuthError("the rendezvous store at " + where_ +
                        " refused this process: its LOWCOMM_JOB_TOKEN is not the job's (a process of another job, "
                        "or another job's store on this MASTER_PORT)");
      if (g == Greeting::unproven)
        throw AuthError("the rendezvous store at " + where_ +
                        " could not prove this job's token (another job's store?)");
      last = "the store closed the connection during the handshake (busy or flooded)";
    }
    if (Clock::now() >= deadline)
      throw TimeoutError("cannot reach the rendezvous store at " + where_ + " within " +
                         std::to_string(timeout.count()) + " ms (is rank 0 running?): " + last);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

RdzvClient::~RdzvClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::shared_ptr<Store> RdzvClient::fork() {
  checkAborted("fork");
  auto c = std::make_shared<RdzvClient>(host_, port_, token_, connect_timeout_);
  std::lock_guard<std::mutex> lk(why_mu_);
  if (aborted_.load()) c->abort(why_);  // aborted while it connected
  forks_.erase(std::remove_if(forks_.begin(), forks_.end(), [](const auto& f) { return f.expired(); }), forks_.end());
  forks_.push_back(c);
  return c;
}

void RdzvClient::abort(const std::string& why) {
  std::vector<std::weak_ptr<RdzvClient>> forks;
  {
    std::lock_guard<std::mutex> lk(why_mu_);
    if (aborted_.load()) return;
    why_ = why;
    aborted_.store(true);
    forks.swap(forks_);
  }
  for (auto& f : forks)
    if (auto c = f.lock()) c->abort(why);
}

void RdzvClient::checkAborted(const std::string& what) const {
  if (!aborted_.load()) return;
  std::lock_guard<std::mutex> lk(why_mu_);
  throw AbortedError("rendezvous store: " + what + " aborted: " + why_);
}

std::vector<uint8_t> RdzvClient::call(const std::vector<uint8_t>& request, std::chrono::milliseconds reply_within,
                                      const std::string& what) {
  checkAborted(what);
  std::lock_guard<std::mutex> lock(mu_);
  const auto deadline = Clock::now() + reply_within;
  std::vector<uint8_t> reply;
  if (fd_ < 0 || !writeFrame(fd_, request, deadline) || readFrame(fd_, reply, deadline) != Io::ok || reply.empty()) {
    if (fd_ >= 0) ::close(fd_);  // a reply may still be under way: no later call may read it as its own
    fd_ = -1;
    throw PeerError(0, "rendezvous store at " + where_ + " (hosted by rank 0) stopped answering during " + what +
                           "; did rank 0 exit?");
  }
  return reply;
}

void RdzvClient::set(const std::string& key, const Bytes& value) {
  if (value.size() > kMaxValue)
    throw ConfigError("store value for '" + key + "' is larger than " + std::to_string(kMaxValue) + " bytes");
  std::vector<uint8_t> req;
  putKey(req, kSet, prefix_ + key);
  req.insert(req.end(), value.begin(), value.end());
  call(req, std::chrono::seconds(60), "set('" + key + "')");
}

// The server waits for the key in slices of at most 100 ms, so other threads of this process can
// use the connection in between (two ranks of one process rendezvous at once: splitRoles).
Bytes RdzvClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const int64_t slice = std::clamp<int64_t>(msLeft(deadline), 1, 100);
    std::vector<uint8_t> req;
    putKey(req, kGet, prefix_ + key);
    putInt(req, static_cast<uint32_t>(slice));
    auto reply = call(req, std::chrono::milliseconds(slice) + std::chrono::seconds(30), "get('" + key + "')");
    if (reply[0] == kOk) return Bytes(reply.begin() + 1, reply.end());
    checkAborted("get('" + key + "')");
    if (Clock::now() >= deadline)
      throw TimeoutError("store: key '" + key + "' not set within " + std::to_string(timeout.count()) + " ms");
    std::this_thread::yield();  // let a sibling thread take the connection
  }
}

bool RdzvClient::check(const std::string& key) {
  std::vector<uint8_t> req;
  putKey(req, kCheck, prefix_ + key);
  const auto reply = call(req, std::chrono::seconds(60), "check('" + key + "')");
  return reply.size() == 2 && reply[1] == 1;
}

int64_t RdzvClient::add(const std::string& key, int64_t delta) {
  std::vector<uint8_t> req;
  putKey(req, kAdd, prefix_ + key);
  putInt(req, delta);
  const auto reply = call(req, std::chrono::seconds(60), "add('" + key + "')");
  if (reply.size() != 9) throw PeerError(0, "rendezvous store at " + where_ + ": malformed reply to add");
  int64_t v = 0;
  std::memcpy(&v, reply.data() + 1, 8);
  return v;
}

}  // namespace lowcomm::net
