// DiLoCo (`strategy.name = "diloco"`; Douillard et al. 2023, "DiLoCo: Distributed Low-Communication
// Training of Language Models"): every rank runs the inner optimizer (the config's, AdamW in the
// paper) alone for `period` steps from the shared outer parameters θ; then the pseudo-gradient
// Δ_r = θ − θ_r is averaged over the ranks and an outer SGD step with (Nesterov) momentum moves θ:
//   m ← μ·m + Δ;   θ ← θ − outer_lr · (Δ + μ·m  with Nesterov,  m  without);   every θ_r ← θ.
// The inner optimizer's state stays on each rank (as in the paper); floating-point buffers
// (BatchNorm statistics) are averaged at every outer step.
//
// - Scope (`scope`): "world" makes every rank its own replica; "site" and "node" make the ranks
//   of each site (LOWCOMM_SITE) or node one replica group, kept identical by a DDP of its own
//   (plain allreduce, every inner step), and the outer method runs across the groups. Each member
//   of a group carries about 1/group_size of the pseudo-gradient to the members with its index in
//   the other groups, then the group shares the results, so bytes between groups leave once per
//   group (src/parallel/diloco_scope.h).
// - Streaming (Douillard et al. 2025, "Streaming DiLoCo with overlapping communication"): the
//   parameters form `fragments` contiguous runs of about equal size (src/parallel/diloco_plan.h);
//   fragment f syncs after inner steps f·period/P + k·period, so each sync moves about 1/P of the
//   model. With `overlap_steps` τ > 0 its exchange runs on a communication thread while τ more
//   inner steps compute, and lands after them: θ_f takes the outer step, and the local weights
//   become mix·local + (1 − mix)·θ_f (mix 0: θ_f, which drops the τ inner steps the fragment took
//   since it left; the paper's α, 0.5 in its overlapped runs). Float buffers travel with
//   fragment 0 and land as their average at its launch (mix does not apply to them).
//   With τ = 0 a fragment merges at once; with one fragment and τ = 0 this is DiLoCo as above.
// - The pseudo-gradient goes through the gradient hook ([compress]: any codec with its
//   error-feedback memory, PowerSGD, auto), one bucket per fragment (bucket index = fragment),
//   so its payload and compression ratio are counted like a gradient's; traffic phase "outer".
//   The inner DDP of a group sends plain gradients (phase "grad").
// - With outer_lr 1 and momentum 0 the outer step is θ − average(θ − θ_r) = average(θ_r): local
//   SGD with the same period, up to float rounding.
// - An exchange leaves after optimizer step s (0-based) when s + 1 is due for its fragment;
//   landings due at a step merge before launches. At the end every exchange in flight lands into
//   θ (the local weights keep their later steps), and each fragment whose weights are not θ syncs
//   once more, blocking, so every rank holds θ. That last sync is an outer step like the others
//   (`final_sync = "outer"`), or (`"average"`) θ ← θ − average(Δ): the replicas' average,
//   without the momentum's extrapolation past it. θ, m, the schedule and any exchange in flight (as
//   its landed result) are the strategy's checkpoint section (each rank's inner weights and
//   optimizer state are in its own checkpoint), so a resume mid-period continues bit for bit.
#pragma once

#include <memory>

#include "lowcomm/base/schema.h"
#include "lowcomm/parallel/strategy.h"

namespace lowcomm::parallel {

struct DilocoOptions {
  int64_t period = 16;          // inner steps between outer steps (>= 1)
  double outer_lr = 0.7;        // the paper's
  double outer_momentum = 0.9;  // in [0, 1)
  bool nesterov = true;
  std::string scope = "world";  // world | site | node: the replica groups
  int64_t fragments = 1;        // P, 1..period (and at most the parameter tensors)
  int64_t overlap_steps = 0;    // τ, 0..period-1: inner steps an exchange overlaps
  double mix = 0;               // weight of the local weights when a fragment lands, [0, 1)
  std::string final_sync = "outer";  // outer | average: what the last sync of each fragment applies
};

// Throws ConfigError naming the `diloco.*` key.
// The [diloco] config section: every key declared once (src/parallel/diloco_spec.cpp).
schema::Section<DilocoOptions> dilocoSection();
void validateDilocoOptions(const DilocoOptions& o);

std::unique_ptr<Strategy> makeDilocoStrategy(const StrategyContext& ctx, const DilocoOptions& o);

}  // namespace lowcomm::parallel
