// A strategy's communication step, timed and metered the same way by every strategy (private to
// the parallel layer).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <string>
#include <utility>

#include "lowcomm/base/trace.h"
#include "lowcomm/comm/communicator.h"

namespace lowcomm::parallel {

// Sets `comm`'s traffic phase for a scope; the previous phase is back on exit, also when the
// scope throws. When the phase is already `phase` nothing is written (another thread may be
// reading it: ssp's push in flight).
class PhaseGuard {
 public:
  PhaseGuard(comm::Communicator& comm, const std::string& phase)
      : comm_(comm), saved_(comm.phase()), changed_(saved_ != phase) {
    if (changed_) comm_.setPhase(phase);
  }
  ~PhaseGuard() {
    if (changed_) comm_.setPhase(saved_);
  }
  PhaseGuard(const PhaseGuard&) = delete;
  PhaseGuard& operator=(const PhaseGuard&) = delete;

 private:
  comm::Communicator& comm_;
  std::string saved_;
  bool changed_;
};

// A timeline span (category "comm", lane 1) over the scope, whose wall time is added to `seconds`.
class CommTimer {
 public:
  CommTimer(Trace* trace, const std::string& name, double& seconds)
      : span_(trace, name, "comm", 1), seconds_(seconds), t0_(std::chrono::steady_clock::now()) {}
  ~CommTimer() { seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  CommTimer(const CommTimer&) = delete;
  CommTimer& operator=(const CommTimer&) = delete;

 private:
  TraceScope span_;
  double& seconds_;
  std::chrono::steady_clock::time_point t0_;
};

// Runs f() as traffic phase `phase` of `comm`, timed by a CommTimer of that name, without autograd.
template <class F>
void timedComm(comm::Communicator& comm, Trace* trace, const std::string& phase, double& seconds, F&& f) {
  CommTimer timer(trace, phase, seconds);
  PhaseGuard guard(comm, phase);
  torch::NoGradGuard no_grad;
  std::forward<F>(f)();
}

}  // namespace lowcomm::parallel
