// Typed errors and the ENFORCE macro family used across every layer.
//
// Contract: every failure a user can cause (bad config, dead peer, timeout, malformed data)
// is thrown as one of these types with a message that names the problem (file, key, rank).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace lowcomm {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// An operation did not finish within its deadline.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A peer died, closed its connection or misbehaved. `rank()` names it (-1 when unknown).
class PeerError : public Error {
 public:
  PeerError(int rank, const std::string& what) : Error(what), rank_(rank) {}
  int rank() const { return rank_; }

 private:
  int rank_;
};

// The operation was aborted on purpose (Communicator::abort, e.g. a membership change): the
// communicator is unusable, its work is to be redone on the next one. Not a peer's fault.
class AbortedError : public Error {
 public:
  using Error::Error;
};

// Ranks called different collectives (op, count, dtype, root) at the same point.
class MismatchError : public Error {
 public:
  using Error::Error;
};

// A process could not prove the job's token (or a server could not): it does not belong to the job.
class AuthError : public Error {
 public:
  using Error::Error;
};

// Bad user input: config key, command-line option, environment variable.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A file could not be written or read (disk full, permissions, an I/O error); names the file.
class IoError : public Error {
 public:
  using Error::Error;
};

// Malformed or corrupt data: files, payloads, checkpoints.
class DataError : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] void throwEnforce(const char* file, int line, const char* cond, const std::string& msg);

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace lowcomm

// LC_ENFORCE(cond, parts...): throws lowcomm::Error("file:line: check `cond` failed: parts").
#define LC_ENFORCE(cond, ...)                                                              \
  do {                                                                                     \
    if (!(cond))                                                                           \
      ::lowcomm::detail::throwEnforce(__FILE__, __LINE__, #cond,                           \
                                      ::lowcomm::detail::concat("", ##__VA_ARGS__));       \
  } while (0)

// Binary forms print both operands.
#define LC_ENFORCE_OP(a, op, b, ...)                                                       \
  do {                                                                                     \
    const auto& lc_a_ = (a);                                                               \
    const auto& lc_b_ = (b);                                                               \
    if (!(lc_a_ op lc_b_))                                                                 \
      ::lowcomm::detail::throwEnforce(                                                     \
          __FILE__, __LINE__, #a " " #op " " #b,                                           \
          ::lowcomm::detail::concat("(", lc_a_, " vs ", lc_b_, ") ", ##__VA_ARGS__));      \
  } while (0)
#define LC_ENFORCE_EQ(a, b, ...) LC_ENFORCE_OP(a, ==, b, ##__VA_ARGS__)
#define LC_ENFORCE_NE(a, b, ...) LC_ENFORCE_OP(a, !=, b, ##__VA_ARGS__)
#define LC_ENFORCE_LT(a, b, ...) LC_ENFORCE_OP(a, <, b, ##__VA_ARGS__)
#define LC_ENFORCE_LE(a, b, ...) LC_ENFORCE_OP(a, <=, b, ##__VA_ARGS__)
#define LC_ENFORCE_GE(a, b, ...) LC_ENFORCE_OP(a, >=, b, ##__VA_ARGS__)
