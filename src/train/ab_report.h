// AB-training glue for the trainer (private to lowcomm_train): options from the config and the
// JSON records the metrics stream and the summary carry.
#pragma once

#include <nlohmann/json.hpp>

#include "lowcomm/parallel/ab_training.h"
#include "lowcomm/train/config.h"

namespace lowcomm::train {

parallel::AbOptions abOptions(const TrainConfig& c);
// Resume key: AB state only fits the same groups and sync mode ("" for other strategies).
std::string abResumeKey(const TrainConfig& c);
// {"type": "ab", "step", "event", "ranks": {layer: rank}, "compression", "compression_n_to_1"}.
nlohmann::json abEventJson(const parallel::AbEvent& e, const parallel::AbTraining& ab);
// The summary's "ab" block.
nlohmann::json abSummaryJson(const parallel::AbTraining& ab);

}  // namespace lowcomm::train
