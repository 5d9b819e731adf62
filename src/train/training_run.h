// One training run on this rank (private to lowcomm_train): the loop around a parallel::Strategy.
// The strategy decides everything that depends on how ranks cooperate; this class owns the data,
// the schedule, the metrics and the checkpoint files. Its members are defined by job:
//   run_setup.cpp        data, model, grid, optimizer and strategy (the constructor)
//   run_checkpoints.cpp  resuming from a checkpoint, writing checkpoints and model_state.pt
//   trainer.cpp          the loop: steps, evaluations, the end of the run
//   run_metrics.cpp      metrics.jsonl and the progress line
//   run_summary.cpp      the summary (collective)
//   run_elastic.cpp      --elastic: joining, healing after a membership change, adopted shards
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dir_lock.h"
#include "evaluate.h"
#include "stage_cut.h"
#include "lowcomm/base/trace.h"
#include "lowcomm/comm/communicator.h"
#include "lowcomm/compress/compressor.h"
#include "lowcomm/data/dataset.h"
#include "lowcomm/data/loader.h"
#include "lowcomm/nn/models.h"
#include "lowcomm/parallel/grid.h"
#include "lowcomm/parallel/pipeline.h"
#include "lowcomm/parallel/sharded_model.h"
#include "lowcomm/parallel/strategy.h"
#include "lowcomm/train/checkpoint.h"
#include "lowcomm/train/config.h"
#include "lowcomm/train/metrics.h"
#include "lowcomm/train/optim.h"
#include "lowcomm/train/trainer.h"

namespace lowcomm::train {

// One worker of fault.kill (run_elastic.cpp): slot, incarnation, where, step (-1: any).
struct KillPoint {
  int slot = -1, incarnation = 0;
  std::string where;
  int64_t step = -1;
};
// ConfigError naming fault.kill unless `spec` is SLOT[.INCARNATION]:WHERE[:STEP],...
std::vector<KillPoint> parseKills(const std::string& spec);
// --elastic: what a membership change looks like to the loop (an abort, a dead peer's closed
// sockets, a peer that stopped answering): it heals; anything else stands.
bool healable(const Error& e);

class TrainingRun {
 public:
  // Builds everything, then resumes (or starts) and opens the metrics: collective over `world`.
  TrainingRun(const TrainConfig& cfg, std::shared_ptr<comm::Communicator> world, const TrainOptions& opts);
  ~TrainingRun() {
    if (world_) world_->setTrace(nullptr);  // the world outlives the run and its trace
  }
  // Trains to the end, evaluates, saves the final checkpoint and model_state.pt, and returns the
  // summary (collective).
  nlohmann::json run();
  nlohmann::json finishRun();

 private:
  using Clock = std::chrono::steady_clock;
  static double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

  // Sums over the steps of one logging window.
  struct Window {
    double loss = 0, compute = 0, time = 0;
    int64_t steps = 0;
    std::map<std::string, int64_t> phases;  // phase label -> steps
  };

  void build();
  void buildModel();
  data::Augment augmentation() const;
  // The strategy over grid_ (after a membership change: no initial broadcast, the heal agrees
  // on the state instead). Compressors are reused, so error-feedback memories survive a heal.
  void makeStrategy(bool broadcast_initial);
  nn::ModelSpec modelSpec() const;
  bool lm() const { return train_.task == data::Task::language_model; }
  void resumeOrStart();
  void openMetrics();
  void trainStep();
  // --elastic (run_elastic.cpp).
  bool elasticStep();  // one loop iteration's work under --elastic; false when it was aborted and healed
  void checkElasticScope();
  void joinAsReplacement();
  void joinAndAgree(int64_t after);
  void startElastic();
  void heal(const std::string& why);
  void useEpoch(const ElasticEpoch& e);
  void syncState();
  std::string transferState();
  void loadTransferred(const std::string& bytes, const std::string& from);
  void adoptShards();  // the empty slots' shards this member computes (DDP)
  void killIfDue(const char* where) const;  // fault.kill
  // heals, and step_efficiency: steps done / the steps `wall` allows at the median step time
  // with every slot a member.
  nlohmann::json elasticJson(double wall) const;
  void logStep(const std::string& phase);
  void evalNow(int64_t epoch, bool final = false);
  void saveAt(int64_t step);
  nlohmann::json summary(double wall);
  double compressionRatio() {
    const auto* hook = strategy_->hook();
    return hook ? hook->compressionRatio() : 1.0;
  }
  std::pair<int64_t, int64_t> bytes() const;
  nlohmann::json withBytes(nlohmann::json j) const;
  nlohmann::json parallelJson() const;
  nlohmann::json pipelineJson() const;
  void saveFullModel();

  const TrainConfig& cfg_;
  std::shared_ptr<comm::Communicator> world_;  // with --elastic: the current epoch's
  const TrainOptions& opts_;
  int rank_, n_;         // in world_ (-1, 0 for a replacement before it joins)
  int slot_, slots_;     // the data shard and the shard count: rank_, n_ without --elastic
  const std::filesystem::path out_dir_, ckpt_dir_;
  data::Dataset train_, test_;
  parallel::Grid grid_;  // the strategy runs on grid_.dp_comm
  std::shared_ptr<nn::Model> model_;
  std::shared_ptr<parallel::ShardedModel> shard_;  // model_ when parallel.tp or parallel.pp > 1
  std::unique_ptr<parallel::Pipeline> pipeline_;   // parallel.pp > 1
  int64_t full_parameters_ = 0;  // of the whole model (a tensor-parallel rank holds a part)
  StageCut cut_;                 // parallel.pp > 1: where the stages are cut, and why
  Trace trace_;
  std::vector<std::shared_ptr<compress::Compressor>> compressors_;
  size_t next_compressor_ = 0;  // makeStrategy hands compressors_ out again from here
  std::unique_ptr<data::BatchLoader> loader_;
  int64_t accum_ = 1, per_epoch_ = 1, total_ = 0;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<parallel::Strategy> strategy_;
  Criterion criterion_;

  std::unique_ptr<DirLocks> locks_;  // held for the whole run
  int64_t resume_step_ = -1;         // the checkpoint this run continues from (-1: a fresh start)
  TrainState state_;
  bool resumed_ = false;
  std::unique_ptr<JsonlWriter> jsonl_;
  Progress progress_;
  Clock::time_point t_start_;
  int64_t sent_before_ = 0, recv_before_ = 0;
  Eval last_eval_;
  int64_t last_eval_step_ = -1, step_ = 0;
  Window win_;
  double total_compute_ = 0, total_step_s_ = 0, last_lr_ = 0;
  int64_t peak_activation_bytes_ = 0;  // the largest heap growth over a forward (no pipeline)
  nlohmann::json memory_;

  // --elastic
  std::shared_ptr<ElasticMembership> elastic_;
  int64_t epoch_ = 0;
  std::vector<int> members_;
  // Shards of empty slots this member computes each step, with their loaders (DDP: every step
  // averages all `slots_` shards whatever the membership).
  std::map<int, std::unique_ptr<data::BatchLoader>> adopted_;
  struct Heal {
    int64_t epoch;
    std::string why;
    double seconds;
    int64_t bytes;     // state received (this rank)
    int64_t step;      // the step training continued from
  };
  std::vector<Heal> heals_;
  int64_t steps_aborted_ = 0;  // iterations whose work a membership change threw away
  std::vector<double> full_step_s_;  // step times with every slot a member (step efficiency)
  std::vector<KillPoint> kills_;     // fault.kill
};

}  // namespace lowcomm::train
