#include "signal_forwarding.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "lowcomm/base/error.h"

namespace lowcomm::launch {

namespace {

// The write end of the self-pipe while a launch() runs, -1 otherwise.
std::atomic<int> g_signal_pipe{-1};
static_assert(std::atomic<int>::is_always_lock_free, "used from a signal handler");

extern "C" void onLauncherSignal(int sig) {
  const int saved_errno = errno;
  const int fd = g_signal_pipe.load();
  if (fd >= 0) {
    const unsigned char byte = static_cast<unsigned char>(sig);
    [[maybe_unused]] ssize_t n = ::write(fd, &byte, 1);  // pipe full: the signal is a repeat
  }
  errno = saved_errno;
}

}  // namespace

std::string signalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);  // glibc >= 2.32
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

SignalForwarding::SignalForwarding() {
  makePipe(read_, write_);
  ::fcntl(write_.get(), F_SETFL, ::fcntl(write_.get(), F_GETFL) | O_NONBLOCK);
  int expected = -1;
  if (!g_signal_pipe.compare_exchange_strong(expected, write_.get()))
    throw Error("another launch() is already running in this process");
  struct sigaction sa {};
  sa.sa_handler = onLauncherSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (size_t i = 0; i < std::size(kForwardedSignals); ++i)
    ::sigaction(kForwardedSignals[i], &sa, &old_[i]);
}

SignalForwarding::~SignalForwarding() {
  for (size_t i = 0; i < std::size(kForwardedSignals); ++i)
    ::sigaction(kForwardedSignals[i], &old_[i], nullptr);
  g_signal_pipe.store(-1);  // a handler already past its load() may still write: fds close last
}

std::vector<int> SignalForwarding::take() {
  std::vector<int> sigs;
  unsigned char buf[64];
  ssize_t n;
  while ((n = ::read(read_.get(), buf, sizeof(buf))) > 0) sigs.insert(sigs.end(), buf, buf + n);
  return sigs;
}

}  // namespace lowcomm::launch
