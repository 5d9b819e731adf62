#include "all_ranks.h"

#include <vector>

#include "lowcomm/base/error.h"

namespace lowcomm::train {

void throwIfAnyRankFailed(comm::Communicator& world, std::exception_ptr mine, const std::string& what) {
  const int64_t here = mine ? world.rank() : -1;
  std::vector<int64_t> failed(world.size());
  world.allgather(&here, failed.data(), 1, comm::DType::i64);
  if (mine) std::rethrow_exception(mine);
  for (int64_t f : failed)
    if (f >= 0) throw ConfigError(what + ": rank " + std::to_string(f) + " failed (its error says why)");
}

}  // namespace lowcomm::train
