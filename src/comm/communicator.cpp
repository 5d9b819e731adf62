// Communicator lifecycle (lowcomm/comm/communicator.h): rendezvous, locality and phase. The
// other jobs live beside it: communicator_collectives.cpp (dispatch), communicator_p2p.cpp,
// communicator_split.cpp, communicator_shm.cpp (shared-memory lifecycle), fingerprint.cpp.
#include "lowcomm/comm/communicator.h"

#include <algorithm>
#include <exception>
#include <string>
#include <future>

#include "congestion.h"
#include "eager.h"
#include "lanes.h"
#include "link.h"
#include "mesh.h"
#include "lowcomm/base/error.h"
#include "lowcomm/net/shm.h"
#include "shm_domain.h"
#include "streams_auto.h"

namespace lowcomm::comm {

namespace {
std::string streamPrefix(const std::string& prefix, int j) { return prefix + "/stream" + std::to_string(j); }
}  // namespace

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
  if (opts.streams != kAutoStreams && (opts.streams < 1 || opts.streams > kMaxStreams))
    throw ConfigError("communicator: streams = " + std::to_string(opts.streams) + "; must be in [1, " +
                      std::to_string(kMaxStreams) + "] or " + std::to_string(kAutoStreams) + " (auto)");
  if (opts.site < -1) throw ConfigError("communicator: site = " + std::to_string(opts.site) + "; must be >= 0 or -1 (unknown)");
  checkCongestionControl(opts.congestion_control);  // before connecting: every rank fails alike, at once
  auto dev = net::makeDevice(transport);
  const std::string prefix = "lowcomm";
  // With k fixed and this rank's site known, the further stream meshes connect at the same time
  // as the first one (they are dropped if the ranks turn out to share one site): across a WAN
  // that halves a communicator's set-up, which every membership epoch pays (docs/elastic.md).
  std::future<std::vector<std::unique_ptr<Link>>> early;
  if (opts.streams != kAutoStreams && opts.streams > 1 && opts.site >= 0) {
    std::vector<std::string> prefixes;
    for (int j = 1; j < opts.streams; ++j) prefixes.push_back(streamPrefix(prefix, j));
    early = std::async(std::launch::async, [&, prefixes] {
      return connectLinks(store, prefixes, rank, size, dev, opts.auth_token, opts.rendezvousTimeout(),
                          opts.congestion_control);
    });
  }
  std::unique_ptr<Link> first;
  try {
    first = connectLink(store, prefix, rank, size, dev, opts.auth_token, opts.rendezvousTimeout(), opts.congestion_control);
  } catch (...) {
    if (early.valid()) early.wait();  // its threads use this frame's arguments
    throw;
  }
  std::shared_ptr<Communicator> c(new Communicator(store, prefix, rank, size, opts, std::make_shared<TrafficMeter>(),
                                                  std::move(first)));
  if (early.valid()) c->early_streams_ = early.get();
  c->detectLocality();
  c->meter_->reset();  // the meter starts at zero: set-up traffic is not the user's
  return c;
}

void Communicator::detectLocality(std::vector<int> sites) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the host key
  for (char ch : net::hostKey()) h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
  // A split's parent already knows its members' sites: then only the host keys travel.
  const bool ask = sites.empty();
  if (!ask) setSites(std::move(sites));
  std::vector<uint64_t> mine = {h};
  if (ask) mine.push_back(static_cast<uint64_t>(static_cast<int64_t>(opts_.site)));
  const size_t w = mine.size();
  std::vector<uint64_t> all(w * size_);
  allgatherImpl(mine.data(), w, all.data(), std::vector<size_t>(size_, w), DType::i64, "setup", {Algo::ring, 0});
  if (ask) {
    std::vector<int> got(size_);
    for (int r = 0; r < size_; ++r) got[r] = static_cast<int>(static_cast<int64_t>(all[w * r + 1]));
    setSites(std::move(got));
  }
  all_local_ = true;
  std::vector<bool> same(size_);
  for (int r = 0; r < size_; ++r) {
    same[r] = all[w * r] == h;
    all_local_ = all_local_ && same[r];
  }
  link_->setSameHost(std::move(same));
  topology_.node_of.assign(size_, 0);
  std::vector<uint64_t> seen;
  for (int r = 0; r < size_; ++r) {
    auto it = std::find(seen.begin(), seen.end(), all[w * r]);
    topology_.node_of[r] = static_cast<int>(it - seen.begin());
    if (it == seen.end()) seen.push_back(all[w * r]);
  }
  if (opts_.shm == ShmMode::on && !all_local_)
    throw ConfigError("shared memory was required (shm = on) but not every rank is on this host");
  connectStreams();
  openEagerInbox();
}

