#include "lowcomm/net/membership.h"

#include <algorithm>
#include <cctype>

#include "lowcomm/base/error.h"

namespace lowcomm::net {

int Epoch::rankOf(int slot) const {
  const auto it = std::lower_bound(members.begin(), members.end(), slot);
  return it != members.end() && *it == slot ? static_cast<int>(it - members.begin()) : -1;
}

namespace membership {

std::string epochKey() { return "elastic/epoch"; }
std::string chosenStreamsKey() { return "elastic/streams"; }
std::string streamsKey(int64_t epoch) { return "elastic/streams/" + std::to_string(epoch); }
std::string membersKey(int64_t epoch) { return "elastic/members/" + std::to_string(epoch); }
std::string whyKey(int64_t epoch) { return "elastic/why/" + std::to_string(epoch); }
std::string heartbeatKey(int slot) { return "elastic/hb/" + std::to_string(slot); }
std::string readyKey(int slot, int incarnation) {
  return "elastic/ready/" + std::to_string(slot) + "/" + std::to_string(incarnation);
}
std::string finishedKey() { return "elastic/finished"; }
std::string commPrefix(int64_t epoch) { return "elastic/e" + std::to_string(epoch); }

std::string encodeMembers(const std::vector<int>& slots) {
  std::string out;
  for (size_t i = 0; i < slots.size(); ++i) out += (i ? "," : "") + std::to_string(slots[i]);
  return out;
}

namespace {

// A decimal in [0, limit), or -1.
int64_t parseIndex(const std::string& s, int64_t limit) {
  if (s.empty() || s.size() > 18) return -1;
  int64_t v = 0;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
    v = v * 10 + (c - '0');
  }
  return v < limit ? v : -1;
}

}  // namespace

std::vector<int> decodeMembers(const std::string& text, int max_slots, const std::string& key) {
  std::vector<int> out;
  size_t at = 0;
  while (at <= text.size() && !text.empty()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const int64_t v = parseIndex(text.substr(at, comma - at), max_slots);
    if (v < 0 || (!out.empty() && v <= out.back()))
      throw DataError("membership: store key '" + key + "' holds '" + text.substr(0, 200) +
                      "', not ascending slots in [0, " + std::to_string(max_slots) + ")");
    out.push_back(static_cast<int>(v));
    at = comma + 1;
  }
  return out;
}

namespace {
int decodeStreams(const std::string& text, const std::string& key) {
  const int64_t v = parseIndex(text, 1025);
  if (v < 1) throw DataError("membership: store key '" + key + "' holds '" + text.substr(0, 200) + "', not a number of streams");
  return static_cast<int>(v);
}
}  // namespace

void publish(Store& store, Epoch e) {
  LC_ENFORCE(e.number > 0, "membership epochs are numbered from 1");
  if (store.check(chosenStreamsKey()))
    e.streams = decodeStreams(toString(store.get(chosenStreamsKey(), std::chrono::seconds(10))), chosenStreamsKey());
  store.set(membersKey(e.number), toBytes(encodeMembers(e.members)));
  store.set(whyKey(e.number), toBytes(e.why));
  if (e.streams > 0) store.set(streamsKey(e.number), toBytes(std::to_string(e.streams)));
  store.set(epochKey(), toBytes(std::to_string(e.number)));
}

int64_t currentEpoch(Store& store) {
  if (!store.check(epochKey())) return 0;
  const std::string text = toString(store.get(epochKey(), std::chrono::seconds(10)));
  const int64_t v = parseIndex(text, int64_t{1} << 60);
  if (v <= 0) throw DataError("membership: store key '" + epochKey() + "' holds '" + text.substr(0, 200) + "', not an epoch number");
  return v;
}

Epoch readEpoch(Store& store, int64_t number, int max_slots, std::chrono::milliseconds timeout) {
  Epoch e;
  e.number = number;
  e.members = decodeMembers(toString(store.get(membersKey(number), timeout)), max_slots, membersKey(number));
  e.why = toString(store.get(whyKey(number), timeout));
  if (store.check(streamsKey(number))) e.streams = decodeStreams(toString(store.get(streamsKey(number), timeout)), streamsKey(number));
  return e;
}

}  // namespace membership
}  // namespace lowcomm::net
