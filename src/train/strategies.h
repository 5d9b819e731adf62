// The registry of training strategies (private to lowcomm_train): `strategy.name` to the
// parallel::Strategy it builds, with the config translation each needs. A new strategy is a
// class in src/parallel plus one entry here.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lowcomm/parallel/strategy.h"
#include "lowcomm/train/config.h"

namespace lowcomm::train {

// The valid values of `strategy.name`.
std::vector<std::string> strategyNames();

// Builds cfg.strategy.name for a run of `total_steps` optimizer steps (collective over ctx.world).
std::unique_ptr<parallel::Strategy> makeStrategy(const TrainConfig& cfg, const parallel::StrategyContext& ctx,
                                                 int64_t total_steps);

// The part of the resume key that depends on the strategy: its state only fits a run with the
// same structure (e.g. AB's groups and sync mode). "" for strategies without such state.
std::string strategyResumeKey(const TrainConfig& cfg);

}  // namespace lowcomm::train
