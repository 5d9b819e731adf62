// `lowcomm train --elastic`: the training run's membership (lowcomm/train/elastic.h) over this
// worker's runtime::Worker (its store, the launcher's epochs, the membership monitor).
#pragma once

#include <memory>

#include "lowcomm/runtime/worker.h"
#include "lowcomm/train/elastic.h"

namespace lowcomm::cli {

// `w` must have a membership monitor (LOWCOMM_ELASTIC=1) and outlive the result.
std::shared_ptr<train::ElasticMembership> makeWorkerMembership(runtime::Worker& w);

}  // namespace lowcomm::cli
