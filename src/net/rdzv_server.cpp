// RdzvServer: rank 0's side of the authenticated rendezvous store (contract in rdzv_store.h).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "lowcomm/base/error.h"
#include "lowcomm/net/rdzv_store.h"
#include "rdzv_wire.h"

namespace lowcomm::net {

using namespace rdzv;

// A connection that has not yet proved the token: served by the acceptor, never by a thread.
struct RdzvServer::Pending {
  int fd = -1;
  Clock::time_point deadline;
  Nonce sn{};
  std::array<uint8_t, kAnswer> got{};
  size_t have = 0;
};

namespace {
template <typename T>
void putInt(std::vector<uint8_t>& v, T x) {
  const auto* p = reinterpret_cast<const uint8_t*>(&x);
  v.insert(v.end(), p, p + sizeof(T));
}

// A short non-blocking send: the handshake's messages fit any fresh socket's buffer.
bool sendNow(int fd, const uint8_t* p, size_t n) {
  return ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(n);
}
}  // namespace

RdzvServer::RdzvServer(const std::string& host, int port, std::string token, RdzvLimits limits)
    : token_(std::move(token)), limits_(limits) {
  if (token_.empty()) throw ConfigError("rendezvous: the job token is empty");
  // Strangers may hold at most a quarter of the process's fds: the rest stay for pairs and files.
  rlimit fds{};
  if (::getrlimit(RLIMIT_NOFILE, &fds) == 0 && fds.rlim_cur != RLIM_INFINITY)
    limits_.max_pending = std::min<size_t>(limits_.max_pending, std::max<size_t>(16, fds.rlim_cur / 4));
  socklen_t len = 0;
  sockaddr_storage addr = resolve(host, port, len);
  listen_fd_ = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
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
  {
    std::lock_guard<std::mutex> lock(mu_);  // a get() waiting on cv_ sees stop_ with its mutex
    stop_ = true;
  }
  cv_.notify_all();
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(members_mu_);
    for (auto& m : members_) ::shutdown(m->fd, SHUT_RDWR);
  }
  cv_.notify_all();
  reapMembers(true);
  ::close(listen_fd_);
}

void RdzvServer::acceptLoop() {
  std::vector<Pending> pending;  // in arrival order, so the oldest (and first to expire) is first
  auto listen_again = Clock::now();
  std::vector<pollfd> fds;
  while (!stop_) {
    reapMembers(false);
    const auto now = Clock::now();
    while (!pending.empty() && pending.front().deadline <= now) {
      ::close(pending.front().fd);
      pending.erase(pending.begin());
      ++dropped_;
    }
    const bool listening = now >= listen_again;
    fds.clear();
    if (listening) fds.push_back({listen_fd_, POLLIN, 0});
    for (const auto& p : pending) fds.push_back({p.fd, POLLIN, 0});
    auto wake = now + std::chrono::milliseconds(200);
    if (!pending.empty()) wake = std::min(wake, pending.front().deadline);
    if (!listening) wake = std::min(wake, listen_again);
    const int r = ::poll(fds.data(), fds.size(), std::max(0, msLeft(wake)));
    if (r <= 0) continue;
    // Handshakes first: a pending connection's index in `fds` is only valid before acceptSome.
    const size_t base = listening ? 1 : 0;
    std::vector<Pending> still;
    still.reserve(pending.size());
    for (size_t i = 0; i < pending.size(); ++i)
      if (!(fds[base + i].revents & (POLLIN | POLLERR | POLLHUP)) || advance(pending[i]))
        still.push_back(pending[i]);
    pending.swap(still);
    if (listening && (fds[0].revents & POLLIN)) acceptSome(pending, listen_again);
  }
  for (const auto& p : pending) ::close(p.fd);
}

