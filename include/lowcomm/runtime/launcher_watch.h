// A worker started by `lowcomm launch` exits when its launcher dies. The launcher passes its pid
// in LOWCOMM_LAUNCHER_PID; while a LauncherWatch lives, a thread checks every `period` that this
// process still exists (/proc/PID/stat: present, not a zombie, the same start time as when the
// watch began, so a recycled pid does not count) and, once it is gone (SIGKILLed, crashed),
// writes one line to stderr and ends the process with status 1. It watches the launcher itself,
// not the parent, so a worker behind a wrapper (`lowcomm launch -- sh -c 'lowcomm ...'`) exits too.
//
// Why not PR_SET_PDEATHSIG: it fires when the *thread* that spawned the worker exits, and the
// launcher spawns the workers of an emulated cluster from short-lived threads (one per network
// namespace); it also says nothing about a launcher behind a wrapper.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace lowcomm::runtime {

class LauncherWatch {
 public:
  // No thread when `launcher_pid` <= 0 (not started by lowcomm launch). When the launcher is
  // already gone, exits at once.
  LauncherWatch(long launcher_pid, std::string who, std::chrono::milliseconds period = std::chrono::milliseconds(500));
  ~LauncherWatch();
  LauncherWatch(const LauncherWatch&) = delete;
  LauncherWatch& operator=(const LauncherWatch&) = delete;

  bool active() const { return thread_.joinable(); }

 private:
  [[noreturn]] void orphaned() const;
  bool launcherAlive() const;

  long pid_;
  std::string start_time_;  // the launcher's, from /proc/PID/stat
  std::string who_;
  std::chrono::milliseconds period_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// LOWCOMM_LAUNCHER_PID from the environment (0 when unset); ConfigError when malformed.
long launcherPidFromEnv();

}  // namespace lowcomm::runtime
