// Every pair of a freshly connected mesh proves the job token, both ways, before any collective
// (private to the comm layer). A process that learned an address but not the token cannot pose
// as a rank: rank a sends peer b a fresh nonce, b answers HMAC-SHA256(token, "lowcomm-pair" | b | a
// | nonces), and the same the other way round. The handshake's bytes are not the user's traffic
// (not metered).
#pragma once

#include <chrono>
#include <string>

namespace lowcomm::comm {

class Link;

// Collective over the link's ranks. Throws AuthError naming the first peer that failed.
void authenticatePairs(Link& link, const std::string& token, std::chrono::milliseconds timeout);

}  // namespace lowcomm::comm
