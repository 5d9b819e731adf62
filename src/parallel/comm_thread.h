// A single background thread that runs submitted tasks in order (private to parallel).
// wait() blocks until every submitted task has run and rethrows the first task failure.
// The thread records its collectives on timeline lane `lane` (Trace::setThreadLane).
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace lowcomm::parallel {

class CommThread {
 public:
  explicit CommThread(int lane = 1);
  ~CommThread();
  void submit(std::function<void()> task);
  void wait();

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::function<void()>> queue_;
  int running_ = 0;
  bool stop_ = false;
  int lane_;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace lowcomm::parallel
