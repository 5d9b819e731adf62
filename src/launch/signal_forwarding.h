// Signal forwarding (private to lowcomm_launch): the one piece of process-wide state of the
// launcher. A signal handler can reach launch() only through a global. It holds the write end of
// a self-pipe while a launch() runs; the handler only write()s the signal number there
// (async-signal-safe) and the supervisor's poll loop does the forwarding.
#pragma once

#include <signal.h>

#include <iterator>
#include <string>
#include <vector>

#include "unique_fd.h"

namespace lowcomm::launch {

// Signals sent to the launcher that are passed on to every worker (torchrun's set).
inline constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

// "SIGTERM", or "signal N" for a number without a name.
std::string signalName(int sig);

// Installs the handlers for its lifetime and restores the previous ones after. One at a time
// per process: a second throws Error.
class SignalForwarding {
 public:
  SignalForwarding();
  ~SignalForwarding();
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;

  // Readable when a signal arrived: poll it.
  int fd() const { return read_.get(); }

  // Signals received since the last call, oldest first.
  std::vector<int> take();

 private:
  UniqueFd read_, write_;
  struct sigaction old_[std::size(kForwardedSignals)] {};
};

}  // namespace lowcomm::launch
