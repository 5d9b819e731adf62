#include "lowcomm/runtime/membership.h"

#include <cstdlib>
#include <cstring>

namespace lowcomm::runtime {

namespace {

int envInt(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < lo || x > hi)
    throw ConfigError("environment variable " + std::string(name) + " = '" + v + "'; expected an integer in [" +
                      std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return static_cast<int>(x);
}

}  // namespace

ElasticEnv elasticFromEnv(int rank, int world) {
  ElasticEnv e;
  const char* on = std::getenv("LOWCOMM_ELASTIC");
  if (!on || std::strcmp(on, "1") != 0) return e;
  e.slot = rank;
  e.slots = world;
  e.incarnation = envInt("LOWCOMM_ELASTIC_INCARNATION", 0, 0, 1 << 30);
  e.heartbeat = std::chrono::milliseconds(envInt("LOWCOMM_ELASTIC_HEARTBEAT_MS", 200, 10, 60000));
  return e;
}

MembershipMonitor::MembershipMonitor(Connect connect, ElasticEnv env)
    : connect_(std::move(connect)), env_(env), store_(connect_()) {
  latest_ = net::membership::currentEpoch(*store_);
  store_->add(net::membership::heartbeatKey(env_.slot), 1);  // alive from the start
  thread_ = std::thread(&MembershipMonitor::loop, this);
}

MembershipMonitor::~MembershipMonitor() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MembershipMonitor::announceReady() {
  store_->set(net::membership::readyKey(env_.slot, env_.incarnation), net::toBytes(std::to_string(env_.incarnation)));
}

void MembershipMonitor::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  int64_t seen = 0;  // the epoch whose reason was read last
  std::string why;
  while (!cv_.wait_for(lk, env_.heartbeat, [&] { return stop_; })) {
    lk.unlock();
    std::string failure;
    int64_t e = 0;
    try {  // the store's round trips without the lock: watch() is never kept waiting on them
      store_->add(net::membership::heartbeatKey(env_.slot), 1);
      if (env_.joining() && !joined_ && store_->check(net::membership::finishedKey()))
        failure = "the job finished before this replacement joined";
      e = net::membership::currentEpoch(*store_);
      if (e > seen) {
        why = net::toString(store_->get(net::membership::whyKey(e), std::chrono::seconds(5)));
        seen = e;
      }
    } catch (const std::exception& ex) {
      failure = std::string("the membership store failed: ") + ex.what();
    }
    lk.lock();
    if (!failure.empty()) {
      abortWatched(0, failure);
      return;
    }
    bumpLatest(e);
    if ((comm_ || rendezvous_) && e > watched_epoch_)
      abortWatched(e, "membership epoch " + std::to_string(e) + ": " + why);
  }
}

// With mu_ held.
void MembershipMonitor::abortWatched(int64_t epoch, const std::string& why) {
  (void)epoch;
  if (comm_) comm_->abort(why);
  if (rendezvous_) rendezvous_->abort(why);
  comm_.reset();
  rendezvous_.reset();
}

void MembershipMonitor::watch(int64_t epoch, std::shared_ptr<comm::Communicator> comm,
                              std::shared_ptr<net::RdzvClient> rendezvous) {
  std::lock_guard<std::mutex> lk(mu_);
  // An older epoch's objects still watched (its failure was a PeerError, not our abort): they
  // end now, so nothing of theirs (a split's thread) waits on.
  if (epoch > watched_epoch_ && (comm_ != comm || rendezvous_ != rendezvous)) {
    const std::string why = "membership epoch " + std::to_string(epoch) + " joined";
    if (comm_ && comm_ != comm) comm_->abort(why);
    if (rendezvous_ && rendezvous_ != rendezvous) rendezvous_->abort(why);
  }
  watched_epoch_ = epoch;
  comm_ = std::move(comm);
  rendezvous_ = std::move(rendezvous);
  if (latest_.load() > epoch) abortWatched(latest_.load(), "membership epoch " + std::to_string(latest_.load()) + " began");
}

void MembershipMonitor::bumpLatest(int64_t e) {
  int64_t c = latest_.load();
  while (e > c && !latest_.compare_exchange_weak(c, e)) {
  }
}

// A replacement not yet taken in skips the epochs before the one that lists it (the launcher
// publishes that one on its next tick after the ready key); once a member, an epoch without this
// slot means the launcher counts it as dead.
net::Epoch MembershipMonitor::awaitNext(net::Store& store, int64_t after, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (env_.joining() && !joined_ && store.check(net::membership::finishedKey()))
      throw JobFinishedError("slot " + std::to_string(env_.slot) + ": the job finished before this replacement joined");
    const int64_t e = net::membership::currentEpoch(store);
    if (e > after) {
      bumpLatest(e);
      net::Epoch info = net::membership::readEpoch(store, e, env_.slots, timeout);
      if (info.rankOf(env_.slot) >= 0) {
        was_member_ = true;
        return info;
      }
      if (!env_.joining() || was_member_)
        throw NotAMemberError("slot " + std::to_string(env_.slot) + " is not a member of membership epoch " +
                              std::to_string(e) + " (" + info.why + "): the launcher has replaced this worker");
      after = e;  // it predates this replacement
      continue;
    }
    if (std::chrono::steady_clock::now() >= deadline)
      throw TimeoutError("slot " + std::to_string(env_.slot) + ": no membership epoch after " + std::to_string(after) +
                         " within " + std::to_string(timeout.count()) + " ms (fewer live workers than elastic.min_replicas?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace lowcomm::runtime
