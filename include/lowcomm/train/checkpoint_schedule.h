// When the trainer writes checkpoints: every `every_steps` steps and about every `every_minutes`
// minutes of training (the final checkpoint is written anyway). Ranks' clocks differ, so time is
// turned into steps that every rank agrees on: rank 0 measures the step rate and broadcasts the
// step of the next timed checkpoint, once after the first kProbeSteps steps and again at each
// timed checkpoint (one int64, in the traffic meter's "checkpoint" phase).
#pragma once

#include <cstdint>

#include "lowcomm/comm/communicator.h"

namespace lowcomm::train {

class CheckpointSchedule {
 public:
  static constexpr int64_t kProbeSteps = 20;

  // `first_step`: the step training starts (or resumes) from; `total_steps`: where it ends;
  // `first_s`: the elapsed time at `first_step`. Under --elastic every member builds it anew
  // after each heal (at the agreed step), so that all members probe at the same step.
  CheckpointSchedule(int64_t every_steps, double every_minutes, int64_t first_step, int64_t total_steps,
                     double first_s = 0);

  // Call on every rank after every step with the same `step` (collective at the probe step and
  // at timed checkpoints). `elapsed_s` is the time since training started; rank 0's is used.
  bool due(comm::Communicator& world, int64_t step, double elapsed_s);

  int64_t nextTimed() const { return next_timed_; }  // -1 until agreed (or when off)

 private:
  int64_t every_steps_;
  double every_s_;
  int64_t total_;
  int64_t probe_step_;
  int64_t next_timed_ = -1;
  int64_t base_step_;
  double base_s_ = 0;
};

}  // namespace lowcomm::train
