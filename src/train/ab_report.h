// AB-training glue for the trainer (private to lowcomm_train): options from the config and the
// JSON records the metrics stream and the summary carry.
#pragma once

#include <nlohmann/json.hpp>

#include "lowcomm/parallel/ab_training.h"
#include "lowcomm/train/config.h"

namespace lowcomm::train {

// Step counts given as fractions are resolved against the run's total optimizer steps.
parallel::AbOptions abOptions(const TrainConfig& c, int64_t total_steps);
// Resume key: AB state only fits the same groups and sync mode ("" for other strategies).
std::string abResumeKey(const TrainConfig& c);
// {"type": "ab", "step", "event", "ranks": {layer: rank}, "model_size_fraction" (parameters now /
// full-rank parameters), "model_size_n_to_1", "compression_reference" (the reference's metric,
// LowRankModel::referenceCompression), "compression_reference_n_to_1"}.
nlohmann::json abEventJson(const parallel::AbEvent& e, const parallel::AbTraining& ab);
// The summary's "ab" block: groups, setup, steps per phase, the last SVD's ranks, both size
// metrics (as in abEventJson) and "layers": [{name, rows, cols, rank, full_rank, params_full,
// params_factors}].
nlohmann::json abSummaryJson(const parallel::AbTraining& ab);

}  // namespace lowcomm::train