void RdzvServer::acceptSome(std::vector<Pending>& pending, Clock::time_point& listen_again) {
  for (int i = 0; i < 64; ++i) {  // bounded: handshakes in progress get their turn
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno != EMFILE && errno != ENFILE && errno != ENOBUFS && errno != ENOMEM) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        continue;  // ECONNABORTED, EINTR, EPROTO: that connection is gone, others may wait
      }
      if (pending.empty()) {  // nothing of ours to give back: leave the listener alone a while
        listen_again = Clock::now() + limits_.fd_backoff;
        return;
      }
      ::close(pending.front().fd);  // a stranger's fd for whoever waits in the backlog
      pending.erase(pending.begin());
      ++dropped_;
      continue;
    }
    if (pending.size() >= limits_.max_pending) {
      ::close(pending.front().fd);
      pending.erase(pending.begin());
      ++dropped_;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Pending p;
    p.fd = fd;
    p.deadline = Clock::now() + limits_.handshake;
    p.sn = freshNonce();
    std::array<uint8_t, kHello> hello{};
    std::memcpy(hello.data(), kMagic, sizeof(kMagic));
    std::memcpy(hello.data() + sizeof(kMagic), p.sn.data(), kNonce);
    if (!sendNow(fd, hello.data(), hello.size())) {
      ::close(fd);
      ++refused_;
      continue;
    }
    pending.push_back(p);
  }
}

// Reads what has arrived of the client's answer; once whole, checks it and either hands the
// connection to a member thread or refuses it. Returns true while the handshake is incomplete.
bool RdzvServer::advance(Pending& p) {
  const ssize_t got = ::recv(p.fd, p.got.data() + p.have, p.got.size() - p.have, MSG_DONTWAIT);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
  if (got <= 0) {
    ::close(p.fd);
    ++refused_;
    return false;
  }
  p.have += static_cast<size_t>(got);
  if (p.have < p.got.size()) return true;
  const uint8_t* cn = p.got.data() + sizeof(kMagic);
  const Digest want = hmac(token_, "lowcomm-rdzv-client", p.sn.data(), cn);
  const bool ok = std::memcmp(p.got.data(), kMagic, sizeof(kMagic)) == 0 && sameDigest(want.data(), cn + kNonce);
  if (!ok) {
    const uint8_t refuse = 'R';
    sendNow(p.fd, &refuse, 1);
    ::close(p.fd);
    ++refused_;
    return false;
  }
  std::array<uint8_t, kVerdict> accept{'A'};
  const Digest proof = hmac(token_, "lowcomm-rdzv-server", cn, p.sn.data());
  std::memcpy(accept.data() + 1, proof.data(), proof.size());
  if (!sendNow(p.fd, accept.data(), accept.size())) {
    ::close(p.fd);
    ++refused_;
    return false;
  }
  startMember(p.fd);
  return false;
}

void RdzvServer::startMember(int fd) {
  auto m = std::make_unique<Member>();
  m->fd = fd;
  Member* raw = m.get();
  std::lock_guard<std::mutex> lock(members_mu_);
  m->thread = std::thread([this, raw] {
    try {
      serve(raw->fd);
    } catch (const std::exception&) {  // nothing a client sends may end the server
      ++refused_;
    }
    raw->done = true;
  });
  members_.push_back(std::move(m));
}

// Joins members whose connection ended (all of them when `all`), then closes their fds: an fd is
// closed only after its thread is gone, so the destructor's shutdown never hits a reused number.
void RdzvServer::reapMembers(bool all) {
  std::vector<std::unique_ptr<Member>> ended;
  {
    std::lock_guard<std::mutex> lock(members_mu_);
    auto keep = std::partition(members_.begin(), members_.end(),
                               [&](const std::unique_ptr<Member>& m) { return !all && !m->done; });
    std::move(keep, members_.end(), std::back_inserter(ended));
    members_.erase(keep, members_.end());
  }
  for (auto& m : ended) {
    m->thread.join();
    ::close(m->fd);
  }
}

void RdzvServer::serve(int fd) {
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

}  // namespace lowcomm::net
