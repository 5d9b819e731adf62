// Worker identity from the environment a launcher leaves: torchrun / lowcomm launch
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), Slurm
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE), Open MPI
// (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE) and PMI (PMI_RANK, PMI_SIZE).
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace lowcomm::net {

struct WorkerEnv {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source;  // "torchrun", "slurm", "openmpi", "pmi"
};

using GetEnv = std::function<const char*(const char*)>;

// Returns nullopt when no launcher variables are present. Throws ConfigError naming the
// variable when one is present but malformed (not entirely a decimal integer, rank >= world, ...)
// and when a Slurm/MPI/PMI job of several ranks has no MASTER_ADDR unless its local-size variable
// says that every rank is on this host (only then is the default 127.0.0.1 right).
std::optional<WorkerEnv> detectWorkerEnv(const GetEnv& getenv);
std::optional<WorkerEnv> detectWorkerEnv();  // from the process environment

// LOWCOMM_SITE: the site this rank runs in (set by `lowcomm launch` on a cluster with sites);
// -1 when unset or empty. ConfigError naming the variable when it is not a non-negative integer.
int siteFromEnv(const GetEnv& getenv);
int siteFromEnv();  // from the process environment

}  // namespace lowcomm::net
