// The training run's view of live membership (docs/elastic.md). `lowcomm train` under
// `lowcomm launch --elastic` implements it over its runtime::Worker (the store, the launcher's
// epochs); the train layer knows nothing of stores or launchers, and tests can give their own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lowcomm/comm/communicator.h"

namespace lowcomm::train {

struct ElasticEpoch {
  int64_t number = 0;
  std::vector<int> members;  // slots, ascending
  std::string why;           // the launcher's reason ("slot 2 left: killed by signal 9")
  std::shared_ptr<comm::Communicator> world;  // this epoch's; rank = this slot's index in members
};

class ElasticMembership {
 public:
  virtual ~ElasticMembership() = default;
  virtual int slot() const = 0;   // this worker's slot: its data shard
  virtual int slots() const = 0;  // the launch's slot count: the data shards
  virtual bool joining() const = 0;  // a replacement: it has no epoch until join()
  virtual int incarnation() const = 0;  // 0: the slot's first worker; k: its k-th replacement
  // The epoch the worker started in (not for a replacement).
  virtual ElasticEpoch initial() = 0;
  // A replacement says it is ready (model and data built): the launcher then starts an epoch with it.
  virtual void announceReady() = 0;
  // A replacement has taken the members' state (it finishes with them from here on).
  virtual void joined() {}
  // Joins the newest epoch after `after` that lists this slot: its communicator is aborted as
  // soon as a newer epoch begins. Throws when this slot is no member (the worker must exit) or no
  // epoch comes within the rendezvous timeout.
  virtual ElasticEpoch join(int64_t after) = 0;
};

}  // namespace lowcomm::train
