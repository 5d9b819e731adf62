// GPipe and 1F1B schedules over the stages of a ShardedModel, with point-to-point activations.
#include "lowcomm/parallel/pipeline.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "lowcomm/base/error.h"
#include "lowcomm/base/heap.h"

namespace lowcomm::parallel {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

size_t bytesOf(const torch::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

torch::Tensor f32(const torch::Tensor& t) { return t.detach().to(torch::kFloat32).contiguous(); }

}  // namespace

Pipeline::Pipeline(std::shared_ptr<ShardedModel> model, std::shared_ptr<comm::Communicator> pp, PipelineOptions options,
                   Trace* trace)
    : model_(std::move(model)), pp_(std::move(pp)), options_(std::move(options)), trace_(trace) {
  if (options_.schedule != "1f1b" && options_.schedule != "gpipe" && options_.schedule != "interleaved")
    throw ConfigError("parallel.schedule: '" + options_.schedule +
                      "' is not a pipeline schedule (1f1b, gpipe, interleaved)");
  if (options_.micro_batches < 1)
    throw ConfigError("parallel.micro_batches: must be >= 1, got " + std::to_string(options_.micro_batches));
  stage_ = pp_->rank();
  stages_ = pp_->size();
  LC_ENFORCE(model_->stage() == stage_ && model_->stages() == stages_, "pipeline: the model is stage ",
             model_->stage(), " of ", model_->stages(), ", the communicator rank ", stage_, " of ", stages_);
  const int v = model_->chunks();
  if (options_.schedule == "interleaved") {
    if (v < 2)
      throw ConfigError("parallel.virtual_stages: the interleaved schedule needs a model of >= 2 chunks per rank, got " +
                        std::to_string(v));
    if (options_.micro_batches % stages_ != 0)
      throw ConfigError("parallel.micro_batches: the interleaved schedule runs micro-batches in groups of " +
                        std::to_string(stages_) + " (parallel.pp); " + std::to_string(options_.micro_batches) +
                        " is not a multiple");
  } else {
    LC_ENFORCE(v == 1, "pipeline: schedule '", options_.schedule, "' runs one chunk per rank, the model has ", v);
  }
  stats_.theory = static_cast<double>(stages_ - 1) / static_cast<double>(v * options_.micro_batches + stages_ - 1);
}

torch::Tensor Pipeline::activation(const MicroBatch& mb) const {
  return torch::empty(model_->activationShape(mb.x), torch::kFloat32);
}

torch::Tensor Pipeline::recvForward(const MicroBatch& mb) {
  if (model_->firstStage()) return {};
  auto t = activation(mb);
  pp_->recv(t.data_ptr(), bytesOf(t), stage_ - 1);
  return t.requires_grad_();
}

void Pipeline::sendForward(const MicroBatch& mb) {
  if (model_->lastStage()) return;
  const auto out = f32(mb.output);
  pp_->send(out.data_ptr(), bytesOf(out), stage_ + 1);
}

torch::Tensor Pipeline::recvBackward(const MicroBatch& mb) {
  if (model_->lastStage()) return {};
  auto t = activation(mb);
  pp_->recv(t.data_ptr(), bytesOf(t), stage_ + 1);
  return t;
}

void Pipeline::sendBackward(const torch::Tensor& input_grad) {
  if (model_->firstStage()) return;
  const auto g = f32(input_grad);
  pp_->send(g.data_ptr(), bytesOf(g), stage_ - 1);
}

torch::Tensor Pipeline::sendForwardRecvBackward(const MicroBatch& sending, const MicroBatch& oldest) {
  if (model_->lastStage()) return {};
  const auto out = f32(sending.output);
  auto grad = activation(oldest);
  pp_->exchange({{stage_ + 1, out.data_ptr(), bytesOf(out)}}, {{stage_ + 1, grad.data_ptr(), bytesOf(grad)}});
  return grad;
}

torch::Tensor Pipeline::sendBackwardRecvForward(const torch::Tensor& input_grad, const MicroBatch& next) {
  if (model_->firstStage()) return {};
  const auto g = f32(input_grad);
  auto in = activation(next);
  pp_->exchange({{stage_ - 1, g.data_ptr(), bytesOf(g)}}, {{stage_ - 1, in.data_ptr(), bytesOf(in)}});
  return in.requires_grad_();
}

torch::Tensor Pipeline::runStage(const MicroBatch& mb) {
  const auto& in = mb.first ? mb.x : mb.input;
  if (model_->chunks() > 1) return model_->forwardChunk(mb.chunk, in);
  return forward_fn_ ? forward_fn_(in) : model_->forward(in);
}

void Pipeline::forward(MicroBatch& mb, const LossFn& loss, double scale, double& total) {
  TraceScope span(trace_, "forward", "compute", 0);
  const auto t0 = Clock::now();
  auto out = runStage(mb);
  if (mb.last) {
    out = loss(out, mb.y) * scale;
    total += out.item<double>();
  }
  mb.output = out;
  compute_s_ += since(t0);
}

torch::Tensor Pipeline::backward(MicroBatch& mb, const torch::Tensor& output_grad) {
  TraceScope span(trace_, "backward", "compute", 0);
  const auto t0 = Clock::now();
  if (mb.last) mb.output.backward();
  else mb.output.backward(output_grad.to(mb.output.scalar_type()));
  torch::Tensor input_grad = mb.first ? torch::Tensor() : mb.input.grad();
  mb = MicroBatch{};  // its activations are released here
  compute_s_ += since(t0);
  return input_grad;
}

void Pipeline::noteInFlight(int in_flight, int64_t heap_start) {
  stats_.max_in_flight = std::max(stats_.max_in_flight, in_flight);
  stats_.peak_activation_bytes = std::max(stats_.peak_activation_bytes, heapInUseBytes() - heap_start);
}

double Pipeline::trainStep(const torch::Tensor& x, const torch::Tensor& y, double scale, const LossFn& loss,
                           const std::function<void(bool)>& before_backward) {
  const int m = options_.micro_batches;
  if (x.size(0) % m != 0)
    throw ConfigError("parallel.micro_batches: " + std::to_string(m) + " micro-batches do not divide a batch of " +
                      std::to_string(x.size(0)) + " (data.batch_size x parallel.tp x parallel.pp)");
  const auto xs = x.chunk(m), ys = y.chunk(m);
  const double per = scale / m;
  const int64_t heap0 = heapInUseBytes();
  const auto t0 = Clock::now();
  compute_s_ = 0;
  double total = 0;
  if (options_.schedule == "interleaved") {
    total = trainInterleaved(xs, ys, per, loss, before_backward, heap0);
  } else {
    total = trainContiguous(xs, ys, per, loss, before_backward, heap0);
  }
  pp_->broadcast(&total, 1, comm::DType::f64, stages_ - 1);
  if (++started_ > 1) {  // the first step warms up the allocator and the connections
    ++stats_.steps;
    stats_.compute_s += compute_s_;
    stats_.wall_s += since(t0);
  }
  return total;
}

double Pipeline::trainContiguous(const std::vector<torch::Tensor>& xs, const std::vector<torch::Tensor>& ys,
                                 double per, const LossFn& loss, const std::function<void(bool)>& before_backward,
                                 int64_t heap0) {
  const int m = options_.micro_batches;
  std::vector<MicroBatch> mbs(m);
  for (int i = 0; i < m; ++i)
    mbs[i].x = xs[i], mbs[i].y = ys[i], mbs[i].first = model_->firstStage(), mbs[i].last = model_->lastStage();
  double total = 0;
  int fwd = 0, bwd = 0;
  auto backwardOldest = [&](const torch::Tensor& output_grad) {
    before_backward(bwd == m - 1);
    return backward(mbs[bwd++], output_grad);
  };
  if (options_.schedule == "gpipe") {
    for (; fwd < m; ++fwd) {
      mbs[fwd].input = recvForward(mbs[fwd]);
      forward(mbs[fwd], loss, per, total);
      sendForward(mbs[fwd]);
      noteInFlight(fwd + 1, heap0);
    }
    while (bwd < m) {
      const auto g = recvBackward(mbs[bwd]);
      sendBackward(backwardOldest(g));
    }
  } else {  // 1F1B: warm-up forwards, steady one-forward-one-backward, cool-down backwards
    const int warmup = std::min(stages_ - stage_ - 1, m), steady = m - warmup;
    for (int i = 0; i < warmup; ++i, ++fwd) {
      mbs[fwd].input = recvForward(mbs[fwd]);
      forward(mbs[fwd], loss, per, total);
      sendForward(mbs[fwd]);
      noteInFlight(fwd + 1 - bwd, heap0);
    }
    if (steady > 0) mbs[fwd].input = recvForward(mbs[fwd]);
    for (int i = 0; i < steady; ++i) {
      forward(mbs[fwd], loss, per, total);
      ++fwd;
      noteInFlight(fwd - bwd, heap0);
      const auto g = sendForwardRecvBackward(mbs[fwd - 1], mbs[bwd]);
      const auto input_grad = backwardOldest(g);
      if (i == steady - 1) sendBackward(input_grad);
      else mbs[fwd].input = sendBackwardRecvForward(input_grad, mbs[fwd]);
    }
    while (bwd < m) {
      const auto g = recvBackward(mbs[bwd]);
      sendBackward(backwardOldest(g));
    }
  }
  return total;
}

std::pair<double, double> Pipeline::evalBatch(const torch::Tensor& x, const torch::Tensor& y, const ScoreFn& score) {
  torch::NoGradGuard no_grad;
  const auto xs = x.chunk(options_.micro_batches), ys = y.chunk(options_.micro_batches);
  if (model_->chunks() > 1) return evalInterleaved(xs, ys, score);
  double sums[2] = {0, 0};
  for (size_t i = 0; i < xs.size(); ++i) {
    MicroBatch mb;
    mb.x = xs[i], mb.y = ys[i], mb.first = model_->firstStage(), mb.last = model_->lastStage();
    mb.input = recvForward(mb);
    mb.output = runStage(mb);
    if (mb.last) {
      const auto [loss, correct] = score(mb.output, mb.y);
      sums[0] += loss, sums[1] += correct;
    } else {
      sendForward(mb);
    }
  }
  pp_->broadcast(sums, 2, comm::DType::f64, stages_ - 1);
  return {sums[0], sums[1]};
}

}  // namespace lowcomm::parallel
