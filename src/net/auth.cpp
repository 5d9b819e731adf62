#include "lowcomm/net/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "lowcomm/base/error.h"

namespace lowcomm::net {

Digest hmacSha256(const std::string& key, const std::vector<uint8_t>& message) {
  Digest out{};
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), message.data(), message.size(), out.data(), &len) ||
      len != out.size())
    throw Error("HMAC-SHA256 failed");
  return out;
}

Digest hmacSha256(const std::string& key, const std::string& label, const uint8_t* a, size_t na, const uint8_t* b,
                  size_t nb) {
  std::vector<uint8_t> msg(label.begin(), label.end());
  msg.insert(msg.end(), a, a + na);
  msg.insert(msg.end(), b, b + nb);
  return hmacSha256(key, msg);
}

Nonce freshNonce() {
  Nonce n{};
  size_t got = 0;
  while (got < n.size()) {
    const ssize_t r = ::getrandom(n.data() + got, n.size() - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw Error(std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<size_t>(r);
  }
  return n;
}

bool sameDigest(const uint8_t* a, const uint8_t* b) { return CRYPTO_memcmp(a, b, sizeof(Digest)) == 0; }

}  // namespace lowcomm::net
