#include "comm_thread.h"

#include "lowcomm/base/trace.h"

namespace lowcomm::parallel {

CommThread::CommThread(int lane) : lane_(lane), thread_([this] { loop(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CommThread::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void CommThread::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && running_ == 0; });
  if (error_) {
    auto e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void CommThread::loop() {
  Trace::setThreadLane(lane_);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and drained
    auto task = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    // After a failure the remaining tasks are skipped: the communicator is unusable anyway.
    const bool skip = static_cast<bool>(error_);
    lock.unlock();
    std::exception_ptr err;
    if (!skip) {
      try {
        task();
      } catch (...) {
        err = std::current_exception();
      }
    }
    lock.lock();
    if (err && !error_) error_ = err;
    --running_;
    if (queue_.empty() && running_ == 0) idle_cv_.notify_all();
  }
}

}  // namespace lowcomm::parallel
