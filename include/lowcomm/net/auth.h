// The job token's cryptography: HMAC-SHA256 (OpenSSL) and fresh nonces (getrandom). The token
// authenticates the rendezvous (rdzv_store.h) and every connected pair of ranks (comm layer).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace lowcomm::net {

using Digest = std::array<uint8_t, 32>;
using Nonce = std::array<uint8_t, 32>;

Digest hmacSha256(const std::string& key, const std::vector<uint8_t>& message);
// `label` | a | b: the message every handshake MACs.
Digest hmacSha256(const std::string& key, const std::string& label, const uint8_t* a, size_t na, const uint8_t* b,
                  size_t nb);
Nonce freshNonce();
// Constant-time comparison (no early exit that would leak how many bytes matched).
bool sameDigest(const uint8_t* a, const uint8_t* b);

}  // namespace lowcomm::net
