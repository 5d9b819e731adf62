// How the "lowcomm" torch.distributed backend joins its job: the guarantees `lowcomm train` gives
// its workers (lowcomm/runtime/worker.h), for processes that torch.distributed set up.
//
// Contract:
// - Job token: LOWCOMM_JOB_TOKEN (16 characters or more) is required in a job of several ranks.
//   LOWCOMM_INSECURE=1 runs without one: a fixed, public token stands in (nothing is then
//   authenticated) and every process prints a warning saying so to stderr once. Without either,
//   ConfigError naming both variables. A job of one rank without a token gets a random one.
// - Rendezvous: through lowcomm's authenticated store (lowcomm/net/rdzv_store.h), never through
//   torch's store. The job's global rank 0 hosts it at MASTER_ADDR:LOWCOMM_RDZV_PORT (default
//   MASTER_PORT + 1: torch's own TCPStore holds MASTER_PORT) from its first lowcomm group until
//   the process ends; every rank of every lowcomm group connects to it and proves the token, and
//   every pair of ranks proves it again (CommOptions::auth_token). A group's keys are namespaced
//   by the group name torch gave its PrefixStore (read from the object, not from the store) and
//   how many groups of that name this process made. A lowcomm group made before global rank 0
//   made one times out naming the address (rank 0 hosts the store only from then on).
// - Launcher watch: the process exits (status 1, one line on stderr) within a second of its
//   launcher's death: LOWCOMM_LAUNCHER_PID (lowcomm launch), else under torchrun
//   (TORCHELASTIC_RUN_ID set) the parent process, which is torchrun's agent.
#pragma once

#include <chrono>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "lowcomm/c10d/process_group.h"

namespace lowcomm::torchdist {

struct GroupSpec {
  std::string name;  // torch's group name
  int rank = 0, size = 1;                // in the group
  int global_rank = 0, global_size = 1;  // in the job (torch's default group)
  std::chrono::milliseconds timeout{0};  // rendezvous and every operation; 0 = CommOptions' default
};

// The group name torch.distributed gave the PrefixStore it hands a backend's creator; ConfigError
// when `store` is not such a PrefixStore.
std::string torchGroupName(const c10::intrusive_ptr<c10d::Store>& store);

// The token the backend uses (see above); warns once under LOWCOMM_INSECURE=1.
std::string backendJobToken(int global_size);

// Checks the arguments (ConfigError naming one), starts the launcher watch and, on global rank 0,
// the store, then makes the group through the store.
c10::intrusive_ptr<ProcessGroupLowcomm> createAuthenticatedGroup(const GroupSpec& g);

}  // namespace lowcomm::torchdist
