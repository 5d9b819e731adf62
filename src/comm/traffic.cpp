#include "lowcomm/comm/traffic.h"

namespace lowcomm::comm {

TrafficCount& TrafficCount::operator+=(const TrafficCount& o) {
  bytes_sent += o.bytes_sent;
  bytes_recv += o.bytes_recv;
  messages_sent += o.messages_sent;
  messages_recv += o.messages_recv;
  return *this;
}

const char* linkClassName(LinkClass c) {
  static const char* const kNames[] = {kIntraNode, kInterNode, kInterSite};
  return kNames[static_cast<int>(c)];
}

void TrafficMeter::recordSend(const std::string& op, const std::string& phase, uint64_t bytes, LinkClass c) {
  std::lock_guard<std::mutex> lock(mu_);
  const char* link = linkClassName(c);
  for (TrafficCount* c : {&s_.total, &s_.by_op[op], &s_.by_phase[phase], &s_.by_link[link], &s_.by_phase_link[phase][link]}) {
    c->bytes_sent += bytes;
    c->messages_sent += 1;
  }
}

void TrafficMeter::recordRecv(const std::string& op, const std::string& phase, uint64_t bytes, LinkClass c) {
  std::lock_guard<std::mutex> lock(mu_);
  const char* link = linkClassName(c);
  for (TrafficCount* c : {&s_.total, &s_.by_op[op], &s_.by_phase[phase], &s_.by_link[link], &s_.by_phase_link[phase][link]}) {
    c->bytes_recv += bytes;
    c->messages_recv += 1;
  }
}

TrafficSnapshot TrafficMeter::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return s_;
}

void TrafficMeter::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  s_ = TrafficSnapshot{};
}

}  // namespace lowcomm::comm
