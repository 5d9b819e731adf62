#include "lowcomm/train/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <vector>

#include "lowcomm/base/error.h"
#include "lowcomm/train/checkpoint.h"

namespace lowcomm::train {

JsonlWriter::JsonlWriter(const std::string& path, bool append)
    : out_(path, append ? std::ios::app : std::ios::trunc), path_(path) {
  if (!out_) throw ConfigError("cannot write metrics file '" + path + "'");
}

void JsonlWriter::write(const nlohmann::json& record) {
  out_ << record.dump() << "\n";
  out_.flush();
  if (!out_)  // a full disk is an error, not a silent gap in the metrics
    throw IoError("cannot write metrics file '" + path_ + "': " + std::strerror(errno ? errno : EIO));
}

int64_t truncateMetricsAfterCheckpoint(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return step;  // nothing written yet
  std::vector<std::string> lines;
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) continue;  // a line cut short by the crash
    lines.push_back(line);
    records.push_back(std::move(j));
  }
  size_t keep = lines.size();
  bool marked = false;
  for (size_t i = records.size(); i-- > 0;)
    if (records[i].value("type", "") == "checkpoint" && records[i].value("step", int64_t{-1}) == step) {
      keep = i + 1, marked = true;
      break;
    }
  std::string out;
  for (size_t i = 0; i < keep; ++i)
    if (marked || !records[i].contains("step") || records[i]["step"].get<int64_t>() <= step) out += lines[i] + "\n";
  int64_t reached = step;
  for (const auto& r : records)
    if (r.value("type", "") == "step") reached = std::max(reached, r.value("step", step));
  writeFileAtomically(path, out);
  return reached;
}

nlohmann::json resumeRecords(const std::string& path) {
  nlohmann::json out = nlohmann::json::array();
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && j.value("type", "") == "resume") out.push_back(std::move(j));
  }
  return out;
}

Progress::Progress(bool enabled) : enabled_(enabled), tty_(::isatty(STDOUT_FILENO) != 0) {}

void Progress::update(const std::string& line) {
  if (!enabled_) return;
  if (tty_) {
    std::printf("\r\033[K%s", line.c_str());
    open_ = true;
  } else {
    std::printf("%s\n", line.c_str());
  }
  std::fflush(stdout);
}

void Progress::finish() {
  if (open_) std::printf("\n");
  open_ = false;
  std::fflush(stdout);
}

nlohmann::json phasesJson(const comm::TrafficSnapshot& s) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [phase, c] : s.by_phase)
    j[phase.empty() ? "other" : phase] = {{"sent", c.bytes_sent}, {"recv", c.bytes_recv}};
  return j;
}

std::vector<const char*> linkClasses(bool sites) {
  if (sites) return {comm::kIntraNode, comm::kInterNode, comm::kInterSite};
  return {comm::kIntraNode, comm::kInterNode};
}

nlohmann::json linksJson(const comm::TrafficSnapshot& s, bool sites) {
  nlohmann::json j = nlohmann::json::object();
  for (const char* link : linkClasses(sites)) {
    const auto it = s.by_link.find(link);
    const comm::TrafficCount c = it == s.by_link.end() ? comm::TrafficCount{} : it->second;
    j[link] = {{"sent", c.bytes_sent}, {"recv", c.bytes_recv}};
  }
  return j;
}

nlohmann::json phaseLinksJson(const comm::TrafficSnapshot& s, bool sites) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [phase, links] : s.by_phase_link) {
    nlohmann::json p = nlohmann::json::object();
    for (const char* link : linkClasses(sites)) p[link] = 0;
    for (const auto& [link, c] : links) p[link] = c.bytes_sent;
    j[phase.empty() ? "other" : phase] = p;
  }
  return j;
}

void writeTimeline(comm::Communicator& world, const Trace& trace, const std::string& path) {
  // Align on rank 0's origin: steady_clock is the system-wide monotonic clock.
  int64_t origin = std::chrono::duration_cast<std::chrono::nanoseconds>(trace.origin().time_since_epoch()).count();
  int64_t origin0 = origin;
  world.broadcast(&origin0, 1, comm::DType::i64, 0);
  const double shift_us = static_cast<double>(origin - origin0) / 1000.0;
  nlohmann::json events = nlohmann::json::array();
  for (const auto& e : trace.events()) {
    nlohmann::json ev = {{"name", e.name}, {"cat", e.cat}, {"ph", "X"}, {"pid", world.rank()}, {"tid", e.lane},
                         {"ts", e.start_us + shift_us}, {"dur", e.dur_us}};
    if (!e.args.empty()) ev["args"] = e.args;
    events.push_back(std::move(ev));
  }
  const std::string mine = events.dump();
  std::vector<size_t> sizes(world.size());
  size_t n = mine.size();
  world.allgather(&n, sizes.data(), 1, comm::DType::i64);
  size_t total = 0;
  for (size_t s : sizes) total += s;
  std::string all(total, '\0');
  world.allgatherv(mine.data(), mine.size(), all.data(), sizes, comm::DType::u8);
  if (world.rank() != 0) return;
  nlohmann::json out = {{"traceEvents", nlohmann::json::array()}, {"displayTimeUnit", "ms"}};
  size_t at = 0;
  for (int r = 0; r < world.size(); ++r) {
    auto part = nlohmann::json::parse(all.substr(at, sizes[r]));
    at += sizes[r];
    out["traceEvents"].push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", r}, {"args", {{"name", "rank " + std::to_string(r)}}}});
    out["traceEvents"].push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", r}, {"tid", 0}, {"args", {{"name", "compute"}}}});
    out["traceEvents"].push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", r}, {"tid", 1}, {"args", {{"name", "communication"}}}});
    for (auto& ev : part) out["traceEvents"].push_back(std::move(ev));
  }
  std::ofstream f(path);
  if (!f) throw ConfigError("cannot write timeline '" + path + "'");
  f << out.dump() << "\n";
  f.close();
  if (!f) throw IoError("cannot write timeline '" + path + "': " + std::strerror(errno ? errno : EIO));
}

}  // namespace lowcomm::train
