// DiLoCo (`strategy.name = "diloco"`; Douillard et al. 2023, "DiLoCo: Distributed Low-Communication
// Training of Language Models"): every rank runs the inner optimizer (the config's, AdamW in the
// paper) alone for `period` steps from the shared outer parameters θ; then the pseudo-gradient
// Δ_r = θ − θ_r is averaged over the ranks and an outer SGD step with (Nesterov) momentum moves θ:
//   m ← μ·m + Δ;   θ ← θ − outer_lr · (Δ + μ·m  with Nesterov,  m  without);   every θ_r ← θ.
// The inner optimizer's state stays on each rank (as in the paper); floating-point buffers
// (BatchNorm statistics) are averaged at every outer step.
//
// - The pseudo-gradient goes through the gradient hook ([compress]: any codec with its
//   error-feedback memory, PowerSGD, auto) as one bucket holding every parameter, so its
//   payload and compression ratio are counted like a gradient's; traffic phase "outer".
// - With outer_lr 1 and momentum 0 the outer step is θ − average(θ − θ_r) = average(θ_r): local
//   SGD with the same period, up to float rounding.
// - An outer step follows optimizer step s (0-based) when s + 1 is a multiple of `period`; a
//   partial last period gets one more at the end, so every rank holds θ. θ, m and the step
//   count are the strategy's checkpoint section (each rank's inner weights and optimizer state
//   are in its own checkpoint), so a resume mid-period continues bit for bit.
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
};

// Throws ConfigError naming the `diloco.*` key.
// The [diloco] config section: every key declared once (src/parallel/diloco_spec.cpp).
schema::Section<DilocoOptions> dilocoSection();
void validateDilocoOptions(const DilocoOptions& o);

std::unique_ptr<Strategy> makeDilocoStrategy(const StrategyContext& ctx, const DilocoOptions& o);

}  // namespace lowcomm::parallel
