// Rank 0's outputs during training: the progress line, per-step and per-epoch JSONL records,
// and the Chrome-trace timeline gathered from every rank.
#pragma once

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lowcomm/base/trace.h"
#include "lowcomm/comm/communicator.h"

namespace lowcomm::train {

// JSONL stream (one object per line, flushed per line so a crash keeps what was written). A
// record that cannot be written (disk full, I/O error) is an IoError naming the file.
class JsonlWriter {
 public:
  explicit JsonlWriter(const std::string& path, bool append);
  void write(const nlohmann::json& record);

 private:
  std::ofstream out_;
  std::string path_;
};

// Resume from the checkpoint of `step`: drops every record written after that checkpoint (its
// {"type": "checkpoint", "step": step} record; in files from before those records, every record
// of a later step), so the resumed run does not repeat steps. Rewrites the file atomically.
// Returns the last step a "step" record reached before (>= `step`; `step` when none is later).
int64_t truncateMetricsAfterCheckpoint(const std::string& path, int64_t step);

// The {"type": "resume"} records of a metrics file, in order (an empty array when none).
nlohmann::json resumeRecords(const std::string& path);

// A single updating line on a terminal; plain lines otherwise.
class Progress {
 public:
  explicit Progress(bool enabled);
  void update(const std::string& line);
  void finish();

 private:
  bool enabled_, tty_, open_ = false;
};

// Collective: gathers every rank's events and rank 0 writes `path` as a Chrome trace
// (pid = rank, tid = lane). Times are aligned on the monotonic clock shared by the processes.
// A file that cannot be written whole is an IoError naming it.
void writeTimeline(comm::Communicator& world, const Trace& trace, const std::string& path);

// nlohmann::json of a traffic snapshot's phases: {phase: {"sent": b, "recv": b}}.
nlohmann::json phasesJson(const comm::TrafficSnapshot& s);
// {"intra-node": {"sent", "recv"}, "inter-node": {...}} (both keys always present), and
// "inter-site" too when `sites` (the ranks span sites: Communicator::topology().spansSites()).
nlohmann::json linksJson(const comm::TrafficSnapshot& s, bool sites = false);
// {phase: {"intra-node": sent, "inter-node": sent}} for every phase with traffic ("inter-site"
// as linksJson).
nlohmann::json phaseLinksJson(const comm::TrafficSnapshot& s, bool sites = false);
// The link classes those report: intra-node, inter-node, and inter-site when `sites`.
std::vector<const char*> linkClasses(bool sites);

}  // namespace lowcomm::train
