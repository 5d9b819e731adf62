// Hand-written timelines for the sim tests (the format `lowcomm train --timeline` writes).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>

namespace lowcomm::sim::fixture {

inline std::string tempPath(const std::string& name) {
  return (std::string(::testing::TempDir()) + "/" + name + "_" + std::to_string(::getpid()) + ".json");
}

inline nlohmann::json event(int rank, int lane, const std::string& name, const std::string& cat, double ts, double dur,
                     nlohmann::json args = nlohmann::json::object()) {
  return {{"ph", "X"}, {"pid", rank}, {"tid", lane}, {"name", name}, {"cat", cat}, {"ts", ts}, {"dur", dur},
          {"args", args}};
}

inline void writeTrace(const std::string& path, const nlohmann::json& events) {
  std::ofstream(path) << nlohmann::json{{"traceEvents", events}}.dump();
}

// Two steps of a DDP-like rank: forward 10 ms, backward 20 ms (the bucket ready `ready_ms`
// into it), wait, optimizer 5 ms; the bucket's hook is one allreduce of `bytes`.
inline nlohmann::json ddpSteps(int ranks, uint64_t bytes, double ready_ms) {
  nlohmann::json ev = nlohmann::json::array();
  for (int r = 0; r < ranks; ++r) {
    double t = 1000;
    for (int s = 0; s < 2; ++s) {
      const double begin = t;
      ev.push_back(event(r, 0, "forward", "compute", t, 10000));
      t += 10000;
      ev.push_back(event(r, 0, "backward", "compute", t, 20000));
      const double ready = t + ready_ms * 1000;
      t += 20000;
      // As recorded: the bucket started when ready; its allreduce's duration does not matter.
      ev.push_back(event(r, 1, "bucket 0", "comm", ready, 3000, {{"queued_us", "0"}, {"bytes", std::to_string(bytes)}}));
      ev.push_back(event(r, 1, "allreduce", "collective", ready + 100, 2800,
                         {{"bytes", std::to_string(bytes)}, {"dtype", "f32"}, {"algo", "ring"}, {"segment", "1048576"}}));
      const double wait_end = std::max(t, ready + 3000);
      ev.push_back(event(r, 0, "wait for gradients", "wait", t, wait_end - t));
      t = wait_end;
      ev.push_back(event(r, 0, "optimizer", "compute", t, 5000));
      t += 5000;
      ev.push_back(event(r, 2, "ddp", "phase", begin, t - begin));
      t += 500;
    }
  }
  return ev;
}

}  // namespace lowcomm::sim::fixture
