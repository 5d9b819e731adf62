// The rendezvous store for ranks as processes: rank 0 hosts a small key-value server at
// MASTER_ADDR:MASTER_PORT, every rank (rank 0 too) is a client. Replaces LibTorch 1.13's
// TCPStore, which listens on every interface, authenticates nobody and allocates whatever size a
// client announces.
//
// Contract:
// - The server binds to MASTER_ADDR's own address, not to every interface.
// - Every connection proves the job token before anything else (challenge-response, mutual, the
//   token never crosses the wire): the server sends a fresh 32-byte nonce sn, the client answers
//   with its nonce cn and HMAC-SHA256(token, "lowcomm-rdzv-client" | sn | cn), the server checks it
//   and answers HMAC-SHA256(token, "lowcomm-rdzv-server" | cn | sn), which the client checks. A
//   wrong token is refused (the client gets an AuthError saying so); the job goes on unaffected.
// - Frames are length-prefixed and bounded (a key at most kMaxKey bytes, a value kMaxValue): a
//   larger or malformed frame closes that connection before anything is allocated for it.
// - Keys are namespaced by a job id derived from the token, so two jobs never share keys.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lowcomm/net/store.h"

namespace lowcomm::net {

constexpr size_t kMaxKey = 4096;
constexpr size_t kMaxValue = 64u << 20;

// What a stranger who can reach MASTER_PORT without the token can cost rank 0 (issue: a thread per
// unauthenticated connection let a flood take rank 0 down).
struct RdzvLimits {
  // A connection must complete the handshake within this, or it is closed.
  std::chrono::milliseconds handshake{10000};
  // Unauthenticated connections held at once (at most a quarter of RLIMIT_NOFILE's soft limit).
  // A new one beyond this closes the oldest: a member
  // answers in one round trip, so a flood delays it (its client retries) but cannot lock it out.
  size_t max_pending = 512;
  // After accept() fails for want of fds (EMFILE/ENFILE) with nothing left to drop, the listening
  // socket is left alone this long instead of being retried at once (it stays readable: a spin).
  std::chrono::milliseconds fd_backoff{100};
};

// Threads: one acceptor that runs every unauthenticated handshake itself (non-blocking, with the
// deadline above), plus one thread per authenticated connection, joined as soon as it ends. So
// strangers cost at most `max_pending` fds and no threads.
class RdzvServer {
 public:
  // Binds host:port (host resolved to one local address) and serves until destroyed. Throws
  // ConfigError naming the address when it cannot bind (e.g. another job holds the port).
  RdzvServer(const std::string& host, int port, std::string token, RdzvLimits limits = {});
  ~RdzvServer();
  RdzvServer(const RdzvServer&) = delete;
  RdzvServer& operator=(const RdzvServer&) = delete;

  int port() const { return port_; }
  // Connections refused so far (wrong token, malformed or oversize frames).
  int64_t refused() const { return refused_.load(); }
  // Unauthenticated connections closed for the limits: past their handshake deadline, the oldest
  // when more than max_pending arrived, or to free an fd at the fd limit.
  int64_t dropped() const { return dropped_.load(); }

 private:
  struct Pending;
  struct Member {
    int fd = -1;
    std::atomic<bool> done{false};
    std::thread thread;
  };
  void acceptLoop();
  void acceptSome(std::vector<Pending>& pending, std::chrono::steady_clock::time_point& listen_again);
  bool advance(Pending& p);  // false: the connection is finished (authenticated and handed on, or closed)
  void startMember(int fd);
  void reapMembers(bool all);
  void serve(int fd);
  bool handle(int fd, const std::vector<uint8_t>& frame);

  std::string token_;
  RdzvLimits limits_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> refused_{0};
  std::atomic<int64_t> dropped_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> data_;
  std::thread acceptor_;
  std::mutex members_mu_;
  std::vector<std::unique_ptr<Member>> members_;
};

class RdzvClient : public Store {
 public:
  // Connects to host:port, retrying until `timeout` (the server may not be up yet), and runs
  // the handshake. TimeoutError names the address when no server answers in time; AuthError
  // when the server refuses the token or proves another one.
  RdzvClient(const std::string& host, int port, const std::string& token, std::chrono::milliseconds timeout);
  ~RdzvClient() override;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  bool check(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;

  // Another authenticated connection to the same server (same job, same timeout for its
  // connect). It is aborted with this client: by abort() here, or at once when this one already is.
  std::shared_ptr<Store> fork() override;

  // From any thread: a get() waiting for its key returns within its 100 ms slice, and every call
  // from then on throws AbortedError naming `why` (a rendezvous of a membership epoch that has
  // moved on: docs/elastic.md). The first reason stays. Clients fork()ed from this one abort too.
  void abort(const std::string& why);
  bool aborted() const { return aborted_.load(); }

 private:
  std::vector<uint8_t> call(const std::vector<uint8_t>& request, std::chrono::milliseconds reply_within,
                            const std::string& what);

  void checkAborted(const std::string& what) const;

  std::string host_;
  int port_;
  std::string token_;  // for fork()
  std::chrono::milliseconds connect_timeout_;
  std::string where_;
  std::string prefix_;  // "job/<id>/"
  int fd_ = -1;
  std::mutex mu_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex why_mu_;
  std::string why_;
  std::vector<std::weak_ptr<RdzvClient>> forks_;  // guarded by why_mu_
};

// The id keys are namespaced with: 16 hex digits of HMAC-SHA256(token, "lowcomm-job-id").
std::string jobId(const std::string& token);

}  // namespace lowcomm::net
