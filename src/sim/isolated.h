// Runs a function in a child process (private to the sim layer): SimGrid keeps one engine per
// process, so every simulation gets a fresh one.
#pragma once

#include <functional>
#include <string>

namespace lowcomm::sim {

// Returns what f returned in the child. An exception there comes back as Error with its message
// (ConfigError stays a ConfigError); a crash as Error naming the signal.
std::string runIsolated(const std::function<std::string()>& f);

}  // namespace lowcomm::sim
