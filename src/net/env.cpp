#include "lowcomm/net/env.h"

#include <cstdlib>

#include "lowcomm/base/error.h"

namespace lowcomm::net {

namespace {

std::optional<int> intVar(const GetEnv& getenv, const char* name) {
  const char* v = getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  // Slurm writes e.g. "2(x3)" for SLURM_NTASKS_PER_NODE; the leading integer is what counts.
  if (end == v || x < 0 || x > (1 << 24))
    throw ConfigError(std::string("environment variable ") + name + "='" + v + "' is not a valid non-negative integer");
  return static_cast<int>(x);
}

struct Names {
  const char* source;
  const char* rank;
  const char* world;
  const char* local_rank;
  const char* local_world;
};

}  // namespace

std::optional<WorkerEnv> detectWorkerEnv(const GetEnv& getenv) {
  static const Names kNames[] = {
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
      {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
      {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
  };
  for (const auto& n : kNames) {
    auto rank = intVar(getenv, n.rank);
    auto world = intVar(getenv, n.world);
    if (!rank && !world) continue;
    if (!rank || !world)
      throw ConfigError(std::string("environment: ") + (rank ? n.world : n.rank) + " is missing while " +
                        (rank ? n.rank : n.world) + " is set");
    if (*world < 1 || *rank >= *world)
      throw ConfigError(std::string("environment: ") + n.rank + "=" + std::to_string(*rank) + " is not below " +
                        n.world + "=" + std::to_string(*world));
    WorkerEnv e;
    e.source = n.source;
    e.rank = *rank;
    e.world = *world;
    e.local_rank = intVar(getenv, n.local_rank).value_or(*rank);
    e.local_world = intVar(getenv, n.local_world).value_or(*world);
    if (e.local_world < 1 || e.local_rank >= e.local_world)
      throw ConfigError(std::string("environment: ") + n.local_rank + "=" + std::to_string(e.local_rank) +
                        " is not below " + n.local_world + "=" + std::to_string(e.local_world));
    if (const char* a = getenv("MASTER_ADDR"); a && *a) e.master_addr = a;
    if (auto p = intVar(getenv, "MASTER_PORT")) {
      if (*p < 1 || *p > 65535) throw ConfigError("environment: MASTER_PORT=" + std::to_string(*p) + " is not a TCP port");
      e.master_port = *p;
    }
    return e;
  }
  return std::nullopt;
}

std::optional<WorkerEnv> detectWorkerEnv() {
  return detectWorkerEnv([](const char* n) -> const char* { return std::getenv(n); });
}

}  // namespace lowcomm::net
