#include "lowcomm/c10d/work.h"

#include <future>

#include <ATen/core/ivalue.h>

namespace lowcomm::torchdist {

CollectiveWork::CollectiveWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type), outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

c10::intrusive_ptr<c10::ivalue::Future> CollectiveWork::getFuture() { return future_; }

void CollectiveWork::complete(std::exception_ptr error) {
  // The future first: a thread woken by wait() may read it at once.
  if (error) future_->setError(error);
  else future_->markCompleted(c10::IValue(outputs_));
  finish(error);
}

P2PWork::P2PWork(int rank, c10d::OpType type, std::unique_ptr<comm::Communicator::Request> req,
                 std::vector<at::Tensor> keep, std::function<void()> after)
    : c10d::Work(rank, type), req_(std::move(req)), keep_(std::move(keep)), after_(std::move(after)),
      source_(req_->peer()) {}

bool P2PWork::wait(std::chrono::milliseconds /*timeout: the communicator's, counted from the post*/) {
  std::lock_guard<std::mutex> once(wait_mu_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) {
      if (exception_) std::rethrow_exception(exception_);
      return true;
    }
  }
  try {
    req_->wait();
    if (after_) after_();
  } catch (...) {
    finishAndThrow(std::current_exception());
  }
  finish();
  return true;
}

bool P2PWork::isCompleted() {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

TaskQueue::TaskQueue() : thread_([this] { loop(); }) {}

TaskQueue::~TaskQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void TaskQueue::push(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_all();
}

void TaskQueue::drain() {
  std::promise<void> done;
  auto f = done.get_future();
  push([&done] { done.set_value(); });
  f.wait();
}

void TaskQueue::loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();  // tasks report their own errors to their Work
  }
}

}  // namespace lowcomm::torchdist
