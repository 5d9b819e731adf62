// Stale-synchronous parallel training on a sharded parameter server (`strategy.name = "ssp"`;
// Ho et al. 2013, "More effective distributed ML via a stale synchronous parallel parameter
// server"; `ssp.staleness = -1` is asynchronous, as Downpour SGD, Dean et al. 2012).
//
// - Every rank is a worker and, on a thread of its own, the server of one contiguous shard of
//   the flattened parameters and f32 buffers (shard k: elements [k·N/n, (k+1)·N/n)). Workers and
//   servers talk point to point over a communicator of 2n ranks (Communicator::splitRoles:
//   worker r is rank r, its server n + r); no collective runs during training.
// - A worker steps its optimizer on its own gradients, then pushes its update (its weights after
//   the step minus the weights it last pulled) to every server and pulls every shard back, all
//   messages posted at once (traffic phase "push" for the worker's side, "pull" for the
//   servers'). A server adds update / n to its shard as it arrives (with staleness 0 a round at a
//   time in rank order, so the run is deterministic) and answers the pull of a worker that has
//   pushed c steps once every worker has pushed at least c − s. No worker runs more than s steps
//   ahead of the slowest, and between steps none waits for it otherwise (evaluations, fences and
//   the final pull are points where all meet).
// - Overlap (`ssp.overlap`, default off; any bound but 0): the push and pull after step t run on
//   a communication thread while step t + 1 computes. The answer is merged when step t + 1 has
//   stepped its optimizer: weights = answer + this rank's own change since the push. A rank
//   then uses an answer one step later, so servers answer a push of clock c once every worker
//   has pushed c − s + 1: the bound s still holds for the weights a step computes with. With
//   staleness 0 (a round at a time, deterministic) nothing overlaps.
// - The staleness a pull observed, c minus the slowest worker's clock when it was answered (max
//   over the shards), is in every step record ("staleness") and the summary (max and mean).
// - Staleness 0 is local SGD with period 1 up to rounding (every rank keeps its own optimizer
//   state, as in a parameter server), and so DDP's result when the optimizer's update is linear in
//   the gradient (SGD, with momentum and weight decay): the mean of the updates is the update of
//   the mean gradient. tests/cli/ssp_e2e.sh: within 1e-6 of both (1.2e-7 measured).
// - A checkpoint is a fence: every worker's state writer waits until all workers reached it, the
//   servers snapshot their shards and clocks, and each rank's checkpoint holds its server's shard
//   and clocks beside its own weights, so a resume continues from the same state (bit for bit
//   with staleness 0, where timing cannot change the result).
// - Evaluations during training run each rank's own weights (pulled at most s steps stale) on its
//   shard of the test set.
// - At the end every worker pulls the final shards once all are done (phase "final-pull"): every
//   rank holds the same model.
// - A dead rank: the others' next push or pull fails or times out within comm.timeout_s, or their
//   wait before a fence or the final pull sees no progress for that long; the error names the
//   rank (its worker r or its server, rank n + r of the worker/server communicator). Servers
//   wait for pushes without a deadline (a gap between pushes may be an evaluation).
// - After a failure the server thread is let go (detached); it ends when its connections close.
#pragma once

#include <cstdint>
#include <memory>

#include "lowcomm/base/schema.h"
#include "lowcomm/parallel/strategy.h"

namespace lowcomm::parallel {

struct SspOptions {
  int64_t staleness = 2;  // steps a worker may run ahead of the slowest; -1 = unbounded (asynchronous)
  bool overlap = false;   // staleness != 0: push and pull step t while step t + 1 computes
};

// Throws ConfigError naming `ssp.staleness`.
// The [ssp] config section: every key declared once (src/parallel/ssp_spec.cpp).
schema::Section<SspOptions> sspSection();
void validateSspOptions(const SspOptions& o);

std::unique_ptr<Strategy> makeSspStrategy(const StrategyContext& ctx, const SspOptions& o);

}  // namespace lowcomm::parallel
