// The rendezvous store's wire format, shared by its server (rdzv_server.cpp) and client
// (rdzv_store.cpp): the handshake's constants and bounded, deadline-limited socket I/O.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "lowcomm/net/auth.h"
#include "lowcomm/net/rdzv_store.h"

namespace lowcomm::net::rdzv {

using Clock = std::chrono::steady_clock;

constexpr char kMagic[8] = {'L', 'C', 'R', 'D', 'Z', 'V', '0', '1'};
constexpr size_t kNonce = 32;
constexpr size_t kHello = sizeof(kMagic) + kNonce;        // server -> client: magic | sn
constexpr size_t kAnswer = sizeof(kMagic) + kNonce + 32;  // client -> server: magic | cn | mac
constexpr size_t kVerdict = 1 + 32;                       // server -> client: 'A' | proof, or 'R'
constexpr uint32_t kMaxFrame = static_cast<uint32_t>(1 + 2 + kMaxKey + kMaxValue);
constexpr uint8_t kSet = 1, kGet = 2, kCheck = 3, kAdd = 4;
constexpr uint8_t kOk = 0, kMissing = 1;
// How long a client waits for one handshake before it tries a new connection.
constexpr auto kClientHandshake = std::chrono::seconds(10);

inline Digest hmac(const std::string& token, const std::string& label, const uint8_t* a, const uint8_t* b) {
  return hmacSha256(token, label, a, kNonce, b, kNonce);
}

enum class Io { ok, closed, timeout, oversize };

// Milliseconds to `deadline`, clamped to [0, 200] (poll slices, so `stop` flags are seen).
int msLeft(Clock::time_point deadline);
// Exactly n bytes before `deadline`; `stop` (optional) is checked between polls.
Io readAll(int fd, uint8_t* p, size_t n, Clock::time_point deadline, const std::atomic<bool>* stop = nullptr);
bool writeAll(int fd, const uint8_t* p, size_t n, Clock::time_point deadline);
bool writeFrame(int fd, const std::vector<uint8_t>& payload, Clock::time_point deadline);
// One frame, refused (Io::oversize) when its announced length exceeds kMaxFrame: nothing is
// allocated first.
Io readFrame(int fd, std::vector<uint8_t>& out, Clock::time_point deadline, const std::atomic<bool>* stop = nullptr);
// host:port as a socket address; ConfigError naming MASTER_ADDR when it does not resolve.
sockaddr_storage resolve(const std::string& host, int port, socklen_t& len);

}  // namespace lowcomm::net::rdzv
