#include "run_p2p.h"

#include "lowcomm/base/error.h"
#include "lowcomm/comm/exchange.h"

namespace lowcomm::sim {

namespace {

// Point-to-point messages live in slot namespaces no collective algorithm uses (48 + tag % 16),
// so a pair's collective and point-to-point messages never share a mailbox.
constexpr uint32_t kP2PSeq = 0xffffffffu;
constexpr uint32_t kP2PSub = 48;

}  // namespace

uint64_t P2PRank::slot(int src, int dst, uint32_t tag) {
  const uint32_t k = posted_[{src, dst, tag}]++;
  return comm::makeSlot(kP2PSeq, kP2PSub + (tag & 15), k & 0xfff, (k >> 12) & 0x3fff);
}

void P2PRank::run(SimNetwork& net, const CallSpec& c) {
  auto check = [&](int peer) {
    if (peer < 0 || peer >= net.world() || peer == rank_)
      throw ConfigError("simulate replay: rank " + std::to_string(rank_) + " has a " + c.op + " with rank " +
                        std::to_string(peer) + ", not another rank of the " + std::to_string(net.world()) +
                        "-rank world");
  };
  if (c.op == "wait") {
    auto it = pending_.find(c.req);
    if (it == pending_.end()) return;  // posted before the replayed steps
    it->second.first->wait(it->second.second);
    pending_.erase(it);
    return;
  }
  auto ex = std::make_unique<SimExchange>(net, rank_, kP2PSeq);
  int last = -1;
  for (const auto& [peer, bytes] : c.recvs) {
    check(peer);
    last = ex->irecv(peer, nullptr, bytes, slot(peer, rank_, c.tag));
  }
  for (const auto& [peer, bytes] : c.sends) {
    check(peer);
    last = ex->isend(peer, nullptr, bytes, slot(rank_, peer, c.tag));
  }
  if (c.op == "isend" || c.op == "irecv") {
    if (c.req.empty()) throw ConfigError("simulate replay: an " + c.op + " event without its request id (req)");
    pending_[c.req] = {std::move(ex), last};
    return;
  }
  ex->waitAll();
}

}  // namespace lowcomm::sim
