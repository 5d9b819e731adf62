#include "lowcomm/net/rdzv_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <thread>

#include "lowcomm/base/error.h"
#include "lowcomm/net/auth.h"

namespace lowcomm::net {

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kMagic[8] = {'L', 'C', 'R', 'D', 'Z', 'V', '0', '1'};
constexpr size_t kNonce = 32;
constexpr uint32_t kMaxFrame = static_cast<uint32_t>(1 + 2 + kMaxKey + kMaxValue);
constexpr uint8_t kSet = 1, kGet = 2, kCheck = 3, kAdd = 4;
constexpr uint8_t kOk = 0, kMissing = 1;
constexpr auto kHandshakeTime = std::chrono::seconds(10);

Digest hmac(const std::string& token, const std::string& label, const uint8_t* a, const uint8_t* b) {
  return hmacSha256(token, label, a, kNonce, b, kNonce);
}

Nonce nonce() { return freshNonce(); }

enum class Io { ok, closed, timeout, oversize };

int msLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left, 200)));
}

// Reads exactly n bytes before `deadline`; `stop` (optional) is checked between polls.
Io readAll(int fd, uint8_t* p, size_t n, Clock::time_point deadline, const std::atomic<bool>* stop = nullptr) {
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

// One frame, refused (closed) when its announced length exceeds kMaxFrame: nothing is allocated first.
Io readFrame(int fd, std::vector<uint8_t>& out, Clock::time_point deadline, const std::atomic<bool>* stop = nullptr) {
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
// Server

RdzvServer::RdzvServer(const std::string& host, int port, std::string token) : token_(std::move(token)) {
  if (token_.empty()) throw ConfigError("rendezvous: the job token is empty");
  socklen_t len = 0;
  sockaddr_storage addr = resolve(host, port, len);
  listen_fd_ = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw ConfigError(std::string("rendezvous: socket: ") + std::strerror(errno));
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(listen_fd_, 1024) != 0) {
    const int err = errno;
    ::close(listen_fd_);
    throw ConfigError("rendezvous: rank 0 cannot listen on " + host + ":" + std::to_string(port) + ": " +
                      std::strerror(err) +
                      (err == EADDRINUSE ? " (another job, or an earlier run still closing, uses this MASTER_PORT)"
                                         : err == EADDRNOTAVAIL ? " (MASTER_ADDR is not an address of rank 0's host)"
                                                                : ""));
  }
  sockaddr_storage bound{};
  socklen_t blen = sizeof(bound);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &blen);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  acceptor_ = std::thread([this] { acceptLoop(); });
}

RdzvServer::~RdzvServer() {
  stop_ = true;
  cv_.notify_all();
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(conn_mu_);
    for (int fd : conn_fds_)
      if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
  }
  cv_.notify_all();
  for (auto& t : connections_) t.join();
  ::close(listen_fd_);
}

void RdzvServer::acceptLoop() {
  while (!stop_) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (::poll(&pfd, 1, 200) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::lock_guard<std::mutex> lock(conn_mu_);
    const size_t slot = conn_fds_.size();
    conn_fds_.push_back(fd);
    connections_.emplace_back([this, fd, slot] {
      try {
        serve(fd);
      } catch (const std::exception&) {  // nothing a client sends may end the server
        ++refused_;
      }
      std::lock_guard<std::mutex> l(conn_mu_);
      ::close(fd);
      conn_fds_[slot] = -1;
    });
  }
}

void RdzvServer::serve(int fd) {
  if (!handshake(fd)) {
    ++refused_;
    return;
  }
  std::vector<uint8_t> frame;
  while (!stop_) {
    // Clients may stay idle for the whole job between requests.
    const Io io = readFrame(fd, frame, Clock::now() + std::chrono::hours(24 * 365), &stop_);
    if (io != Io::ok) {
      if (io == Io::oversize) ++refused_;
      return;
    }
    bool ok = false;
    try {
      ok = handle(fd, frame);
    } catch (const std::exception&) {  // e.g. add() on a key that holds no number
      ok = false;
    }
    if (!ok) {
      ++refused_;
      return;
    }
  }
}

bool RdzvServer::handshake(int fd) {
  const auto deadline = Clock::now() + kHandshakeTime;
  const auto sn = nonce();
  std::vector<uint8_t> hello(kMagic, kMagic + sizeof(kMagic));
  hello.insert(hello.end(), sn.begin(), sn.end());
  if (!writeAll(fd, hello.data(), hello.size(), deadline)) return false;
  std::array<uint8_t, sizeof(kMagic) + kNonce + 32> answer{};
  if (readAll(fd, answer.data(), answer.size(), deadline, &stop_) != Io::ok) return false;
  const uint8_t* cn = answer.data() + sizeof(kMagic);
  const Digest want = hmac(token_, "lowcomm-rdzv-client", sn.data(), cn);
  const bool ok = std::memcmp(answer.data(), kMagic, sizeof(kMagic)) == 0 &&
                  sameDigest(want.data(), cn + kNonce);
  if (!ok) {
    const uint8_t refuse = 'R';
    writeAll(fd, &refuse, 1, deadline);
    return false;
  }
  std::vector<uint8_t> accept{'A'};
  const Digest proof = hmac(token_, "lowcomm-rdzv-server", cn, sn.data());
  accept.insert(accept.end(), proof.begin(), proof.end());
  return writeAll(fd, accept.data(), accept.size(), deadline);
}

