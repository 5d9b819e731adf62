// The launcher side of live membership (private to lowcomm_launch; docs/elastic.md): the only
// writer of the membership epoch, over the store the launcher hosts.
//
// Contract:
// - start() publishes epoch 1 with every slot ("start").
// - left(slot, why) publishes an epoch without the slot (when it was a member) and marks the slot
//   empty; replacing(slot, k) records that incarnation k of the slot was started; once it
//   writes its ready key, poll() publishes an epoch with it ("slot S joined (incarnation k)").
// - poll() also reads every live member's heartbeat counter and returns the slots whose counter
//   has not moved for `heartbeat_timeout` (the caller SIGKILLs them, then reports left()).
//   A replacement is not judged before its first beat, nor before it is ready.
// - Every publication is logged as one line: "lowcomm launch: membership epoch E: <why>
//   (members 0,1,3)".
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "lowcomm/launch/launcher.h"
#include "lowcomm/net/membership.h"
#include "lowcomm/net/store.h"

namespace lowcomm::launch {

class ElasticHost {
 public:
  using Clock = std::chrono::steady_clock;
  ElasticHost(std::shared_ptr<net::Store> store, int slots, const ElasticOptions& opts, std::ostream& log);

  void start();
  void left(int slot, const std::string& why);
  // A worker exited 0: the job is finishing. An epoch published after this (a death meanwhile)
  // leaves the finished slots out, so the survivors do not wait for them.
  // Also sets the finished key (net/membership.h) at the first.
  void finished(int slot);
  void replacing(int slot, int incarnation);
  std::vector<int> poll(Clock::time_point now);

  int64_t epoch() const { return epoch_.number; }
  const std::vector<int>& members() const { return epoch_.members; }
  bool isMember(int slot) const { return epoch_.rankOf(slot) >= 0; }
  int liveCount() const { return static_cast<int>(epoch_.members.size()); }

 private:
  struct Beat {
    int64_t count = -1;  // the counter last read; -1: never read
    Clock::time_point since{};
  };
  void publish(std::vector<int> members, const std::string& why);

  std::shared_ptr<net::Store> store_;
  int slots_;
  ElasticOptions opts_;
  std::ostream& log_;
  net::Epoch epoch_;
  std::map<int, int> joining_;  // slot -> incarnation started, not yet a member
  std::map<int, Beat> beats_;   // members' heartbeats
  std::set<int> finished_;
};

}  // namespace lowcomm::launch
