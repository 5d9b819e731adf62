// readTimeline (lowcomm/sim/replay.h): a `lowcomm train --timeline` trace into per-rank programs.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <type_traits>
#include <utility>

#include "lowcomm/base/error.h"
#include "lowcomm/comm/selector.h"
#include "lowcomm/sim/replay.h"

namespace lowcomm::sim {

namespace {

struct Ev {
  std::string name, cat;
  int lane = 0;
  double ts = 0, dur = 0;  // µs
  std::map<std::string, std::string> args;
  double end() const { return ts + dur; }
};

std::string arg(const Ev& e, const std::string& key, const std::string& fallback = "") {
  auto it = e.args.find(key);
  return it == e.args.end() ? fallback : it->second;
}

template <typename T>
std::vector<T> splitList(const std::string& s) {
  std::vector<T> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if constexpr (std::is_same_v<T, std::string>) out.push_back(item);
    else out.push_back(static_cast<T>(std::stoll(item)));
  }
  return out;
}

// "peer:bytes,peer:bytes" (lowcomm/comm/communicator.h, setTrace).
std::vector<std::pair<int, uint64_t>> peersOf(const std::string& s) {
  std::vector<std::pair<int, uint64_t>> out;
  for (const auto& item : splitList<std::string>(s)) {
    const auto colon = item.find(':');
    if (colon == std::string::npos) throw std::invalid_argument("no ':' in '" + item + "'");
    out.emplace_back(std::stoi(item.substr(0, colon)), std::stoull(item.substr(colon + 1)));
  }
  return out;
}

CallSpec p2pCallOf(const Ev& e, const std::string& path) {
  CallSpec c;
  c.op = e.name;
  if (!c.p2p()) throw ConfigError(path + ": point-to-point call '" + c.op + "' is not simulated");
  try {
    c.sends = peersOf(arg(e, "sends"));
    c.recvs = peersOf(arg(e, "recvs"));
    c.tag = static_cast<uint32_t>(std::stoul(arg(e, "tag", "0")));
  } catch (const std::logic_error&) {
    throw ConfigError(path + ": a '" + c.op + "' event has peers or a tag that are not numbers");
  }
  c.req = arg(e, "req");
  c.comm = arg(e, "comm");
  for (const auto& [peer, bytes] : c.sends) c.bytes += bytes;
  return c;
}

CallSpec callOf(const Ev& e, const std::string& path) {
  if (e.cat == "p2p") return p2pCallOf(e, path);
  CallSpec c;
  c.op = e.name;
  if (c.op != "allreduce" && c.op != "allgatherv" && c.op != "reduce_scatter" && c.op != "broadcast" &&
      c.op != "alltoall" && c.op != "barrier")
    throw ConfigError(path + ": collective '" + c.op + "' is not simulated");
  try {
    c.bytes = std::stoull(arg(e, "bytes", "0"));
    c.dtype = comm::parseDType(arg(e, "dtype", "u8"));
    if (c.op == "allreduce") c.algo = comm::parseAlgo(arg(e, "algo", "ring"));
    if (c.op == "allgatherv") c.algo = comm::parseAlgo(arg(e, "algo", "ring"));  // before hier: always the ring
    if (c.op == "broadcast") c.algo = comm::parseAlgo(arg(e, "algo", "tree"));  // before chain: always the tree
    c.segment_bytes = std::stoull(arg(e, "segment", std::to_string(1 << 20)));
    c.group_size = std::stoi(arg(e, "group_size", "0"));
    if (c.op == "allreduce") c.node_piece = std::stoull(arg(e, "node_piece", "0"));
    c.root = std::stoi(arg(e, "root", "0"));
    c.ranks = splitList<int>(arg(e, "ranks"));
    c.rank_bytes = splitList<uint64_t>(arg(e, "rank_bytes"));
  } catch (const std::logic_error&) {
    throw ConfigError(path + ": a '" + c.op + "' event has arguments that are not numbers");
  }
  return c;
}

std::map<int, std::vector<Ev>> readEvents(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw ConfigError("cannot read timeline '" + path + "'");
  nlohmann::json j;
  try {
    f >> j;
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError("timeline '" + path + "' is not JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array())
    throw ConfigError("'" + path + "' is not a Chrome trace (no traceEvents array)");
  std::map<int, std::vector<Ev>> by_rank;
  for (const auto& je : j["traceEvents"]) {
    if (je.value("ph", "") != "X") continue;
    Ev e;
    e.name = je.value("name", "");
    e.cat = je.value("cat", "");
    e.lane = je.value("tid", 0);
    e.ts = je.value("ts", 0.0);
    e.dur = je.value("dur", 0.0);
    if (je.contains("args"))
      for (const auto& [k, v] : je["args"].items()) e.args[k] = v.is_string() ? v.get<std::string>() : v.dump();
    by_rank[je.value("pid", 0)].push_back(std::move(e));
  }
  for (auto& [r, evs] : by_rank)
    std::stable_sort(evs.begin(), evs.end(), [](const Ev& a, const Ev& b) { return a.ts < b.ts; });
  return by_rank;
}

std::string unreplayable(const std::string& path, int rank, const Ev& e) {
  return path + ": rank " + std::to_string(rank) + " has a point-to-point " + e.name + " on lane " +
         std::to_string(e.lane) + " outside the compute thread and the communication thread's buckets, "
         "which the replay cannot place";
}

// A point on the compute thread's time line, in the order the replay meets it.
struct Point {
  double at = 0, end = 0;
  ReplayItem item;
};

// What a communication thread ran for one span of it (a bucket, an outer exchange): the calls
// of `calls` inside the span, the time between them as sleeps; the calls taken go into `used`.
std::vector<ReplayItem> spanItems(const Ev& span, const std::vector<const Ev*>& calls, RankProgram& prog,
                                  std::set<const Ev*>& used, const std::string& path) {
  std::vector<ReplayItem> items;
  double at = span.ts;
  for (const Ev* c : calls) {
    if (c->ts < span.ts || c->end() > span.end()) continue;
    if (c->ts > at) items.push_back({ReplayItem::sleep, (c->ts - at) * 1e-6});
    prog.calls.push_back(callOf(*c, path));
    items.push_back({ReplayItem::call, 0, static_cast<int>(prog.calls.size()) - 1});
    at = c->end();
    used.insert(c);
  }
  if (span.end() > at) items.push_back({ReplayItem::sleep, (span.end() - at) * 1e-6});
  return items;
}

// When a span of a communication thread was queued: its start less its "queued_us".
double queuedAt(const Ev& e) { return e.ts - std::stod(arg(e, "queued_us", "0")); }

// DiLoCo's exchanges on lane 3 and the compute thread's waits for them pair up in order (one
// wait each, in launch order). Those launched in [from, until) become launch_bg points and
// background programs, and the waits for them in [t0, t1] wait_bg points numbered among them.
// `from` and `until` are the starts of the first replayed step and of the one after the last:
// an exchange is queued at the end of a step, which one rank's clock puts just inside the step
// span and another's just after it; it belongs to that step on every rank (a rank that skipped
// an exchange its peers run would leave them waiting: a deadlock).
void addBackground(const std::vector<const Ev*>& exchanges, const std::vector<const Ev*>& waits,
                   const std::vector<const Ev*>& calls, double from, double until, double t0, double t1,
                   RankProgram& prog, std::vector<Point>& points, std::set<const Ev*>& used, const std::string& path) {
  size_t first = exchanges.size();
  for (size_t k = 0; k < exchanges.size(); ++k) {
    const double at = queuedAt(*exchanges[k]);
    if (at < from || at >= until) continue;
    first = std::min(first, k);
    points.push_back({at, at, {ReplayItem::launch_bg}});
    prog.background.push_back(spanItems(*exchanges[k], calls, prog, used, path));
  }
  for (size_t m = 0; m < waits.size(); ++m) {
    const Ev& w = *waits[m];
    if (m < first || m >= first + prog.background.size() || w.ts < t0 || w.end() > t1) continue;
    points.push_back({w.ts, w.end(), {ReplayItem::wait_bg, 0, static_cast<int>(m - first)}});
  }
}

RankProgram programOf(const std::vector<Ev>& evs, const ReplayOptions& opts, const std::string& path, int rank,
                      size_t* step_count) {
  std::vector<const Ev*> steps;
  for (const auto& e : evs)
    if (e.lane == 2 && e.cat == "phase") steps.push_back(&e);
  *step_count = steps.size();
  if (steps.empty()) throw ConfigError(path + ": rank " + std::to_string(rank) + " has no step spans (lane 2)");
  if (opts.first_step < 0 || opts.first_step >= static_cast<int>(steps.size()))
    throw ConfigError(path + ": first step " + std::to_string(opts.first_step) + " is past the " +
                      std::to_string(steps.size()) + " steps of rank " + std::to_string(rank));
  const size_t last = opts.steps > 0 ? std::min(steps.size(), static_cast<size_t>(opts.first_step + opts.steps))
                                     : steps.size();
  // From the first step's start to the last one's end; a replay from the first step also takes
  // in what came before it (the model's broadcast), one to the last step what came after
  // (final evaluation), so the bytes are the whole run's.
  double t0 = steps[opts.first_step]->ts, t1 = steps[last - 1]->end();
  for (const auto& e : evs) {
    if (opts.first_step == 0) t0 = std::min(t0, e.ts);
    if (last == steps.size()) t1 = std::max(t1, e.end());
  }
  RankProgram prog;
  std::vector<Point> points;
  for (size_t s = opts.first_step; s < last; ++s) {
    points.push_back({steps[s]->ts, steps[s]->ts, {ReplayItem::step_begin}});
    points.push_back({steps[s]->end(), steps[s]->end(), {ReplayItem::step_end}});
    prog.measured_step_s.push_back(steps[s]->dur * 1e-6);
  }
  std::vector<const Ev*> buckets, lane1_calls, exchanges, bg_waits, lane3_calls;
  for (const auto& e : evs) {
    const bool call = e.cat == "collective" || e.cat == "p2p";
    if (e.lane == 0 && e.ts >= t0 && e.end() <= t1) {
      if (call) {
        prog.calls.push_back(callOf(e, path));
        points.push_back({e.ts, e.end(), {ReplayItem::call, 0, static_cast<int>(prog.calls.size()) - 1}});
      } else if (e.name == "wait for gradients") {
        points.push_back({e.ts, e.end(), {ReplayItem::wait_buckets}});
      }
    }
    if (e.lane == 1 && e.cat == "comm" && e.name.rfind("bucket", 0) == 0) {
      const double ready = queuedAt(e);
      if (ready >= t0 && ready <= t1) {
        buckets.push_back(&e);
        points.push_back({ready, ready, {ReplayItem::launch}});
      }
    }
    if (e.lane == 1 && call && e.ts >= t0 && e.end() <= t1) lane1_calls.push_back(&e);
    if (e.lane == 3 && e.cat == "comm" && e.name == "outer-sync") exchanges.push_back(&e);
    if (e.lane == 3 && call) lane3_calls.push_back(&e);  // whole exchanges are taken or left (addBackground)
    if (e.lane == 0 && e.cat == "comm" && e.name == "outer-wait" && arg(e, "background") == "1") bg_waits.push_back(&e);
    if (e.lane > 1 && e.cat == "p2p" && e.ts >= t0 && e.end() <= t1)
      throw ConfigError(unreplayable(path, rank, e));
  }
  std::set<const Ev*> used;
  const double from = opts.first_step > 0 ? steps[opts.first_step]->ts : -1e300;
  const double until = last < steps.size() ? steps[last]->ts : 1e300;
  addBackground(exchanges, bg_waits, lane3_calls, from, until, t0, t1, prog, points, used, path);
  // Markers at one instant: a step ends before the next begins, launches come before a wait.
  std::stable_sort(points.begin(), points.end(), [](const Point& a, const Point& b) { return a.at < b.at; });
  double cursor = t0;
  for (const auto& p : points) {
    if (p.at > cursor) prog.main.push_back({ReplayItem::sleep, (p.at - cursor) * 1e-6});
    prog.main.push_back(p.item);
    cursor = std::max(cursor, p.end);
  }
  for (const Ev* b : buckets) prog.buckets.push_back(spanItems(*b, lane1_calls, prog, used, path));
  // A collective outside a bucket (or an exchange) is counted and skipped; a skipped message
  // would leave its peer's matching call waiting forever, so it is an error.
  for (const Ev* c : lane1_calls)
    if (c->cat == "p2p" && !used.count(c)) throw ConfigError(unreplayable(path, rank, *c));
  int unsupported = static_cast<int>(lane1_calls.size());
  for (const Ev* c : lane1_calls) unsupported -= static_cast<int>(used.count(c));
  for (const Ev* c : lane3_calls)  // a lane-3 call outside every exchange
    if (std::none_of(exchanges.begin(), exchanges.end(), [c](const Ev* x) { return c->ts >= x->ts && c->end() <= x->end(); }))
      ++unsupported;
  prog.unsupported_calls = unsupported;
  return prog;
}

}  // namespace

std::vector<RankProgram> readTimeline(const std::string& path, const ReplayOptions& opts) {
  const auto by_rank = readEvents(path);
  if (by_rank.empty()) throw ConfigError("timeline '" + path + "' has no events");
  std::vector<RankProgram> out;
  size_t steps0 = 0;
  int expect = 0;
  for (const auto& [rank, evs] : by_rank) {
    if (rank != expect++) throw ConfigError(path + ": rank " + std::to_string(expect - 1) + " has no events");
    size_t steps = 0;
    out.push_back(programOf(evs, opts, path, rank, &steps));
    if (rank == 0) steps0 = steps;
    if (steps != steps0)
      throw ConfigError(path + ": rank " + std::to_string(rank) + " has " + std::to_string(steps) +
                        " steps, rank 0 " + std::to_string(steps0));
  }
  return out;
}

namespace {

// Each rank's events in `path` as compact JSON (writeTimeline's `events.dump()` of that rank).
std::vector<uint64_t> eventBytes(const std::string& path, size_t ranks) {
  std::ifstream f(path);
  nlohmann::json j;
  try {
    f >> j;
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError("timeline '" + path + "' is not JSON: " + e.what());
  }
  std::vector<nlohmann::json> by_rank(ranks, nlohmann::json::array());
  for (const auto& je : j.at("traceEvents")) {
    const int pid = je.value("pid", 0);
    if (je.value("ph", "") == "X" && pid >= 0 && static_cast<size_t>(pid) < ranks) by_rank[pid].push_back(je);
  }
  std::vector<uint64_t> out;
  for (const auto& events : by_rank) out.push_back(events.dump().size());
  return out;
}

}  // namespace

void appendTimelineGather(std::vector<RankProgram>& programs, const std::string& path) {
  const int world = static_cast<int>(programs.size());
  if (world < 2) return;
  comm::Algo gather = comm::Algo::ring;
  for (const auto& c : programs[0].calls)
    if (c.op == "allgatherv" && c.ranks.empty()) gather = c.algo;
  const auto shares = eventBytes(path, programs.size());
  CallSpec origin;
  origin.op = "broadcast";
  origin.bytes = 8;
  origin.dtype = comm::DType::i64;
  origin.algo = comm::autoBroadcast(8, world, origin.segment_bytes);
  CallSpec sizes;
  sizes.op = "allgatherv";
  sizes.algo = gather;
  sizes.dtype = comm::DType::i64;
  sizes.rank_bytes.assign(world, 8);
  sizes.bytes = 8 * static_cast<uint64_t>(world);
  CallSpec events = sizes;
  events.dtype = comm::DType::u8;
  events.rank_bytes = shares;
  events.bytes = 0;
  for (uint64_t b : shares) events.bytes += b;
  for (auto& prog : programs)
    for (const CallSpec& c : {origin, sizes, events}) {
      prog.calls.push_back(c);
      prog.main.push_back({ReplayItem::call, 0, static_cast<int>(prog.calls.size()) - 1});
    }
}

}  // namespace lowcomm::sim
