#include "pair_auth.h"

#include <vector>

#include "link.h"
#include "lowcomm/base/error.h"
#include "lowcomm/net/auth.h"

namespace lowcomm::comm {

namespace {
std::vector<uint8_t> pairMessage(int from, int to, const net::Nonce& a, const net::Nonce& b) {
  const std::string label = "lowcomm-pair";
  std::vector<uint8_t> m(label.begin(), label.end());
  for (int v : {from, to})
    for (int i = 0; i < 4; ++i) m.push_back(static_cast<uint8_t>(static_cast<uint32_t>(v) >> (8 * i)));
  m.insert(m.end(), a.begin(), a.end());
  m.insert(m.end(), b.begin(), b.end());
  return m;
}
}  // namespace

void authenticatePairs(Link& link, const std::string& token, std::chrono::milliseconds timeout) {
  const int me = link.rank(), n = link.size();
  if (n == 1) return;
  TrafficMeter not_metered;
  GlooExchange ex(link, not_metered, "auth", "setup", timeout, link.nextSeq());
  // The message from a to b travels in slot (round, b): sender and receiver compute the same.
  std::vector<net::Nonce> mine(n), theirs(n);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    mine[p] = net::freshNonce();
    ex.isend(p, mine[p].data(), mine[p].size(), ex.slot(0, static_cast<uint32_t>(p)));
    ex.irecv(p, theirs[p].data(), theirs[p].size(), ex.slot(0, static_cast<uint32_t>(me)));
  }
  ex.waitAll();
  std::vector<net::Digest> proof(n), got(n);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    proof[p] = net::hmacSha256(token, pairMessage(me, p, theirs[p], mine[p]));
    ex.isend(p, proof[p].data(), proof[p].size(), ex.slot(1, static_cast<uint32_t>(p)));
    ex.irecv(p, got[p].data(), got[p].size(), ex.slot(1, static_cast<uint32_t>(me)));
  }
  ex.waitAll();
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const net::Digest want = net::hmacSha256(token, pairMessage(p, me, mine[p], theirs[p]));
    if (!net::sameDigest(want.data(), got[p].data()))
      throw AuthError("rank " + std::to_string(me) + ": the process connected as rank " + std::to_string(p) +
                      " could not prove the job token (LOWCOMM_JOB_TOKEN): not a process of this job");
  }
}

}  // namespace lowcomm::comm
