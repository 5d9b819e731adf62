// One shard of the stale-synchronous parameter server (protocol in ssp_server.h).
#include "ssp_server.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "lowcomm/base/error.h"

namespace lowcomm::parallel {

void writeSspHeader(torch::Tensor& msg, SspKind kind, int64_t clock) {
  const int64_t h[2] = {static_cast<int64_t>(kind), clock};
  std::memcpy(msg.data_ptr<float>(), h, sizeof h);
}

std::pair<SspKind, int64_t> readSspHeader(const torch::Tensor& msg) {
  int64_t h[2];
  std::memcpy(h, msg.data_ptr<float>(), sizeof h);
  return {static_cast<SspKind>(h[0]), h[1]};
}

SspServer::SspServer(std::shared_ptr<comm::Communicator> comm, int workers, int64_t staleness, int64_t lag)
    : comm_(std::move(comm)), n_(workers), staleness_(staleness), lag_(lag), clocks_(workers, 0), waiting_(workers, false),
      fenced_(workers, false), final_(workers, false) {}

void SspServer::load(const torch::Tensor& shard, const std::vector<int64_t>& clocks) {
  LC_ENFORCE(!running(), "ssp server: load() after start()");
  LC_ENFORCE_OP(static_cast<int>(clocks.size()), ==, n_, "ssp server: one clock per worker");
  shard_ = shard.detach().to(torch::kFloat32).contiguous().clone();
  clocks_ = clocks;
  std::lock_guard<std::mutex> lock(mu_);
  snap_ = {shard_.clone(), clocks_};
}

void SspServer::start() {
  LC_ENFORCE(shard_.defined(), "ssp server: start() before load()");
  const int64_t len = shard_.numel();
  reply_ = torch::empty({kSspHeaderFloats + len}, torch::kFloat32);
  fence_reply_ = torch::empty({kSspHeaderFloats}, torch::kFloat32);
  if (staleness_ == 0)
    for (int q = 0; q < n_; ++q) round_.push_back(torch::empty({len}, torch::kFloat32));
  thread_ = std::thread([self = shared_from_this()] { self->loop(); });
}

SspSnapshot SspServer::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snap_;
}

int64_t SspServer::bufferBytes() const {
  const int64_t shard = shard_.defined() ? shard_.numel() * 4 : 0;
  return (4 + static_cast<int64_t>(round_.size())) * shard + 3 * kSspHeaderFloats * 4;  // shard, answer, message, snapshot
}

std::vector<int64_t> SspServer::clocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return clocks_;
}

void SspServer::rethrowFailure() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (failure_) std::rethrow_exception(failure_);
}

void SspServer::join() {
  if (thread_.joinable()) thread_.join();
  rethrowFailure();
}

void SspServer::detach() {
  if (thread_.joinable()) thread_.detach();
}

int64_t SspServer::slowest() const { return *std::min_element(clocks_.begin(), clocks_.end()); }

void SspServer::loop() {
  try {
    torch::NoGradGuard no_grad;
    torch::Tensor msg = torch::empty({kSspHeaderFloats + shard_.numel()}, torch::kFloat32);
    std::vector<int> workers(n_);
    std::iota(workers.begin(), workers.end(), 0);
    for (bool done = false; !done;) {
      comm_->setPhase("pull");
      const int q = comm_->recvAny(msg.data_ptr(), static_cast<size_t>(msg.numel()) * 4, workers, kSspTag);
      const auto [kind, clock] = readSspHeader(msg);
      if (kind == SspKind::push) {
        onPush(q, msg, clock);
        answerPushes();
        continue;
      }
      LC_ENFORCE(kind == SspKind::fence || kind == SspKind::final, "ssp server: unknown message kind ",
                 static_cast<int64_t>(kind), " from worker ", q);
      auto& marks = kind == SspKind::fence ? fenced_ : final_;
      marks[q] = true;
      if (!std::all_of(marks.begin(), marks.end(), [](bool b) { return b; })) continue;
      {
        std::lock_guard<std::mutex> lock(mu_);
        snap_ = {shard_.clone(), clocks_};
      }
      answerAll(kind, kind == SspKind::final);
      std::fill(marks.begin(), marks.end(), false);
      done = kind == SspKind::final;
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    failure_ = std::current_exception();
  }
}

void SspServer::onPush(int worker, const torch::Tensor& msg, int64_t clock) {
  LC_ENFORCE_OP(clock, ==, clocks_[worker] + 1, "ssp server ", comm_->rank() - n_, ": worker ", worker,
                " pushed out of order");
  const auto update = msg.narrow(0, kSspHeaderFloats, shard_.numel());
  {
    std::lock_guard<std::mutex> lock(mu_);
    clocks_[worker] = clock;
  }
  waiting_[worker] = true;
  const double w = 1.0 / n_;
  if (staleness_ != 0) {
    shard_.add_(update, w);  // as it arrives
    return;
  }
  round_[worker].copy_(update);  // a round at a time, in rank order: deterministic
  if (++arrived_ < n_) return;
  for (const auto& u : round_) shard_.add_(u, w);
  arrived_ = 0;
}

void SspServer::answerPushes() {
  const int64_t slow = slowest();
  for (int q = 0; q < n_; ++q) {
    if (!waiting_[q] || (staleness_ >= 0 && slow < clocks_[q] - staleness_ + lag_)) continue;
    writeSspHeader(reply_, SspKind::push, slow);
    reply_.narrow(0, kSspHeaderFloats, shard_.numel()).copy_(shard_);
    comm_->send(reply_.data_ptr(), static_cast<size_t>(reply_.numel()) * 4, q, kSspTag);
    waiting_[q] = false;
  }
}

void SspServer::answerAll(SspKind kind, bool with_shard) {
  auto& out = with_shard ? reply_ : fence_reply_;
  writeSspHeader(out, kind, slowest());
  if (with_shard) out.narrow(0, kSspHeaderFloats, shard_.numel()).copy_(shard_);
  comm_->setPhase(kind == SspKind::final ? "final-pull" : "fence");
  for (int q = 0; q < n_; ++q) comm_->send(out.data_ptr(), static_cast<size_t>(out.numel()) * 4, q, kSspTag);
}

}  // namespace lowcomm::parallel
