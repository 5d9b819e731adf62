#include "lowcomm/base/trace.h"

namespace lowcomm {

namespace {
thread_local int t_lane = 0;
}

int Trace::threadLane() { return t_lane; }
void Trace::setThreadLane(int lane) { t_lane = lane; }

void Trace::complete(std::string name, std::string cat, int lane, Clock::time_point start, Clock::time_point end,
                     std::map<std::string, std::string> args) {
  if (!enabled_) return;
  const double s = std::chrono::duration<double, std::micro>(start - origin_).count();
  const double d = std::chrono::duration<double, std::micro>(end - start).count();
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(TraceEvent{std::move(name), std::move(cat), lane, s, d, std::move(args)});
}

std::vector<TraceEvent> Trace::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

}  // namespace lowcomm
