// The worker side of live membership (docs/elastic.md): a monitor thread that beats the heart of
// this worker's slot in the store and aborts what belongs to an epoch once the launcher has
// published a newer one, and the calls the heal makes to learn and join the next epoch.
//
// Contract:
// - The monitor adds 1 to the slot's heartbeat key and reads the epoch number every `heartbeat`,
//   on a store client of its own (`connect()` makes one). When the number passes the watched
//   epoch it calls abort() on the watched communicator and store client with "membership epoch
//   E: <the launcher's reason>", within one heartbeat of the publication.
// - A store failure in the monitor (the launcher gone: its LauncherWatch ends the process anyway)
//   aborts the watched objects with that error and ends the monitor.
// - awaitNext() blocks until an epoch newer than `after` is published and returns the newest one;
//   NotAMemberError when it does not list this slot (the launcher counts this worker as dead and
//   has replaced it: the worker must exit) — a replacement not yet taken in skips such epochs;
//   TimeoutError after `timeout`; JobFinishedError for a replacement that has not joined() when
//   the launcher marks the job finished (the monitor then also aborts what it watches).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "lowcomm/base/error.h"
#include "lowcomm/comm/communicator.h"
#include "lowcomm/net/membership.h"
#include "lowcomm/net/rdzv_store.h"

namespace lowcomm::runtime {

// This worker's slot is not in the newest epoch.
class NotAMemberError : public Error {
 public:
  using Error::Error;
};

// A replacement that had not joined when the job finished (the finished key): nothing to do.
class JobFinishedError : public Error {
 public:
  using Error::Error;
};

struct ElasticEnv {
  int slot = -1;             // RANK at launch
  int slots = 0;             // WORLD_SIZE at launch: the data shards
  int incarnation = 0;       // 0: started with the job; k: the k-th replacement in this slot
  std::chrono::milliseconds heartbeat{200};
  bool joining() const { return incarnation > 0; }
};

// LOWCOMM_ELASTIC=1 with LOWCOMM_ELASTIC_INCARNATION and LOWCOMM_ELASTIC_HEARTBEAT_MS, set by
// `lowcomm launch --elastic`; nullopt-like (slot -1) when LOWCOMM_ELASTIC is unset. ConfigError
// naming the variable when one is malformed.
ElasticEnv elasticFromEnv(int rank, int world);

class MembershipMonitor {
 public:
  using Connect = std::function<std::shared_ptr<net::RdzvClient>()>;
  MembershipMonitor(Connect connect, ElasticEnv env);
  ~MembershipMonitor();
  MembershipMonitor(const MembershipMonitor&) = delete;
  MembershipMonitor& operator=(const MembershipMonitor&) = delete;

  const ElasticEnv& env() const { return env_; }
  // A replacement: says it is ready to join (the launcher then publishes an epoch with it).
  void announceReady();
  // See the contract. Polls the store every 20 ms on the calling thread's client `store`.
  net::Epoch awaitNext(net::Store& store, int64_t after, std::chrono::milliseconds timeout);
  // Watch `comm` and `rendezvous` (either may be null) as belonging to `epoch` (replaces the
  // previous watch; aborts them at once when a newer epoch is already known).
  void watch(int64_t epoch, std::shared_ptr<comm::Communicator> comm, std::shared_ptr<net::RdzvClient> rendezvous);
  // A replacement took the members' state: from here on it finishes with them.
  void joined() { joined_ = true; }
  // The newest epoch number the monitor has seen.
  int64_t latest() const { return latest_.load(); }

 private:
  void loop();
  void abortWatched(int64_t epoch, const std::string& why);
  void bumpLatest(int64_t e);

  Connect connect_;
  ElasticEnv env_;
  std::shared_ptr<net::RdzvClient> store_;  // the monitor thread's own client
  std::atomic<int64_t> latest_{0};
  bool was_member_ = false;  // awaitNext (the training thread's)
  std::atomic<bool> joined_{false};
  std::mutex mu_;  // the watch and stop_
  std::condition_variable cv_;
  bool stop_ = false;
  int64_t watched_epoch_ = 0;
  std::shared_ptr<comm::Communicator> comm_;
  std::shared_ptr<net::RdzvClient> rendezvous_;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace lowcomm::runtime
