// TrainingRun's checkpoints: resuming from one, writing one, and the final model_state.pt.
#include <string>
#include <tuple>
#include <vector>

#include "resume_check.h"
#include "training_run.h"
#include "lowcomm/base/error.h"

namespace lowcomm::train {

// The checkpoint resumeStep() chose, checked on every rank against its own file (checkpoint
// directories may be per host).
void TrainingRun::resumeOrStart() {
  state_.config_hash = resumeHash(cfg_, n_);
  state_.schedule_hash = resumeScheduleHash(cfg_);
  resumed_ = resume_step_ >= 0;
  if (!resumed_) {
    loader_->startEpoch(0);
    return;
  }
  const std::string file = checkpointFile(ckpt_dir_.string(), resume_step_, rank_);
  const auto bounds = shard_ ? shard_->boundaries() : std::vector<int>{};
  const TrainState want = state_;
  state_ = loadResumed(*world_, file, gridRecord(grid_), shard_ ? &bounds : nullptr, [&] {
    if (auto read = strategy_->stateReader()) loadStrategySection(file, read);
    TrainState st = loadCheckpoint(file, *model_, *optimizer_, strategy_->hook());
    if (st.config_hash != want.config_hash)
      throw ConfigError("--resume: '" + file + "' was written with a different model, data, batch, seed, world size or compress codec");
    if (st.schedule_hash != 0 && st.schedule_hash != want.schedule_hash)
      throw ConfigError("--resume: '" + file + "' was written with another optimizer.lr or schedule (name, warmup_steps, "
                        "step_size, gamma, min_lr); only schedule.max_steps and schedule.epochs may change on resume");
    st.schedule_hash = want.schedule_hash;
    return st;
  });
  checkResumedAlike(*world_, strategy_->replicas(), state_.step, resume_step_, *model_, file);
  loader_->seek(state_.position);
}

void TrainingRun::saveAt(int64_t step) {
  TrainState st = state_;
  st.step = step;
  st.position = loader_->position();
  st.elapsed_s = since(t_start_);
  st.grid = gridRecord(grid_);
  if (shard_) for (int b : shard_->boundaries()) st.stage_bounds.push_back(b);
  auto writer = strategy_->stateWriter();  // first: it may wait for communication in flight, whose bytes count
  std::tie(st.bytes_sent, st.bytes_recv) = bytes();
  saveCheckpoint(checkpointFile(ckpt_dir_.string(), step, rank_), *model_, *optimizer_, st, strategy_->hook(),
                 std::move(writer));
  killIfDue("checkpoint");
  world_->barrier();  // every rank's file is complete before `latest` names it
  if (rank_ == 0) writeLatest(ckpt_dir_.string(), step, opts_.job_id);
  if (jsonl_) jsonl_->write({{"type", "checkpoint"}, {"step", step}, {"time_s", since(t_start_)}});
  if (cfg_.checkpoint.keep_last > 0) {
    world_->barrier();  // `latest` names the new checkpoint before any rank removes an old one
    pruneCheckpoints(ckpt_dir_.string(), rank_, step, cfg_.checkpoint.keep_last);
  }
}

// model_state.pt: the full model, gathered from the tensor-parallel shards (collective).
void TrainingRun::saveFullModel() {
  std::shared_ptr<nn::Model> full = model_;
  if (shard_) {
    full = nn::makeModel(modelSpec());
    shard_->gatherInto(*full);
  }
  if (rank_ == 0) savePythonStateDict((out_dir_ / "model_state.pt").string(), *full);
}

}  // namespace lowcomm::train
