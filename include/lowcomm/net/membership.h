// The live-membership protocol between `lowcomm launch --elastic` and its workers, over the job's
// authenticated rendezvous store: the one place for its keys and encodings (docs/elastic.md).
//
// Keys (in the job's namespace of the store):
//   elastic/epoch                       the current epoch (decimal), written by the launcher only,
//                                       after the epoch's members and reason
//   elastic/members/<e>                 epoch e's slots, ascending, comma-separated ("0,1,3")
//   elastic/why/<e>                     why epoch e began ("start", "slot 2 left: killed by signal 9")
//   elastic/streams                     the streams per cross-site pair that `comm.streams = auto`
//                                       chose in the job's first epoch (written by its members)
//   elastic/streams/<e>                 that k as the launcher saw it when it published epoch e:
//                                       every member of e connects k streams (absent: decide)
//   elastic/hb/<slot>                   the slot's heartbeat counter (each worker adds 1 per beat)
//   elastic/ready/<slot>/<incarnation>  a replacement worker is ready to join (model and data built)
//   elastic/e<e>/...                    the rendezvous of epoch e's communicators
// Contract: the launcher publishes epochs with increasing numbers; a worker that reads the epoch
// number finds its members and reason already there. Whatever a store holds is checked before use:
// a malformed value is a DataError naming the key.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "lowcomm/net/store.h"

namespace lowcomm::net {

struct Epoch {
  int64_t number = 0;  // 0: no epoch published yet
  std::vector<int> members;  // slots, ascending
  std::string why;
  int streams = 0;  // streams per cross-site pair for the epoch's communicators; 0: they decide
  // The slot's rank in this epoch (its index among the members), -1 when it is not a member.
  int rankOf(int slot) const;
};

namespace membership {

std::string epochKey();
std::string membersKey(int64_t epoch);
std::string whyKey(int64_t epoch);
std::string heartbeatKey(int slot);
std::string readyKey(int slot, int incarnation);
// Set by the launcher when the first worker has finished the job: a replacement still joining
// then has nobody to join and exits.
std::string finishedKey();
std::string commPrefix(int64_t epoch);  // for PrefixStore
std::string chosenStreamsKey();
std::string streamsKey(int64_t epoch);

std::string encodeMembers(const std::vector<int>& slots);
// DataError naming `key` unless `text` is ascending distinct slots in [0, max_slots).
std::vector<int> decodeMembers(const std::string& text, int max_slots, const std::string& key);

// Launcher: writes the members, the reason and the streams the job chose (when a member wrote
// them: so every member of the epoch connects alike), then the epoch number. DataError for a
// malformed chosen value.
void publish(Store& store, Epoch e);
// Workers: the current epoch number, 0 when none is published yet (never blocks).
int64_t currentEpoch(Store& store);
// Workers: epoch `number`'s members and reason (published: they were written before its number).
Epoch readEpoch(Store& store, int64_t number, int max_slots, std::chrono::milliseconds timeout);

}  // namespace membership
}  // namespace lowcomm::net