bool RdzvServer::handle(int fd, const std::vector<uint8_t>& f) {
  if (f.size() < 3) return false;
  const uint8_t op = f[0];
  const size_t klen = (static_cast<size_t>(f[1]) << 8) | f[2];
  if (klen > kMaxKey || 3 + klen > f.size()) return false;
  const std::string key(f.begin() + 3, f.begin() + 3 + static_cast<long>(klen));
  const uint8_t* rest = f.data() + 3 + klen;
  const size_t nrest = f.size() - 3 - klen;
  std::vector<uint8_t> reply;
  if (op == kSet) {
    if (nrest > kMaxValue) return false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      data_[key] = Bytes(rest, rest + nrest);
    }
    cv_.notify_all();
    reply = {kOk};
  } else if (op == kGet) {
    if (nrest != 4) return false;
    uint32_t ms = 0;
    std::memcpy(&ms, rest, 4);
    std::unique_lock<std::mutex> lock(mu_);
    const bool found = cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return stop_ || data_.count(key); });
    if (found && data_.count(key)) {
      reply = {kOk};
      reply.insert(reply.end(), data_[key].begin(), data_[key].end());
    } else {
      reply = {kMissing};
    }
  } else if (op == kCheck) {
    if (nrest != 0) return false;
    std::lock_guard<std::mutex> lock(mu_);
    reply = {kOk, static_cast<uint8_t>(data_.count(key) ? 1 : 0)};
  } else if (op == kAdd) {
    if (nrest != 8) return false;
    int64_t delta = 0;
    std::memcpy(&delta, rest, 8);
    int64_t now = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& v = data_[key];  // decimal text, as c10d stores counters
      const std::string old(v.begin(), v.end());
      now = (old.empty() ? 0 : std::stoll(old)) + delta;
      const std::string text = std::to_string(now);
      v.assign(text.begin(), text.end());
    }
    cv_.notify_all();
    reply = {kOk};
    putInt(reply, now);
  } else {
    return false;
  }
  return writeFrame(fd, reply, Clock::now() + std::chrono::seconds(60));
}

// ---------------------------------------------------------------------------------------------
// Client

RdzvClient::RdzvClient(const std::string& host, int port, const std::string& token, std::chrono::milliseconds timeout)
    : where_(host + ":" + std::to_string(port)), prefix_("job/" + jobId(token) + "/") {
  const auto deadline = Clock::now() + timeout;
  socklen_t len = 0;
  const sockaddr_storage addr = resolve(host, port, len);
  std::string last = "no answer";
  while (fd_ < 0) {
    const int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw Error(std::string("rendezvous: socket: ") + std::strerror(errno));
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0) {
      fd_ = fd;
      break;
    }
    last = std::strerror(errno);
    ::close(fd);
    if (Clock::now() >= deadline)
      throw TimeoutError("cannot reach the rendezvous store at " + where_ + " within " +
                         std::to_string(timeout.count()) + " ms (is rank 0 running?): " + last);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const auto hs = Clock::now() + kHandshakeTime;
  std::array<uint8_t, sizeof(kMagic) + kNonce> hello{};
  auto fail = [&](const std::string& msg, bool auth) {
    ::close(fd_);
    fd_ = -1;
    if (auth) throw AuthError(msg);
    throw PeerError(0, msg);
  };
  if (readAll(fd_, hello.data(), hello.size(), hs) != Io::ok || std::memcmp(hello.data(), kMagic, sizeof(kMagic)) != 0)
    fail("the rendezvous store at " + where_ + " did not greet as a lowcomm store (another service on MASTER_PORT?)",
         false);
  const uint8_t* sn = hello.data() + sizeof(kMagic);
  const auto cn = nonce();
  const Digest mac = hmac(token, "lowcomm-rdzv-client", sn, cn.data());
  std::vector<uint8_t> answer(kMagic, kMagic + sizeof(kMagic));
  answer.insert(answer.end(), cn.begin(), cn.end());
  answer.insert(answer.end(), mac.begin(), mac.end());
  if (!writeAll(fd_, answer.data(), answer.size(), hs)) fail("the rendezvous store at " + where_ + " closed", false);
  std::array<uint8_t, 1 + 32> verdict{};
  if (readAll(fd_, verdict.data(), 1, hs) != Io::ok || verdict[0] == 'R')
    fail("the rendezvous store at " + where_ +
             " refused this process: its LOWCOMM_JOB_TOKEN is not the job's (a process of another job, or "
             "another job's store on this MASTER_PORT)",
         true);
  if (verdict[0] != 'A' || readAll(fd_, verdict.data() + 1, 32, hs) != Io::ok)
    fail("the rendezvous store at " + where_ + " broke off the handshake", false);
  const Digest want = hmac(token, "lowcomm-rdzv-server", cn.data(), sn);
  if (!sameDigest(want.data(), verdict.data() + 1))
    fail("the rendezvous store at " + where_ + " could not prove this job's token (another job's store?)", true);
}

RdzvClient::~RdzvClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<uint8_t> RdzvClient::call(const std::vector<uint8_t>& request, std::chrono::milliseconds reply_within,
                                      const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto deadline = Clock::now() + reply_within;
  std::vector<uint8_t> reply;
  if (fd_ < 0 || !writeFrame(fd_, request, deadline) || readFrame(fd_, reply, deadline) != Io::ok || reply.empty())
    throw PeerError(0, "rendezvous store at " + where_ + " (hosted by rank 0) stopped answering during " + what +
                           "; did rank 0 exit?");
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
