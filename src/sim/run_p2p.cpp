#include "run_p2p.h"

#include "lowcomm/base/error.h"
#include "lowcomm/comm/exchange.h"

namespace lowcomm::sim {

namespace {

// Point-to-point messages live in slot namespaces no collective algorithm uses (48 .. 63), so a
// pair's collective and point-to-point messages never share a mailbox.
constexpr uint32_t kP2PSeq = 0xffffffffu;
constexpr uint32_t kP2PSub = 48, kP2PSubs = 16;

}  // namespace

uint32_t P2PChannels::subOf(const std::string& comm, uint32_t tag) {
  const auto [it, fresh] = subs_.emplace(std::make_pair(comm, tag), static_cast<uint32_t>(subs_.size()));
  if (fresh && it->second >= kP2PSubs)
    throw ConfigError("simulate replay: the timeline's point-to-point calls use more than " +
                      std::to_string(kP2PSubs) + " (communicator, tag) pairs, more than the simulator keeps apart");
  return kP2PSub + it->second;
}

uint64_t P2PRank::slot(uint32_t sub, int src, int dst) {
  const uint32_t k = posted_[{sub, src, dst}]++;
  return comm::makeSlot(kP2PSeq, sub, k & 0xfff, (k >> 12) & 0x3fff);
}

void P2PRank::run(SimNetwork& net, P2PChannels& channels, const CallSpec& c) {
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
  const uint32_t sub = channels.subOf(c.comm, c.tag);
  auto ex = std::make_unique<SimExchange>(net, rank_, kP2PSeq);
  int last = -1;
  for (const auto& [peer, bytes] : c.recvs) {
    check(peer);
    last = ex->irecv(peer, nullptr, bytes, slot(sub, peer, rank_));
  }
  for (const auto& [peer, bytes] : c.sends) {
    check(peer);
    last = ex->isend(peer, nullptr, bytes, slot(sub, rank_, peer));
  }
  if (c.op == "isend" || c.op == "irecv") {
    if (c.req.empty()) throw ConfigError("simulate replay: an " + c.op + " event without its request id (req)");
    if (!pending_.emplace(c.req, std::make_pair(std::move(ex), last)).second)
      throw ConfigError("simulate replay: rank " + std::to_string(rank_) + " posts request '" + c.req +
                        "' twice without waiting for it");
    return;
  }
  ex->waitAll();
}

}  // namespace lowcomm::sim
