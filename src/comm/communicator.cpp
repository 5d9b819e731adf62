// Communicator lifecycle (lowcomm/comm/communicator.h): rendezvous, locality and phase. The
// other jobs live beside it: communicator_collectives.cpp (dispatch), communicator_p2p.cpp,
// communicator_split.cpp, communicator_shm.cpp (shared-memory lifecycle), fingerprint.cpp.
#include "lowcomm/comm/communicator.h"

#include <algorithm>

#include "link.h"
#include "mesh.h"
#include "lowcomm/base/error.h"
#include "lowcomm/net/shm.h"
#include "shm_domain.h"

namespace lowcomm::comm {

Communicator::Communicator(std::shared_ptr<net::Store> store, std::string prefix, int rank, int size,
                           CommOptions opts, std::shared_ptr<TrafficMeter> meter, std::unique_ptr<Link> link)
    : store_(std::move(store)), prefix_(std::move(prefix)), rank_(rank), size_(size), opts_(opts),
      meter_(std::move(meter)), link_(std::move(link)) {}

Communicator::~Communicator() = default;

std::shared_ptr<Communicator> Communicator::create(std::shared_ptr<net::Store> store, int rank, int size,
                                                   const CommOptions& opts, const net::TransportOptions& transport) {
  if (size < 1 || rank < 0 || rank >= size)
    throw ConfigError("communicator: rank " + std::to_string(rank) + " is not in [0, " + std::to_string(size) + ")");
  if (size > kMaxRanks)
    throw ConfigError("communicator: " + std::to_string(size) + " ranks; at most " + std::to_string(kMaxRanks) +
                      " are supported (slot layout)");
  auto dev = net::makeDevice(transport);
  const std::string prefix = "lowcomm";
  std::shared_ptr<Communicator> c(new Communicator(store, prefix, rank, size, opts, std::make_shared<TrafficMeter>(),
                                                  connectLink(store, prefix, rank, size, dev, opts.auth_token,
                                                              opts.rendezvousTimeout())));
  c->detectLocality();
  c->meter_->reset();  // the meter starts at zero: set-up traffic is not the user's
  return c;
}

void Communicator::detectLocality() {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the host key
  for (char ch : net::hostKey()) h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
  std::vector<uint64_t> all(size_);
  allgatherImpl(&h, 1, all.data(), std::vector<size_t>(size_, 1), DType::i64, "setup", Algo::ring);
  all_local_ = std::all_of(all.begin(), all.end(), [&](uint64_t x) { return x == h; });
  std::vector<bool> same(size_);
  for (int r = 0; r < size_; ++r) same[r] = all[r] == h;
  link_->setSameHost(std::move(same));
  node_of_.assign(size_, 0);
  std::vector<uint64_t> seen;
  for (int r = 0; r < size_; ++r) {
    auto it = std::find(seen.begin(), seen.end(), all[r]);
    node_of_[r] = static_cast<int>(it - seen.begin());
    if (it == seen.end()) seen.push_back(all[r]);
  }
  if (opts_.shm == ShmMode::on && !all_local_)
    throw ConfigError("shared memory was required (shm = on) but not every rank is on this host");
}

void Communicator::setPhase(const std::string& phase) { phase_ = phase; }
const std::string& Communicator::phase() const { return phase_; }

}  // namespace lowcomm::comm
