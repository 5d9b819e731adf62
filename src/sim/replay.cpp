// replay (lowcomm/sim/replay.h): every rank's compute thread, communication thread and background
// thread (DiLoCo's streamed exchanges) as three SimGrid actors on the rank's host.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <numeric>
#include <utility>

#include "engine.h"
#include "ina.h"
#include "isolated.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/algorithms.h"
#include "lowcomm/comm/dtype.h"
#include "lowcomm/sim/collectives.h"
#include "lowcomm/sim/replay.h"
#include "run_call.h"
#include "replay_state.h"
#include "run_p2p.h"
#include "sim_exchange.h"

namespace lowcomm::sim {

namespace sg4 = simgrid::s4u;

namespace replay_detail {

namespace {

std::string groupKey(const CallSpec& c) {
  std::string k;
  for (int r : c.ranks) k += std::to_string(r) + ",";
  return k;
}

}  // namespace

uint32_t nextSeq(Shared& sh, int rank, int thread, const CallSpec& c) {
  const std::string key = groupKey(c) + "t" + std::to_string(thread);
  auto gid = sh.group_ids.emplace(key, static_cast<uint32_t>(sh.group_ids.size())).first;
  return (gid->second << 20) | (sh.state[rank].calls_in_group[key]++ & 0xfffff);
}

CallBytes runGroupCall(Shared& sh, int rank, int thread, const CallSpec& c, bool count) {
  comm::Group g;
  if (c.ranks.empty()) {
    g = comm::Group::world(rank, sh.net.world());
  } else {
    g.ranks = c.ranks;
    auto it = std::find(c.ranks.begin(), c.ranks.end(), rank);
    if (it == c.ranks.end())
      throw Error("rank " + std::to_string(rank) + " replays a " + c.op + " of a group it is not in");
    g.me = static_cast<int>(it - c.ranks.begin());
  }
  SimExchange ex(sh.net, rank, nextSeq(sh, rank, thread, c), count);
  runCall(ex, g, c, defaultGroupSize(sh.platform, c.algo), sh.buf.get(), sh.out.get(), sh.scratch);
  ++sh.calls;
  return {ex.bytesSent(), ex.messagesSent(), ex.nodeBytesSent(), ex.nodeMessagesSent(), ex.nodeTime()};
}

}  // namespace replay_detail

namespace {

using namespace replay_detail;

void runOne(Shared& sh, int rank, int thread, const CallSpec& c) {
  if (c.p2p()) {
    sh.p2p[rank].run(sh.net, sh.channels, c);
    ++sh.calls;
  } else if (coarsens(sh, c) && c.algo == comm::Algo::rails) {
    runCoarseRails(sh, rank, thread, c);
  } else if (coarsens(sh, c)) runCoarse(sh, rank, thread, c);
  else runGroupCall(sh, rank, thread, c);
}

// `thread`: 0 the rank's compute thread, 1 its communication thread, 2 its background thread.
void runItems(Shared& sh, int rank, int thread, const std::vector<ReplayItem>& items) {
  const RankProgram& prog = sh.programs[rank];
  RankState& st = sh.state[rank];
  for (const auto& it : items) {
    switch (it.kind) {
      case ReplayItem::sleep:
        if (it.seconds > 0) sg4::this_actor::sleep_for(it.seconds);
        break;
      case ReplayItem::call: runOne(sh, rank, thread, prog.calls[it.index]); break;
      case ReplayItem::launch:
        ++st.launches;
        st.launched->release();
        break;
      case ReplayItem::wait_buckets:
        while (st.done < st.launches) st.finished->acquire();  // stale releases only loop once more
        break;
      case ReplayItem::launch_bg: st.bg_launched->release(); break;
      case ReplayItem::wait_bg:
        while (st.bg_done <= it.index) st.bg_finished->acquire();
        break;
      case ReplayItem::step_begin:
        st.step_start = sg4::Engine::get_clock();
        if (st.first_begin < 0) st.first_begin = st.step_start;
        break;
      case ReplayItem::step_end:
        st.last_end = sg4::Engine::get_clock();
        st.step_s.push_back(st.last_end - st.step_start);
        break;
    }
  }
}

void commThread(Shared& sh, int rank) {
  RankState& st = sh.state[rank];
  for (const auto& bucket : sh.programs[rank].buckets) {
    st.launched->acquire();
    runItems(sh, rank, 1, bucket);
    ++st.done;
    st.finished->release();
  }
}

void backgroundThread(Shared& sh, int rank) {
  RankState& st = sh.state[rank];
  for (const auto& exchange : sh.programs[rank].background) {
    st.bg_launched->acquire();
    runItems(sh, rank, 2, exchange);
    ++st.bg_done;
    st.bg_finished->release();
  }
}

uint64_t maxBytes(const std::vector<RankProgram>& programs) {
  uint64_t m = 1;
  for (const auto& p : programs)
    for (const auto& c : p.calls) m = std::max(m, c.bytes);
  return m;
}

nlohmann::json runReplay(const PlatformSpec& p, const std::vector<RankProgram>& programs, const CoarseOptions& coarse) {
  SimPlatform plat = buildPlatform(p);
  const int n = p.world();
  std::vector<int> node_of(n);
  std::vector<sg4::Host*> host_of(n);
  for (int r = 0; r < n; ++r) {
    node_of[r] = p.nodeOf(r);
    host_of[r] = plat.hosts[r];
  }
  SimNetwork net(host_of, node_of, p);
  std::unique_ptr<InaFabric> ina;
  if (p.in_network_aggregation) net.ina = (ina = std::make_unique<InaFabric>(net, plat.ina, p)).get();
  Shared sh{p, programs, net, std::vector<RankState>(n), nullptr, nullptr, {}, {}, coarse, {}, {}, 0, 0, {}, {}};
  for (int r = 0; r < n; ++r) sh.p2p.emplace_back(r);
  // Never read or written (no data moves), so the kernel never backs them with memory.
  const uint64_t bytes = maxBytes(programs);
  sh.buf.reset(new char[bytes]);
  sh.out.reset(new char[bytes]);
  int finished = 0;  // actors that ran to their end
  auto guarded = [&sh, &finished](int r, const char* what, auto&& f) {
    try {
      f();
      ++finished;
    } catch (const std::exception& e) {
      if (sh.error.empty()) sh.error = "rank " + std::to_string(r) + " (" + what + "): " + e.what();
    }
  };
  for (int r = 0; r < n; ++r) {
    sg4::Actor::create("main" + std::to_string(r), host_of[r],
                       [&, r] { guarded(r, "compute thread", [&] { runItems(sh, r, 0, programs[r].main); }); });
    sg4::Actor::create("comm" + std::to_string(r), host_of[r],
                       [&, r] { guarded(r, "communication thread", [&] { commThread(sh, r); }); });
    sg4::Actor::create("bg" + std::to_string(r), host_of[r],
                       [&, r] { guarded(r, "background thread", [&] { backgroundThread(sh, r); }); });
  }
  plat.engine->run();
  if (!sh.error.empty()) throw Error("simulate replay: " + sh.error);
  if (finished != 3 * n)
    throw Error("simulate replay: the simulation stopped with " + std::to_string(3 * n - finished) +
                " of the ranks' threads waiting for messages that never come (a deadlock)");
  nlohmann::json steps = nlohmann::json::array();
  nlohmann::json cycles = nlohmann::json::array();
  for (const auto& st : sh.state) {
    steps.push_back(st.step_s);
    cycles.push_back(st.step_s.empty() ? 0.0 : (st.last_end - st.first_begin) / static_cast<double>(st.step_s.size()));
  }
  return {{"steps", steps},          {"bytes_sent", net.sent},        {"inter_node_sent", net.inter_node_sent}, {"inter_leaf_sent", net.inter_leaf_sent},
          {"inter_site_sent", net.inter_site_sent}, {"messages", net.messages}, {"calls", sh.calls}, {"coarse_calls", sh.coarsened}, {"cycles", cycles}};
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

}  // namespace

ReplayResult replay(const PlatformSpec& platform, const std::vector<RankProgram>& programs, const CoarseOptions& coarse) {
  validate(platform);
  if (static_cast<int>(programs.size()) != platform.world())
    throw ConfigError("simulate replay: the timeline has " + std::to_string(programs.size()) +
                      " ranks but the platform " + std::to_string(platform.world()) + " (nodes x ppn)");
  const auto t0 = std::chrono::steady_clock::now();
  const auto j = nlohmann::json::parse(runIsolated([&] { return runReplay(platform, programs, coarse).dump(); }));
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ReplayResult r;
  r.ranks = platform.world();
  r.steps = static_cast<int>(programs[0].measured_step_s.size());
  double measured = 0, predicted = 0;
  for (int k = 0; k < r.ranks; ++k) {
    const auto sim = j["steps"][k].get<std::vector<double>>();
    r.measured_step_by_rank.push_back(mean(programs[k].measured_step_s));
    r.predicted_step_by_rank.push_back(mean(sim));
    measured += r.measured_step_by_rank.back();
    predicted += r.predicted_step_by_rank.back();
    r.unsupported_calls += programs[k].unsupported_calls;
  }
  r.measured_step_s = measured / r.ranks;
  r.predicted_step_s = predicted / r.ranks;
  for (double c : j["cycles"].get<std::vector<double>>()) r.predicted_cycle_s += c / r.ranks;
  r.bytes_sent = j["bytes_sent"].get<std::vector<uint64_t>>();
  r.inter_node_sent = j["inter_node_sent"].get<std::vector<uint64_t>>();
  r.inter_leaf_sent = j["inter_leaf_sent"].get<std::vector<uint64_t>>();
  r.inter_site_sent = j["inter_site_sent"].get<std::vector<uint64_t>>();
  r.wall_s = wall_s;
  r.messages_sent = j["messages"].get<std::vector<uint64_t>>();
  r.calls = j["calls"];
  r.coarse_calls = j["coarse_calls"];
  return r;
}

}  // namespace lowcomm::sim
