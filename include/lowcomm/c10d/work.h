// Asynchronous handles of the lowcomm torch.distributed backend.
//
// Contract:
// - CollectiveWork completes when the PG's worker thread has run its task: wait() returns true or
//   rethrows the task's exception (TimeoutError / PeerError texts name the peer rank);
//   getFuture() is completed with the output tensors, or set to the error, at the same moment
//   (DDP chains its bucket callbacks on it).
// - P2PWork wraps a posted isend/irecv: wait() blocks until the message completed.
// - TaskQueue runs tasks one at a time, in submission order, on one thread (a Communicator is
//   used by one thread at a time); its destructor finishes the queued tasks, then joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/Work.hpp>

#include "lowcomm/comm/communicator.h"

namespace lowcomm::torchdist {

class CollectiveWork : public c10d::Work {
 public:
  CollectiveWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs);
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override { return outputs_; }
  // Called once by the worker thread: error null means success.
  void complete(std::exception_ptr error);

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class P2PWork : public c10d::Work {
 public:
  // `keep` holds the tensor(s) the request reads or writes until it completed; `after` runs once
  // the message arrived (a receive into a staging copy copies it out).
  P2PWork(int rank, c10d::OpType type, std::unique_ptr<comm::Communicator::Request> req, std::vector<at::Tensor> keep,
          std::function<void()> after = {});
  bool wait(std::chrono::milliseconds timeout) override;
  bool isCompleted() override;
  int sourceRank() const override { return source_; }
  std::vector<at::Tensor> result() override { return keep_; }

 private:
  std::mutex wait_mu_;
  std::unique_ptr<comm::Communicator::Request> req_;
  std::vector<at::Tensor> keep_;
  std::function<void()> after_;
  int source_;
};

class TaskQueue {
 public:
  TaskQueue();
  ~TaskQueue();
  void push(std::function<void()> task);
  // Returns once every task pushed before has run and been destroyed (a task's captures may
  // hold Python objects: drained before the interpreter finalizes, the worker never needs the
  // GIL while Python shuts down).
  void drain();

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace lowcomm::torchdist
