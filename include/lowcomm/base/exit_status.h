// Exit statuses of lowcomm processes, one per error class, declared here only.
//
// Contract: main() exits with exitStatusFor(the error that ended it); a launcher reads a
// worker's status back with exitStatusName() / exitStatusHeals() to say what ended the worker
// and to restart only what a restart can heal (a lost peer, a timeout), never an error that
// would recur (bad config, bad data, a corrupt checkpoint). Statuses of other programs run under
// the launcher are read with the same table.
#pragma once

#include <exception>
#include <string>

#include "lowcomm/base/error.h"

namespace lowcomm {

enum ExitStatus : int {
  kExitOk = 0,
  kExitError = 1,       // an error of no known class (LibTorch, std::bad_alloc, ...)
  kExitConfig = 2,      // ConfigError: bad user input (config key, option, environment)
  kExitData = 3,        // DataError: a malformed data file or payload
  kExitCheckpoint = 4,  // DataError about a checkpoint (corrupt, truncated, of another run)
  kExitIo = 5,          // IoError: a file could not be read or written (disk full, permissions)
  kExitAuth = 6,        // AuthError: a process that does not belong to the job
  kExitMismatch = 7,    // MismatchError: ranks called different collectives (a program bug)
  kExitPeerLost = 8,    // PeerError: a peer died or closed its connection
  kExitTimeout = 9,     // TimeoutError: an operation missed its deadline
};

// A checkpoint's DataErrors name it first ("checkpoint '<path>' ..."), as do the resume
// checks ("--resume: ..."): checkpoint.cpp and resume_check.cpp throw no type of their own.
inline bool isCheckpointError(const DataError& e) {
  const std::string what = e.what();
  return what.rfind("checkpoint '", 0) == 0 || what.rfind("--resume: ", 0) == 0;
}

inline int exitStatusFor(const std::exception& e) {
  if (dynamic_cast<const ConfigError*>(&e)) return kExitConfig;
  if (const auto* d = dynamic_cast<const DataError*>(&e)) return isCheckpointError(*d) ? kExitCheckpoint : kExitData;
  if (dynamic_cast<const IoError*>(&e)) return kExitIo;
  if (dynamic_cast<const AuthError*>(&e)) return kExitAuth;
  if (dynamic_cast<const MismatchError*>(&e)) return kExitMismatch;
  if (dynamic_cast<const PeerError*>(&e)) return kExitPeerLost;
  if (dynamic_cast<const TimeoutError*>(&e)) return kExitTimeout;
  return kExitError;
}

// "config error", "peer lost", ...; nullptr for a status outside the table.
inline const char* exitStatusName(int status) {
  switch (status) {
    case kExitError: return "error";
    case kExitConfig: return "config error";
    case kExitData: return "data error";
    case kExitCheckpoint: return "corrupt checkpoint";
    case kExitIo: return "I/O error";
    case kExitAuth: return "authentication error";
    case kExitMismatch: return "collective mismatch";
    case kExitPeerLost: return "peer lost";
    case kExitTimeout: return "timeout";
    default: return nullptr;
  }
}

// Whether the same job started again may get past it: a peer that died or a deadline missed
// under load may not recur; every other class fails the same way again.
inline bool exitStatusHeals(int status) { return status == kExitPeerLost || status == kExitTimeout; }

}  // namespace lowcomm
