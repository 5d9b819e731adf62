// Interleaved 1F1B over v model chunks per pipeline rank (Narayanan et al., 2021, Megatron-LM's
// virtual pipeline), with non-blocking sends: see pipeline.h.
#include <algorithm>
#include <deque>
#include <limits>
#include <memory>
#include <vector>

#include "lowcomm/base/error.h"
#include "lowcomm/base/heap.h"
#include "lowcomm/parallel/pipeline.h"

namespace lowcomm::parallel {
namespace {

constexpr uint32_t kForwardTag = 1, kBackwardTag = 2;

size_t bytesOf(const torch::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// One operation of a stage's interleaved schedule: forward or backward of (local chunk, micro-batch).
struct Op {
  bool forward;
  int chunk, micro;
};

// Stage s's operations in order (pipeline.h): min(2 (P - s - 1) + (v - 1) P, M v) warm-up forwards,
// then one forward and one backward at a time, then the remaining backwards.
std::vector<Op> interleavedOps(int p, int v, int m, int s) {
  const int total = m * v, warmup = std::min(2 * (p - s - 1) + (v - 1) * p, total);
  auto op = [&](int k, bool forward) {
    const int c = (k % (p * v)) / p;
    return Op{forward, forward ? c : v - 1 - c, (k / (p * v)) * p + k % p};
  };
  std::vector<Op> ops;
  for (int k = 0; k < warmup; ++k) ops.push_back(op(k, true));
  for (int k = 0; k < total - warmup; ++k) ops.push_back(op(warmup + k, true)), ops.push_back(op(k, false));
  for (int k = total - warmup; k < total; ++k) ops.push_back(op(k, false));
  return ops;
}

// When a peer sends us its j-th message of one direction, how many of ours (the other direction)
// it has already received: its receives block and come before its sends in its own order. `peer`
// runs `ops`; it sends to us on ops with `sends` and receives from us on ops with `receives`.
template <typename Sends, typename Receives>
std::vector<int> receivedBeforeEachSend(const std::vector<Op>& ops, Sends sends, Receives receives) {
  std::vector<int> out;
  int received = 0;
  for (const Op& o : ops) {
    if (receives(o)) ++received;
    if (sends(o)) out.push_back(received);
  }
  return out;
}

// Sends in flight with the buffers they read, per direction, in posting order. A send is waited
// once the receiver is known to have taken it (waitFirst), or at the end of the step.
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
  void post(int dir, torch::Tensor t, int dst, uint32_t tag) {
    t = t.detach().to(torch::kFloat32).contiguous();
    pending_[dir].push_back({comm_.isend(t.data_ptr(), bytesOf(t), dst, tag), t});
  }
  // Waits for (and releases) direction dir's sends until `n` of them have completed in all.
  void waitFirst(int dir, int n) {
    while (completed_[dir] < n && !pending_[dir].empty()) {
      pending_[dir].front().request->wait();
      pending_[dir].pop_front();
      ++completed_[dir];
    }
  }
  void drain() {
    for (int dir : {0, 1}) waitFirst(dir, std::numeric_limits<int>::max());
  }

 private:
  struct Sent {
    std::unique_ptr<comm::Communicator::Request> request;
    torch::Tensor buffer;
  };
  comm::Communicator& comm_;
  std::deque<Sent> pending_[2];
  int completed_[2] = {0, 0};
};

}  // namespace

double Pipeline::trainInterleaved(const std::vector<torch::Tensor>& xs, const std::vector<torch::Tensor>& ys,
                                  double per, const LossFn& loss, const std::function<void(bool)>& before_backward,
                                  int64_t heap0) {
  const int p = stages_, v = model_->chunks(), m = options_.micro_batches, last_global = p * v - 1;
  const int prev = (stage_ + p - 1) % p, next = (stage_ + 1) % p;
  enum { kFwd = 0, kBwd = 1 };
  // Our activations go to `next`, which sends gradients back; our gradients go to `prev`, which
  // sends activations: each message received tells how many of ours the peer had taken.
  // A backward sends its input's gradient unless its chunk is the pipeline's first, and receives
  // its output's gradient unless it is the last; a forward receives unless first, sends unless last.
  const auto taken_fwd = receivedBeforeEachSend(
      interleavedOps(p, v, m, next), [&](const Op& o) { return !o.forward && o.chunk * p + next != 0; },
      [&](const Op& o) { return o.forward && o.chunk * p + next != 0; });
  const auto taken_bwd = receivedBeforeEachSend(
      interleavedOps(p, v, m, prev), [&](const Op& o) { return o.forward && o.chunk * p + prev != last_global; },
      [&](const Op& o) { return !o.forward && o.chunk * p + prev != last_global; });
  const auto mine = interleavedOps(p, v, m, stage_);
  const auto receives = [&](bool forward) {
    return std::count_if(mine.begin(), mine.end(), [&](const Op& o) {
      const int g = model_->globalChunk(o.chunk);
      return o.forward == forward && (forward ? g != 0 : g != last_global);
    });
  };
  LC_ENFORCE(static_cast<long>(taken_bwd.size()) == receives(true) && static_cast<long>(taken_fwd.size()) == receives(false),
             "interleaved pipeline: stage ", stage_, "'s receives do not match its neighbours' sends");
  int grads_in = 0, acts_in = 0;
  std::vector<std::vector<MicroBatch>> mbs(v, std::vector<MicroBatch>(m));
  Outbox outbox(*pp_);
  double total = 0;
  int alive = 0;
  auto forwardStep = [&](const Op& o) {
    const int global = model_->globalChunk(o.chunk);
    MicroBatch& mb = mbs[o.chunk][o.micro];
    mb.x = xs[o.micro], mb.y = ys[o.micro], mb.chunk = o.chunk, mb.first = global == 0, mb.last = global == last_global;
    if (!mb.first) {
      mb.input = activation(mb);
      pp_->recv(mb.input.data_ptr(), bytesOf(mb.input), prev, kForwardTag);
      mb.input.requires_grad_();
      outbox.waitFirst(kBwd, taken_bwd[acts_in++]);
    }
    forward(mb, loss, per, total);
    if (!mb.last) outbox.post(kFwd, mb.output, next, kForwardTag);
    noteInFlight(++alive, heap0);
  };
  auto backwardStep = [&](const Op& o) {
    MicroBatch& mb = mbs[o.chunk][o.micro];
    torch::Tensor grad;
    if (!mb.last) {
      grad = activation(mb);
      pp_->recv(grad.data_ptr(), bytesOf(grad), next, kBackwardTag);
      outbox.waitFirst(kFwd, taken_fwd[grads_in++]);
    }
    const bool first = mb.first;
    before_backward(o.micro == m - 1);  // the chunk's last micro-batch: its parameters' gradients are final
    const auto input_grad = backward(mb, grad);
    --alive;
    if (!first) outbox.post(kBwd, input_grad, prev, kBackwardTag);
  };
  for (const Op& o : mine) {
    if (o.forward) forwardStep(o);
    else backwardStep(o);
  }
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
