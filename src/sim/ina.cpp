#include "ina.h"

#include <algorithm>
#include <string>

#include "lowcomm/base/error.h"
#include "sim_exchange.h"

namespace lowcomm::sim {

namespace sg4 = simgrid::s4u;

struct InaFabric::Call {
  std::pair<uint32_t, uint64_t> key;
  std::vector<int> members;
  uint64_t bytes = 0, chunk_bytes = 0;
  int chunks = 0;
  std::vector<int> index;  // index[c] == c: the messages' payloads (stable addresses)
  uint64_t bytesOf(int c) const { return c + 1 < chunks ? chunk_bytes : bytes - chunk_bytes * (chunks - 1); }
};

namespace {
// A group's calls follow one another, so its mailboxes carry one call at a time.
sg4::Mailbox* upBox(uint32_t seq) { return sg4::Mailbox::by_name("ina-up:" + std::to_string(seq)); }
sg4::Mailbox* downBox(int rank, uint32_t seq) {
  return sg4::Mailbox::by_name("ina-down:" + std::to_string(rank) + ":" + std::to_string(seq));
}
}  // namespace

InaFabric::InaFabric(SimNetwork& net, sg4::Host* switch_host, const PlatformSpec& p)
    : net_(net), switch_(switch_host), chunk_bytes_(p.ina_chunk_bytes), window_(p.ina_window) {
  LC_ENFORCE(switch_ != nullptr, "in-network aggregation needs the platform's switch host");
}

std::shared_ptr<InaFabric::Call> InaFabric::prepare(const std::vector<int>& members, uint64_t bytes, uint32_t seq,
                                                    uint64_t number) const {
  auto call = std::make_shared<Call>();
  call->key = {seq, number};
  call->members = members;
  call->bytes = bytes;
  call->chunk_bytes = std::max<uint64_t>(chunk_bytes_, (bytes + kInaMaxChunks - 1) / kInaMaxChunks);
  call->chunks = static_cast<int>((bytes + call->chunk_bytes - 1) / call->chunk_bytes);
  call->index.resize(call->chunks);
  for (int c = 0; c < call->chunks; ++c) call->index[c] = c;
  return call;
}

void InaFabric::serve(const std::shared_ptr<Call>& call) {
  const auto n = static_cast<int>(call->members.size());
  auto* up = upBox(call->key.first);
  std::vector<sg4::Mailbox*> down;
  for (int m : call->members) down.push_back(downBox(m, call->key.first));
  std::vector<int> arrived(call->chunks, 0);
  for (long i = 0; i < static_cast<long>(n) * call->chunks; ++i) {
    const int c = *up->get<int>();
    if (++arrived[c] < n) continue;
    for (auto* d : down) d->put_init(&call->index[c], call->bytesOf(c))->detach();
  }
  active_.erase(call->key);
}

void InaFabric::allreduce(int rank, const std::vector<int>& members, uint64_t bytes, uint32_t seq) {
  if (bytes == 0) return;
  const uint64_t number = calls_of_[{rank, seq}]++;
  // Registered before anything here yields to the other actors (SimGrid calls, even by_name,
  // may): the members that come later join this call instead of making their own.
  auto& slot = active_[{seq, number}];
  const bool first = !slot;
  if (first) slot = prepare(members, bytes, seq, number);
  const std::shared_ptr<Call> call = slot;  // the switch drops it once done, maybe before this rank returns
  auto* up = upBox(seq);
  if (first) {
    // A permanent receiver: every member's stream flows as soon as it is sent, the members' at once.
    up->set_receiver(sg4::Actor::create("ina-switch", switch_, [this, call] { serve(call); }));
  }
  auto* down = downBox(rank, seq);
  down->set_receiver(sg4::Actor::self());
  // The rank's link carries one chunk after another (a stream), at most window_ ahead of the
  // sums received.
  auto window = sg4::Semaphore::create(window_);
  sg4::Actor::create("ina-send", sg4::this_actor::get_host(), [call, window, up] {
    for (int c = 0; c < call->chunks; ++c) {
      window->acquire();
      up->put(&call->index[c], call->bytesOf(c));
    }
  });
  for (int got = 0; got < call->chunks; ++got) {
    down->get<int>();
    window->release();
  }
  net_.sent[rank] += bytes;
  net_.recv[rank] += bytes;
  net_.messages[rank] += static_cast<uint64_t>(call->chunks);
  net_.inter_node_sent[rank] += bytes;
  net_.inter_node += bytes;
}

}  // namespace lowcomm::sim
