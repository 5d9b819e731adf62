// Thread-safe recorder of timeline events ("complete" events of the Chrome trace format:
// name, category, lane, start, duration). Layers record; the trainer writes the file.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace lowcomm {

struct TraceEvent {
  std::string name;
  std::string cat;
  int lane;           // Chrome "tid": 0 = compute thread, 1 = communication thread, ...
  double start_us;    // since the trace's origin
  double dur_us;
  std::map<std::string, std::string> args;
};

class Trace {
 public:
  using Clock = std::chrono::steady_clock;
  Trace() : origin_(Clock::now()) {}
  void setEnabled(bool on) { enabled_ = on; }
  bool enabled() const { return enabled_; }
  void complete(std::string name, std::string cat, int lane, Clock::time_point start, Clock::time_point end,
                std::map<std::string, std::string> args = {});
  std::vector<TraceEvent> events() const;
  Clock::time_point origin() const { return origin_; }
  // The lane of events recorded by layers that do not know which thread calls them (the
  // communicator's collectives): 0 unless the calling thread set another (a communication
  // thread sets 1).
  static int threadLane();
  static void setThreadLane(int lane);

 private:
  Clock::time_point origin_;
  bool enabled_ = true;
  mutable std::mutex mu_;
  std::vector<TraceEvent> events_;
};

// Records [construction, destruction) as one event when the trace is non-null and enabled.
class TraceScope {
 public:
  TraceScope(Trace* t, std::string name, std::string cat, int lane, std::map<std::string, std::string> args = {})
      : t_(t), name_(std::move(name)), cat_(std::move(cat)), lane_(lane), args_(std::move(args)),
        start_(Trace::Clock::now()) {}
  ~TraceScope() {
    if (t_ && t_->enabled()) t_->complete(name_, cat_, lane_, start_, Trace::Clock::now(), std::move(args_));
  }

 private:
  Trace* t_;
  std::string name_, cat_;
  int lane_;
  std::map<std::string, std::string> args_;
  Trace::Clock::time_point start_;
};

}  // namespace lowcomm