// Partners of the sites allreduce: the ranks of other sites at this rank's index inside its site
// (a symmetric relation, so both ends of a pair agree on Link::eager). Sites in blocks only.
void Communicator::openEagerInbox() {
  if (opts_.eager_max_bytes == 0 || site_block_ <= 0) return;
  std::vector<int> peers;
  const int k = rank_ % site_block_;
  for (int r = k; r < size_; r += site_block_)
    if (r != rank_) peers.push_back(r);
  if (!peers.empty()) link_->openInbox(peers, opts_.eager_max_bytes);
}

void Communicator::setSites(std::vector<int> sites) {
  topology_.site_of = std::move(sites);
  site_block_ = topology_.siteBlock();
  std::vector<bool> cross(size_);
  for (int r = 0; r < size_; ++r) cross[r] = topology_.crossSite(rank_, r);
  link_->setCrossSite(std::move(cross));
}

// Every rank decides alike: the sites were allgathered, the options are the job's, and auto's
// round trip is the largest over all ranks (streams_auto.h).
void Communicator::connectStreams() {
  if (!topology_.spansSites()) {
    early_streams_.clear();  // connected ahead for nothing: no pair crosses a site
    return;
  }
  int k = early_streams_.empty() ? opts_.streams : static_cast<int>(early_streams_.size()) + 1;
  if (k == kAutoStreams) {
    cross_site_rtt_ = measureCrossSiteRtt(*link_, opts_.rendezvousTimeout());
    PathSample path;
    path.rtt_s = cross_site_rtt_;
    k = autoStreams(path);
  }
  if (k <= 1) return;
  link_->setStripeMin(opts_.stripe_min_bytes);
  std::vector<bool> cross(size_);
  for (int r = 0; r < size_; ++r) cross[r] = link_->crossSite(r);
  setNotSentLowat(*link_, cross, kLaneNotSentLowat, opts_.rendezvousTimeout());
  if (early_streams_.empty()) {
    std::vector<std::string> prefixes;
    for (int j = 1; j < k; ++j) prefixes.push_back(streamPrefix(prefix_, j));
    early_streams_ = connectLinks(store_, prefixes, rank_, size_, link_->device(), opts_.auth_token,
                                  opts_.rendezvousTimeout(), opts_.congestion_control);
  }
  // Each link's socket options take an exchange over it (a WAN round trip): all at once too.
  runAtOnce(early_streams_.size(), [&](size_t j) {
    setNotSentLowat(*early_streams_[j], cross, kLaneNotSentLowat, opts_.rendezvousTimeout());
  });
  for (auto& more : early_streams_) link_->addStream(more->sharedContext());
  early_streams_.clear();
}

int Communicator::streams() const { return link_->streams(); }

int parseStreams(const std::string& text, const std::string& what) {
  if (text == "auto") return kAutoStreams;
  size_t used = 0;
  int k = 0;
  try {
    k = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || used != text.size() || k < 1 || k > kMaxStreams)
    throw ConfigError(what + " = '" + text + "'; expected auto or an integer in [1, " + std::to_string(kMaxStreams) + "]");
  return k;
}

void Communicator::abort(const std::string& why) { link_->abortState().trigger(why); }
bool Communicator::aborted() const { return link_->abortState().aborted(); }

void Communicator::setPhase(const std::string& phase) { phase_ = phase; }
const std::string& Communicator::phase() const { return phase_; }

}  // namespace lowcomm::comm
