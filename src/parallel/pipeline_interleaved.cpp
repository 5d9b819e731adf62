// Interleaved 1F1B over v model chunks per pipeline rank (Narayanan et al., 2021, Megatron-LM's
// virtual pipeline), with non-blocking sends: see pipeline.h.
#include <algorithm>
#include <deque>
#include <memory>
#include <vector>

#include "lowcomm/base/heap.h"
#include "lowcomm/parallel/pipeline.h"

namespace lowcomm::parallel {
namespace {

constexpr uint32_t kForwardTag = 1, kBackwardTag = 2;

size_t bytesOf(const torch::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// Sends in flight with the buffers they read; reaped in posting order once done.
class Outbox {
 public:
  explicit Outbox(comm::Communicator& comm) : comm_(comm) {}
  ~Outbox() {
    // An exception left sends unwaited: wait for them (each throws on timeout) rather than
    // destroy them in flight, which poisons the communicator.
    try {
      drain();
    } catch (...) {
    }
  }
  void post(torch::Tensor t, int dst, uint32_t tag) {
    t = t.detach().to(torch::kFloat32).contiguous();
    pending_.push_back({comm_.isend(t.data_ptr(), bytesOf(t), dst, tag), t});
  }
  void reap() {
    while (!pending_.empty() && pending_.front().request->done()) {
      pending_.front().request->wait();
      pending_.pop_front();
    }
  }
  void drain() {
    while (!pending_.empty()) {
      pending_.front().request->wait();
      pending_.pop_front();
    }
  }

 private:
  struct Sent {
    std::unique_ptr<comm::Communicator::Request> request;
    torch::Tensor buffer;
  };
  comm::Communicator& comm_;
  std::deque<Sent> pending_;
};

}  // namespace

double Pipeline::trainInterleaved(const std::vector<torch::Tensor>& xs, const std::vector<torch::Tensor>& ys,
                                  double per, const LossFn& loss, const std::function<void(bool)>& before_backward,
                                  int64_t heap0) {
  const int p = stages_, v = model_->chunks(), m = options_.micro_batches, total_steps = m * v;
  const int prev = (stage_ + p - 1) % p, next = (stage_ + 1) % p;
  auto chunkOf = [&](int k, bool forward) {
    const int c = (k % (p * v)) / p;
    return forward ? c : v - 1 - c;
  };
  auto microOf = [&](int k) { return (k / (p * v)) * p + k % p; };
  std::vector<std::vector<MicroBatch>> mbs(v, std::vector<MicroBatch>(m));
  Outbox outbox(*pp_);
  double total = 0;
  int alive = 0;
  auto forwardStep = [&](int k) {
    const int c = chunkOf(k, true), i = microOf(k), global = model_->globalChunk(c);
    MicroBatch& mb = mbs[c][i];
    mb.x = xs[i], mb.y = ys[i], mb.chunk = c, mb.first = global == 0, mb.last = global == p * v - 1;
    if (!mb.first) {
      mb.input = activation(mb);
      pp_->recv(mb.input.data_ptr(), bytesOf(mb.input), prev, kForwardTag);
      mb.input.requires_grad_();
    }
    outbox.reap();
    forward(mb, loss, per, total);
    if (!mb.last) outbox.post(mb.output, next, kForwardTag);
    noteInFlight(++alive, heap0);
  };
  auto backwardStep = [&](int k) {
    const int c = chunkOf(k, false), i = microOf(k);
    MicroBatch& mb = mbs[c][i];
    torch::Tensor grad;
    if (!mb.last) {
      grad = activation(mb);
      pp_->recv(grad.data_ptr(), bytesOf(grad), next, kBackwardTag);
    }
    outbox.reap();
    const bool first = mb.first;
    before_backward(i == m - 1);  // the chunk's last micro-batch: its parameters' gradients are final
    const auto input_grad = backward(mb, grad);
    --alive;
    if (!first) outbox.post(input_grad, prev, kBackwardTag);
  };
  const int warmup = std::min(2 * (p - stage_ - 1) + (v - 1) * p, total_steps);
  for (int k = 0; k < warmup; ++k) forwardStep(k);
  for (int k = 0; k < total_steps - warmup; ++k) {
    forwardStep(warmup + k);
    backwardStep(k);
  }
  for (int k = total_steps - warmup; k < total_steps; ++k) backwardStep(k);
  outbox.drain();
  return total;
}

// Forward only, one micro-batch at a time through every chunk in pipeline order.
std::pair<double, double> Pipeline::evalInterleaved(const std::vector<torch::Tensor>& xs,
                                                    const std::vector<torch::Tensor>& ys, const ScoreFn& score) {
  const int p = stages_, v = model_->chunks();
  const int prev = (stage_ + p - 1) % p, next = (stage_ + 1) % p;
  double sums[2] = {0, 0};
  for (size_t i = 0; i < xs.size(); ++i)
    for (int c = 0; c < v; ++c) {
      const int global = model_->globalChunk(c);
      MicroBatch mb;
      mb.x = xs[i], mb.y = ys[i], mb.chunk = c, mb.first = global == 0, mb.last = global == p * v - 1;
      if (!mb.first) {
        mb.input = activation(mb);
        pp_->recv(mb.input.data_ptr(), bytesOf(mb.input), prev, kForwardTag);
      }
      mb.output = runStage(mb);
      if (mb.last) {
        const auto [l, correct] = score(mb.output, mb.y);
        sums[0] += l, sums[1] += correct;
      } else {
        const auto out = mb.output.detach().to(torch::kFloat32).contiguous();
        pp_->send(out.data_ptr(), bytesOf(out), next, kForwardTag);
      }
    }
  pp_->broadcast(sums, 2, comm::DType::f64, stages_ - 1);
  return {sums[0], sums[1]};
}

}  // namespace lowcomm::parallel
