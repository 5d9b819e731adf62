// One communicator call as a timeline event (Communicator::setTrace; private to comm): category
// "collective" or "p2p", recorded when the call returns normally, with the caller's args.
#pragma once

#include <exception>
#include <map>
#include <string>
#include <vector>

#include "lowcomm/base/trace.h"
#include "lowcomm/comm/dtype.h"

namespace lowcomm::comm {

class CallRecord {
 public:
  // `root_ranks`: the communicator's ranks in the root one (arg "ranks"); empty: the same.
  CallRecord(Trace* t, const char* op, size_t bytes, DType dt, const std::vector<int>& root_ranks,
             const char* cat = "collective")
      : t_(t && t->enabled() ? t : nullptr), op_(op), cat_(cat) {
    if (!t_) return;  // untraced: nothing on the collective's path
    start_ = Trace::Clock::now();
    exceptions_ = std::uncaught_exceptions();
    args = {{"bytes", std::to_string(bytes)}, {"dtype", dtypeName(dt)}};
    if (!root_ranks.empty()) {
      std::string r;
      for (size_t i = 0; i < root_ranks.size(); ++i) r += (i ? "," : "") + std::to_string(root_ranks[i]);
      args["ranks"] = r;
    }
  }
  ~CallRecord() {
    if (t_ && std::uncaught_exceptions() == exceptions_)
      t_->complete(op_, cat_, Trace::threadLane(), start_, Trace::Clock::now(), std::move(args));
  }
  CallRecord(const CallRecord&) = delete;
  CallRecord& operator=(const CallRecord&) = delete;
  bool on() const { return t_ != nullptr; }
  std::map<std::string, std::string> args;

 private:
  Trace* t_;
  const char* op_;
  const char* cat_;
  Trace::Clock::time_point start_;
  int exceptions_ = 0;
};

}  // namespace lowcomm::comm
