#include "lowcomm/net/env.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "lowcomm/base/error.h"

namespace lowcomm::net {

namespace {

// Slurm writes e.g. "2(x3)" (2 tasks on each of 3 nodes) for SLURM_NTASKS_PER_NODE.
bool slurmRepeat(const char* rest) {
  if (rest[0] != '(' || rest[1] != 'x' || !std::isdigit(static_cast<unsigned char>(rest[2]))) return false;
  const char* p = rest + 2;
  while (std::isdigit(static_cast<unsigned char>(*p))) ++p;
  return p[0] == ')' && p[1] == '\0';
}

// The whole value must be a decimal integer ("1x" or " 1" is an error, not 1).
std::optional<int> intVar(const GetEnv& getenv, const char* name) {
  const char* v = getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  const bool digits_first = std::isdigit(static_cast<unsigned char>(v[0]));
  const bool rest_ok = *end == '\0' || (std::strcmp(name, "SLURM_NTASKS_PER_NODE") == 0 && slurmRepeat(end));
  if (!digits_first || end == v || !rest_ok || errno == ERANGE || x < 0 || x > (1 << 24))
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

// Without MASTER_ADDR the rendezvous goes to 127.0.0.1. torchrun and lowcomm launch always set
// it; Slurm and MPI do not, and 127.0.0.1 is right only when the launcher says that every rank
// runs on this host.
void requireLocalJob(const WorkerEnv& e, const Names& n, bool local_world_given) {
  if (e.source == "torchrun" || e.world == 1 || (local_world_given && e.local_world == e.world)) return;
  throw ConfigError("environment: MASTER_ADDR is not set in a " + e.source + " job of " + std::to_string(e.world) +
                    " ranks (" + n.local_world +
                    (local_world_given ? "=" + std::to_string(e.local_world) : std::string(" is not set")) +
                    "): export MASTER_ADDR=<host of rank 0> on every rank");
}

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
    else requireLocalJob(e, n, intVar(getenv, n.local_world).has_value());
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

int siteFromEnv(const GetEnv& getenv) { return intVar(getenv, "LOWCOMM_SITE").value_or(-1); }
int siteFromEnv() {
  return siteFromEnv([](const char* n) -> const char* { return std::getenv(n); });
}

}  // namespace lowcomm::net
