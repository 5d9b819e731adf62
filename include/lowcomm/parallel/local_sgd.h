// Local SGD (`strategy.name = "local_sgd"`): every rank takes `period` optimizer steps on its own
// gradients, then the parameters (and, optionally, the optimizer's moments) are averaged over the
// ranks in one allreduce (Stich 2019; Lin et al. 2020, "Don't use large mini-batches, use local
// SGD").
//
// - Post-local SGD (Lin et al. 2020; PyTorch's PostLocalSGDOptimizer): the first `start_step`
//   steps are plain DDP over the world, local steps follow.
// - Hierarchical averaging (Intra-Inter co-design): in the local phase a DDP inside each node
//   (shared memory) averages gradients at every step and the parameters are averaged across the
//   nodes every `period` steps by the world's allreduce, which on several nodes is hierarchical
//   itself (shared memory inside each node, one exchange between the nodes).
// - Averaging happens after optimizer step s (0-based) when s + 1 - start_step is a positive
//   multiple of `period`; at the end of training an average of the last partial period makes
//   every rank hold the same final model. Floating-point buffers (BatchNorm statistics) are
//   averaged with the parameters.
// - With period 1 and SGD (momentum and weight decay included, no gradient clipping) the result
//   equals DDP's up to floating-point rounding: both compute the same average of linear updates,
//   in a different order.
// - Between averagings the ranks' weights differ: evaluations during training run every rank's
//   own replica on its shard of the test set (eval records carry `steps_since_average`), and the
//   checkpoint of every rank keeps its own weights, so a resume continues bit for bit.
#pragma once

#include <memory>

#include "lowcomm/base/schema.h"
#include "lowcomm/parallel/strategy.h"

namespace lowcomm::parallel {

struct LocalSgdOptions {
  int64_t period = 4;              // local steps between averagings (>= 1)
  schema::RunSteps start_step = 0; // global DDP steps first (post-local SGD); a fraction is resolved by the factory
  bool average_optimizer = false;  // average the optimizer's moments too (SGD momentum, Adam(W) moments)
  bool hierarchical = false;       // DDP inside each node every step; averaging across nodes
};

// Throws ConfigError naming the `local_sgd.*` key.
// The [local_sgd] config section: every key declared once (src/parallel/local_sgd_spec.cpp).
schema::Section<LocalSgdOptions> localSgdSection();
void validateLocalSgdOptions(const LocalSgdOptions& o);

std::unique_ptr<Strategy> makeLocalSgdStrategy(const StrategyContext& ctx, const LocalSgdOptions& o);

}  // namespace lowcomm::parallel
