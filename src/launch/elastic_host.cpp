#include "elastic_host.h"

#include <algorithm>

namespace lowcomm::launch {

ElasticHost::ElasticHost(std::shared_ptr<net::Store> store, int slots, const ElasticOptions& opts, std::ostream& log)
    : store_(std::move(store)), slots_(slots), opts_(opts), log_(log) {}

void ElasticHost::publish(std::vector<int> members, const std::string& why) {
  std::sort(members.begin(), members.end());
  net::Epoch next;
  next.number = epoch_.number + 1;
  next.members = std::move(members);
  next.why = why;
  net::membership::publish(*store_, next);
  epoch_ = std::move(next);
  log_ << "lowcomm launch: membership epoch " << epoch_.number << ": " << why << " (members "
       << net::membership::encodeMembers(epoch_.members) << ")" << std::endl;
  // A member's heartbeat is judged from its membership on (a joiner beat before: start afresh).
  std::map<int, Beat> beats;
  for (int s : epoch_.members) beats[s] = beats_.count(s) ? beats_[s] : Beat{};
  beats_ = std::move(beats);
}

void ElasticHost::start() {
  std::vector<int> all(slots_);
  for (int s = 0; s < slots_; ++s) all[s] = s;
  publish(all, "start");
}

void ElasticHost::left(int slot, const std::string& why) {
  joining_.erase(slot);
  if (!isMember(slot)) return;
  std::vector<int> rest;
  for (int s : epoch_.members)
    if (s != slot && !finished_.count(s)) rest.push_back(s);
  publish(rest, "slot " + std::to_string(slot) + " left: " + why);
}

void ElasticHost::finished(int slot) {
  if (finished_.empty()) store_->set(net::membership::finishedKey(), net::toBytes(std::to_string(slot)));
  finished_.insert(slot);
}

void ElasticHost::replacing(int slot, int incarnation) { joining_[slot] = incarnation; }

std::vector<int> ElasticHost::poll(Clock::time_point now) {
  std::vector<int> joined;
  for (const auto& [slot, k] : joining_)
    if (store_->check(net::membership::readyKey(slot, k))) joined.push_back(slot);
  if (!joined.empty()) {
    std::vector<int> members = epoch_.members;
    std::string why;
    for (int s : joined) {
      members.push_back(s);
      why += (why.empty() ? "" : ", ") + std::string("slot ") + std::to_string(s) + " joined (incarnation " +
             std::to_string(joining_[s]) + ")";
      joining_.erase(s);
    }
    publish(members, why);
  }
  std::vector<int> stale;
  for (auto& [slot, beat] : beats_) {
    const int64_t c = store_->add(net::membership::heartbeatKey(slot), 0);
    if (c != beat.count) {
      beat.count = c;
      beat.since = now;
    } else if (c > 0 && now - beat.since > opts_.heartbeat_timeout) {
      stale.push_back(slot);
    }
  }
  return stale;
}

}  // namespace lowcomm::launch
