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

class RdzvServer {
 public:
  // Binds host:port (host resolved to one local address) and serves until destroyed. Throws
  // ConfigError naming the address when it cannot bind (e.g. another job holds the port).
  RdzvServer(const std::string& host, int port, std::string token);
  ~RdzvServer();
  RdzvServer(const RdzvServer&) = delete;
  RdzvServer& operator=(const RdzvServer&) = delete;

  int port() const { return port_; }
  // Connections refused so far (wrong token, malformed or oversize frames).
  int64_t refused() const { return refused_.load(); }

 private:
  void acceptLoop();
  void serve(int fd);
  bool handshake(int fd);
  bool handle(int fd, const std::vector<uint8_t>& frame);

  std::string token_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> refused_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> data_;
  std::thread acceptor_;
  std::mutex conn_mu_;
  std::vector<std::thread> connections_;
  std::vector<int> conn_fds_;
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

 private:
  std::vector<uint8_t> call(const std::vector<uint8_t>& request, std::chrono::milliseconds reply_within,
                            const std::string& what);

  std::string where_;
  std::string prefix_;  // "job/<id>/"
  int fd_ = -1;
  std::mutex mu_;
};

// The id keys are namespaced with: 16 hex digits of HMAC-SHA256(token, "lowcomm-job-id").
std::string jobId(const std::string& token);

}  // namespace lowcomm::net
