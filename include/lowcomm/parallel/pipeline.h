// Pipeline parallelism over the stages of a ShardedModel: GPipe (Huang et al., 2019: every
// micro-batch forward, then every backward) and 1F1B (PipeDream-Flush, Narayanan et al., 2021,
// as in Megatron-LM: after P - s - 1 warm-up forwards stage s alternates one forward and one
// backward, so at most P - s micro-batches are in flight instead of M).
//
// Contract:
// - The ranks of `pp` are the stages of one pipeline; each calls the same methods with the same
//   batch (tokens x [B, T], targets y). Stage 0 feeds x to the model, the last stage computes
//   the loss; activations [mb, T, dim] (f32) go forward and their gradients backward over `pp`
//   (point-to-point, traffic phase "pp"), paired with Communicator::exchange where 1F1B sends and
//   receives at once, so no schedule can deadlock (interleaved: below).
// - trainStep cuts the batch into M micro-batches (B not divisible by M: ConfigError naming
//   parallel.micro_batches), runs their forwards and backwards in the schedule's order and
//   accumulates the gradients in .grad. Micro-batch m's loss is loss(logits_m, y_m) * scale / M,
//   so with equal micro-batches the gradient is that of loss(logits, y) * scale on the whole
//   batch. before_backward(last) runs before every backward, last = true only for the step's last
//   one that reaches each parameter (a data-parallel strategy's setSync): the step's last backward,
//   or with interleaving each chunk's last micro-batch. Returns the summed scaled loss on every
//   stage.
// - Interleaved 1F1B (Narayanan et al., 2021; Megatron-LM's virtual pipeline): the model holds v
//   chunks per rank (ShardedModel::chunks()); micro-batches run in groups of P through chunk 0,
//   then chunk 1, ... (forward step k: chunk (k mod P v) / P, micro-batch (k / P v) P + k mod P;
//   backward in reverse chunk order), after min(2 (P - s - 1) + (v - 1) P, M v) warm-up forwards.
//   M not a multiple of P: ConfigError naming parallel.micro_batches. Activations go to the next
//   rank, (s + 1) mod P, and gradients back, posted with isend (tags kForwardTag, kBackwardTag) and
//   received when needed, so the schedule is its own order of the global dependency graph and
//   cannot deadlock; a send is released once a message from its receiver shows it was taken (the
//   peer's schedule says how many it had received before sending that one), the rest before
//   trainStep returns. Theory (P - 1) / (v M + P - 1).
// - evalBatch runs forward only (micro-batches of at most ceil(B / M)) and returns score's sums
//   over the batch (loss, correct) on every stage.
// - stats(): this stage's measured bubble (1 - forward/backward compute time / step wall time,
//   over every training step but the first, which warms up allocator and connections), the theory (P - 1) / (v M + P - 1)
//   (v = 1 but for interleaved), the peak number of micro-batches in flight (interleaved: chunk-micro-batches)
//   and the peak growth of the heap (glibc mallinfo2: in-use bytes) during a step, i.e. the
//   activations the schedule keeps alive.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lowcomm/base/trace.h"
#include "lowcomm/comm/communicator.h"
#include "lowcomm/parallel/sharded_model.h"

namespace lowcomm::parallel {

struct PipelineOptions {
  int micro_batches = 1;
  std::string schedule = "1f1b";  // 1f1b | gpipe | interleaved (needs a model of several chunks per rank)
};

struct PipelineStats {
  int64_t steps = 0;                 // timed steps (all but the first)
  double compute_s = 0, wall_s = 0;  // this stage, summed over training steps
  double bubble() const { return wall_s > 0 ? 1.0 - compute_s / wall_s : 0.0; }
  double theory = 0;                 // (P - 1) / (v M + P - 1)
  int max_in_flight = 0;             // micro-batches whose activations were alive at once
  int64_t peak_activation_bytes = 0;
};

class Pipeline {
 public:
  using LossFn = std::function<torch::Tensor(const torch::Tensor& logits, const torch::Tensor& targets)>;
  using ScoreFn = std::function<std::pair<double, double>(const torch::Tensor& logits, const torch::Tensor& targets)>;

  // ConfigError naming parallel.schedule / parallel.micro_batches for bad options.
  Pipeline(std::shared_ptr<ShardedModel> model, std::shared_ptr<comm::Communicator> pp, PipelineOptions options,
           Trace* trace = nullptr);
  double trainStep(const torch::Tensor& x, const torch::Tensor& y, double scale, const LossFn& loss,
                   const std::function<void(bool)>& before_backward);
  std::pair<double, double> evalBatch(const torch::Tensor& x, const torch::Tensor& y, const ScoreFn& score);
  const PipelineStats& stats() const { return stats_; }
  // What runs a micro-batch through this stage (its tokens or received activations): the model's
  // forward unless set, e.g. to a strategy's forward that first rebuilds weights from factors.
  // Interleaved runs the model's chunks (forwardChunk) and ignores it: the config refuses a
  // strategy with a forward of its own there (AB-training).
  using ForwardFn = std::function<torch::Tensor(const torch::Tensor& input)>;
  void setForward(ForwardFn forward) { forward_fn_ = std::move(forward); }

 private:
  struct MicroBatch {
    torch::Tensor x, y;       // this micro-batch's tokens and targets
    torch::Tensor input;      // a later stage's received activations (requires grad)
    torch::Tensor output;     // the stage's output (the loss on the last stage)
    int chunk = 0;            // the local model chunk it runs through (0 but for interleaved)
    bool first = false, last = false;  // whether that chunk is the pipeline's first / last
  };
  void forward(MicroBatch& mb, const LossFn& loss, double scale, double& total);
  torch::Tensor backward(MicroBatch& mb, const torch::Tensor& output_grad);
  torch::Tensor activation(const MicroBatch& mb) const;
  torch::Tensor recvForward(const MicroBatch& mb);
  void sendForward(const MicroBatch& mb);
  torch::Tensor recvBackward(const MicroBatch& mb);
  void sendBackward(const torch::Tensor& input_grad);
  torch::Tensor sendForwardRecvBackward(const MicroBatch& sending, const MicroBatch& oldest);
  torch::Tensor sendBackwardRecvForward(const torch::Tensor& input_grad, const MicroBatch& next);
  void noteInFlight(int in_flight, int64_t heap_start);
  torch::Tensor runStage(const MicroBatch& mb);
  double trainContiguous(const std::vector<torch::Tensor>& xs, const std::vector<torch::Tensor>& ys, double per,
                         const LossFn& loss, const std::function<void(bool)>& before_backward, int64_t heap0);
  // Interleaved 1F1B (pipeline_interleaved.cpp).
  double trainInterleaved(const std::vector<torch::Tensor>& xs, const std::vector<torch::Tensor>& ys, double per,
                          const LossFn& loss, const std::function<void(bool)>& before_backward, int64_t heap0);
  std::pair<double, double> evalInterleaved(const std::vector<torch::Tensor>& xs, const std::vector<torch::Tensor>& ys,
                                            const ScoreFn& score);

  std::shared_ptr<ShardedModel> model_;
  std::shared_ptr<comm::Communicator> pp_;
  PipelineOptions options_;
  Trace* trace_;
  int stage_, stages_;
  double compute_s_ = 0;  // of the current step
  int64_t started_ = 0;   // training steps begun
  PipelineStats stats_;
  ForwardFn forward_fn_;
};

}  // namespace lowcomm::parallel
