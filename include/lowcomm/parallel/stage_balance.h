// Pipeline stages balanced by measured compute time instead of parameter count
// (parallel.balance = "time"). Parameters are a poor proxy for a transformer's time: the
// embedding holds vocab x dim + seq_len x dim weights but costs a lookup, attention costs
// seq_len^2 x dim per sequence that no parameter counts, the head's softmax over the vocabulary
// likewise. So each unit [embedding, block 0, ..., block L-1, head] is timed alone, and
// stageBounds() cuts the units by those times.
//
// Contract:
// - measureUnitTimes(model, micro_batch, reps): `model` is one stage holding every unit (one
//   pipeline stage; tensor parallelism of any size, whose ranks all call it). For each unit in
//   order: one untimed warm-up, then `reps` timed rounds of that unit's forward and backward on a
//   micro-batch of `micro_batch` sequences of spec().seq_len tokens (random tokens, activations
//   and output gradients from a generator seeded with 0; the head's backward starts from its
//   loss against random targets, as on the last stage). Returns each unit's median in
//   microseconds, at least 1. The model's .grad is left as it was; the global RNG is untouched.
//   A unit stops after fewer rounds (at least one) once another would take it past
//   `unit_budget_s` seconds, warm-up included; `on_unit(u, us, rounds)` runs as each unit's time
//   is known.
// - measuredUnitTimes(full, world, micro_batch, reps, unit_budget_s): collective over `world`.
//   World rank 0 times a one-rank copy of `full` (tp = pp = 1, built on a split() of world
//   holding only itself) and broadcasts each unit's time as soon as it has it, so the other
//   ranks never wait longer than one unit's measurement (keep `unit_budget_s` well inside the
//   communicator's timeout); every rank returns rank 0's times. A failure on rank 0 reaches the
//   others as an Error naming parallel.balance and the unit (rank 0 rethrows its own). `full`
//   is unchanged.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "lowcomm/comm/communicator.h"
#include "lowcomm/nn/models.h"
#include "lowcomm/parallel/sharded_model.h"

namespace lowcomm::parallel {

std::vector<int64_t> measureUnitTimes(ShardedModel& model, int64_t micro_batch, int reps,
                                      const std::function<void(int unit, int64_t us, int rounds)>& on_unit = {},
                                      double unit_budget_s = 1e30);

std::vector<int64_t> measuredUnitTimes(const nn::Model& full, comm::Communicator& world, int64_t micro_batch,
                                       int reps, double unit_budget_s = 1e30);

}  // namespace lowcomm::parallel
