#include "lowcomm/train/checkpoint_schedule.h"

#include <algorithm>
#include <cmath>

namespace lowcomm::train {

CheckpointSchedule::CheckpointSchedule(int64_t every_steps, double every_minutes, int64_t first_step,
                                       int64_t total_steps, double first_s)
    : every_steps_(every_steps),
      every_s_(every_minutes * 60.0),
      total_(total_steps),
      probe_step_(every_minutes > 0 ? first_step + kProbeSteps : -1),
      base_step_(first_step),
      base_s_(first_s) {}

bool CheckpointSchedule::due(comm::Communicator& world, int64_t step, double elapsed_s) {
  if (step >= total_) return false;  // the final checkpoint is written at the end anyway
  bool now = every_steps_ > 0 && step % every_steps_ == 0;
  if (every_s_ > 0 && (step == probe_step_ || step == next_timed_)) {
    now = now || step == next_timed_;
    int64_t next = 0;
    if (world.rank() == 0) {
      const double rate = static_cast<double>(step - base_step_) / std::max(1e-9, elapsed_s - base_s_);
      next = step + std::max<int64_t>(1, std::llround(std::min(every_s_ * rate, 1e15)));
    }
    const std::string saved = world.phase();
    world.setPhase("checkpoint");
    world.broadcast(&next, 1, comm::DType::i64, 0);
    world.setPhase(saved);
    next_timed_ = next;
    base_step_ = step;
    base_s_ = elapsed_s;
  }
  return now;
}

}  // namespace lowcomm::train
