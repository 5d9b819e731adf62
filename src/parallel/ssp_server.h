// One shard of the stale-synchronous parameter server (private to parallel; protocol in
// lowcomm/parallel/ssp.h). It runs on a thread of its own over the server rank of the
// worker/server communicator (Communicator::splitRoles: workers 0..n-1, servers n..2n-1).
//
// Messages, all point to point with tag kSspTag, every one prefixed by a 16-byte header
// {kind, clock}:
//   worker -> server: {push, c} + the worker's update of this shard (f32) after its c-th step;
//                     {fence, c} and {final, c} are as long, their payload unused (a receive
//                     from any worker has one size);
//   server -> worker: {push, slowest clock} + the shard (the answer to a push), {fence, slowest}
//                     alone, {final, slowest} + the final shard.
// A push is answered once every worker has pushed at least c - staleness steps (staleness < 0:
// at once). A fence is answered when every worker sent one, after a snapshot of the shard and
// the clocks; a final when every worker sent one, after which the thread ends.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "lowcomm/comm/communicator.h"

namespace lowcomm::parallel {

constexpr uint32_t kSspTag = 7;
enum class SspKind : int64_t { push = 0, fence = 1, final = 2 };
constexpr int64_t kSspHeaderFloats = 4;  // 16 bytes: kind, clock (int64 each)

void writeSspHeader(torch::Tensor& msg, SspKind kind, int64_t clock);
std::pair<SspKind, int64_t> readSspHeader(const torch::Tensor& msg);

struct SspSnapshot {
  torch::Tensor shard;          // f32, this server's slice of the flat state
  std::vector<int64_t> clocks;  // steps pushed by each worker
};

// Owned by shared_ptr: the thread holds one, so an abandoned server (detach()) outlives its owner
// until its receive fails or times out.
class SspServer : public std::enable_shared_from_this<SspServer> {
 public:
  // `comm` is the server rank (n + k) of a 2n communicator; load() gives the initial values.
  // `lag` 1: workers take one more step before they use an answer (push and pull overlapped with
  // compute), so a push of clock c is answered once every worker has pushed c − staleness + 1.
  SspServer(std::shared_ptr<comm::Communicator> comm, int workers, int64_t staleness, int64_t lag = 0);

  // Before start(): the shard's values and every worker's clock (a resume or a fresh run).
  void load(const torch::Tensor& shard, const std::vector<int64_t>& clocks);
  void start();
  // The state at the last fence, or the final state once the thread ended.
  SspSnapshot snapshot() const;
  // Bytes of the shard, its answer, receive and snapshot buffers (and a round with staleness 0).
  int64_t bufferBytes() const;
  // Every worker's clock as this server last saw it (any thread).
  std::vector<int64_t> clocks() const;
  // The server thread's failure, rethrown on the caller (nothing if it runs or ended well).
  void rethrowFailure() const;
  bool running() const { return thread_.joinable(); }
  // Waits for the thread to end after the final answers.
  void join();
  // Lets a running thread go (its owner is being destroyed after a failure).
  void detach();

 private:
  void loop();
  void onPush(int worker, const torch::Tensor& msg, int64_t clock);
  void answerPushes();
  void answerAll(SspKind kind, bool with_shard);
  int64_t slowest() const;

  std::shared_ptr<comm::Communicator> comm_;
  int n_;
  int64_t staleness_, lag_;
  torch::Tensor shard_, reply_, fence_reply_;
  std::vector<torch::Tensor> round_;  // staleness 0: the updates of the current round, by worker
  int arrived_ = 0;
  std::vector<int64_t> clocks_;
  std::vector<bool> waiting_, fenced_, final_;
  mutable std::mutex mu_;
  SspSnapshot snap_;
  std::exception_ptr failure_;
  std::thread thread_;
};

}  // namespace lowcomm::parallel
