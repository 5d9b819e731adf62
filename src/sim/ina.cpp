#include "ina.h"

#include <algorithm>
#include <string>

#include "lowcomm/base/error.h"
#include "sim_exchange.h"

namespace lowcomm::sim {

namespace sg4 = simgrid::s4u;

struct InaFabric::Call {
  std::pair<uint32_t, uint64_t> key;
  std::map<int, std::vector<int>> by_leaf;  // leaf -> the members under it
  int spines = 0;                           // 0: the members are under one leaf, whose switch sends the sums down
  int leaves_left = 0;                      // leaf switches still summing their members' chunks
  uint64_t bytes = 0, chunk_bytes = 0;
  int chunks = 0;
  std::vector<int> index;  // index[c] == c: the messages' payloads (stable addresses)
  // Set once the switches' receivers are: a member's chunks sent before would wait in their
  // mailbox for the switch to ask for them one by one.
  // (Actors run one at a time and yield only in SimGrid calls: no lock needed.)
  bool started = false;
  int waiting = 0;
  sg4::SemaphorePtr ready = sg4::Semaphore::create(0);
  uint64_t bytesOf(int c) const { return c + 1 < chunks ? chunk_bytes : bytes - chunk_bytes * (chunks - 1); }
};

namespace {
// Every call has mailboxes of its own (its group's seq and its number in the group): a leaf's
// sums of one call may still wait for its actor when the group's next call starts.
using Key = std::pair<uint32_t, uint64_t>;
std::string tag(const Key& k, int who) {
  return std::to_string(k.first) + ":" + std::to_string(k.second) + ":" + std::to_string(who);
}
sg4::Mailbox* upBox(const Key& k, int leaf) { return sg4::Mailbox::by_name("ina-up:" + tag(k, leaf)); }
sg4::Mailbox* spineBox(const Key& k, int spine) { return sg4::Mailbox::by_name("ina-spine:" + tag(k, spine)); }
sg4::Mailbox* fromSpineBox(const Key& k, int leaf) { return sg4::Mailbox::by_name("ina-from-spine:" + tag(k, leaf)); }
sg4::Mailbox* downBox(const Key& k, int rank) { return sg4::Mailbox::by_name("ina-down:" + tag(k, rank)); }
// A permanent receiver keeps its actor (and stack) alive: each lets go of its mailbox when done.
void release(sg4::Mailbox* box) { box->set_receiver(nullptr); }
}  // namespace

InaFabric::InaFabric(SimNetwork& net, InaHosts hosts, const PlatformSpec& p)
    : net_(net), hosts_(std::move(hosts)), chunk_bytes_(p.ina_chunk_bytes), window_(p.ina_window) {
  LC_ENFORCE(!hosts_.leaf.empty() && hosts_.port.size() == static_cast<size_t>(p.world()) &&
                 hosts_.leaf_of.size() == hosts_.port.size(),
             "in-network aggregation needs the platform's switch hosts");
}

std::shared_ptr<InaFabric::Call> InaFabric::prepare(const std::vector<int>& members, uint64_t bytes, uint32_t seq,
                                                    uint64_t number) const {
  auto call = std::make_shared<Call>();
  call->key = {seq, number};
  for (int m : members) call->by_leaf[hosts_.leaf_of.at(m)].push_back(m);
  call->leaves_left = static_cast<int>(call->by_leaf.size());
  if (call->by_leaf.size() > 1) {
    LC_ENFORCE(!hosts_.spine.empty(), "in-network aggregation: members under several leaves and no spine");
    call->spines = static_cast<int>(hosts_.spine.size());
  }
  call->bytes = bytes;
  call->chunk_bytes = std::max<uint64_t>(chunk_bytes_, (bytes + kInaMaxChunks - 1) / kInaMaxChunks);
  call->chunks = static_cast<int>((bytes + call->chunk_bytes - 1) / call->chunk_bytes);
  call->index.resize(call->chunks);
  for (int c = 0; c < call->chunks; ++c) call->index[c] = c;
  if (call->spines > call->chunks) call->spines = call->chunks;  // the spines that get a chunk
  return call;
}

// Permanent receivers: every stream flows as soon as it is sent, all of them at once.
void InaFabric::start(const std::shared_ptr<Call>& call) {
  const Key& key = call->key;
  for (const auto& [leaf, members] : call->by_leaf) {
    sg4::Host* host = hosts_.leaf[leaf];
    upBox(key, leaf)->set_receiver(sg4::Actor::create("ina-leaf", host, [this, call, l = leaf] { sumAtLeaf(call, l); }));
    if (call->spines > 0)
      fromSpineBox(key, leaf)->set_receiver(
          sg4::Actor::create("ina-leaf-down", host, [this, call, l = leaf] { sendDown(call, l); }));
  }
  for (int s = 0; s < call->spines; ++s)
    spineBox(key, s)->set_receiver(
        sg4::Actor::create("ina-spine", hosts_.spine[s], [this, call, s] { sumAtSpine(call, s); }));
  call->started = true;
  for (; call->waiting > 0; --call->waiting) call->ready->release();
}

namespace {
void multicast(const std::vector<int>& to, const Key& key, int* payload, uint64_t bytes) {
  for (int m : to) downBox(key, m)->put_init(payload, bytes)->detach();
}
}  // namespace

void InaFabric::sumAtLeaf(const std::shared_ptr<Call>& call, int leaf) {
  const Key& key = call->key;
  const auto& members = call->by_leaf.at(leaf);
  const auto n = static_cast<int>(members.size());
  auto* up = upBox(key, leaf);
  std::vector<int> arrived(call->chunks, 0);
  for (long i = 0; i < static_cast<long>(n) * call->chunks; ++i) {
    const int c = *up->get<int>();
    if (++arrived[c] < n) continue;
    if (call->spines == 0)
      multicast(members, key, &call->index[c], call->bytesOf(c));
    else
      spineBox(key, c % call->spines)->put_init(&call->index[c], call->bytesOf(c))->detach();
  }
  release(up);
  // Every member has sent its last chunk, so every member has found this call: later calls of
  // the group are new ones.
  if (--call->leaves_left == 0) active_.erase(call->key);
}

void InaFabric::sumAtSpine(const std::shared_ptr<Call>& call, int spine) {
  const Key& key = call->key;
  const auto leaves = static_cast<int>(call->by_leaf.size());
  const int mine = (call->chunks - spine + call->spines - 1) / call->spines;  // chunks c with c mod spines == spine
  auto* in = spineBox(key, spine);
  std::vector<int> arrived(call->chunks, 0);
  for (long i = 0; i < static_cast<long>(leaves) * mine; ++i) {
    const int c = *in->get<int>();
    if (++arrived[c] < leaves) continue;
    for (const auto& entry : call->by_leaf)
      fromSpineBox(key, entry.first)->put_init(&call->index[c], call->bytesOf(c))->detach();
  }
  release(in);
}

void InaFabric::sendDown(const std::shared_ptr<Call>& call, int leaf) {
  const Key& key = call->key;
  auto* in = fromSpineBox(key, leaf);
  for (int got = 0; got < call->chunks; ++got) {
    const int c = *in->get<int>();
    multicast(call->by_leaf.at(leaf), key, &call->index[c], call->bytesOf(c));
  }
  release(in);
}

void InaFabric::allreduce(int rank, const std::vector<int>& members, uint64_t bytes, uint32_t seq) {
  if (bytes == 0) return;
  const uint64_t number = calls_of_[{rank, seq}]++;
  // Registered before anything here yields to the other actors (SimGrid calls, even by_name,
  // may): the members that come later join this call instead of making their own.
  auto& slot = active_[{seq, number}];
  const bool first = !slot;
  if (first) slot = prepare(members, bytes, seq, number);
  const std::shared_ptr<Call> call = slot;  // the switches drop it once done, maybe before this rank returns
  if (first) {
    start(call);
  } else if (!call->started) {
    ++call->waiting;
    call->ready->acquire();
  }
  const int leaf = hosts_.leaf_of[rank];
  auto* up = upBox(call->key, leaf);
  auto* down = downBox(call->key, rank);
  // The rank's link carries one chunk after another (a stream), at most window_ ahead of the
  // sums received; both ends at the rank's port (its host, or its stand-in on a fat-tree).
  auto window = sg4::Semaphore::create(window_);
  sg4::Host* port = hosts_.port[rank];
  auto receiver = sg4::Actor::create("ina-recv", port, [call, window, down] {
    for (int got = 0; got < call->chunks; ++got) {
      down->get<int>();
      window->release();
    }
    release(down);
  });
  down->set_receiver(receiver);
  sg4::Actor::create("ina-send", port, [call, window, up] {
    for (int c = 0; c < call->chunks; ++c) {
      window->acquire();
      up->put(&call->index[c], call->bytesOf(c));
    }
  });
  receiver->join();
  net_.sent[rank] += bytes;
  net_.recv[rank] += bytes;
  net_.messages[rank] += static_cast<uint64_t>(call->chunks);
  net_.inter_node_sent[rank] += bytes;
  net_.inter_node += bytes;
  if (call->spines > 0) {  // the leaf's partial sums, shared among its members (the remainder to the first ones)
    const auto& mine = call->by_leaf.at(leaf);
    const auto at = static_cast<uint64_t>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
    net_.inter_leaf_sent[rank] += bytes / mine.size() + (at < bytes % mine.size() ? 1 : 0);
  }
}

}  // namespace lowcomm::sim
