#include "lowcomm/sim/collectives.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <optional>

#include "engine.h"
#include "ina.h"
#include "isolated.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/algorithm_table.h"
#include "lowcomm/comm/algorithms.h"
#include "run_call.h"
#include "sim_exchange.h"

namespace lowcomm::sim {

namespace sg4 = simgrid::s4u;

std::vector<std::string> simulatedAlgorithms(const std::string& op) {
  const auto o = op == "allgatherv" ? std::nullopt : comm::opNamed(op);
  if (!o) {
    std::string known;
    for (int i = 0; i < static_cast<int>(comm::Op::kCount); ++i)
      known += std::string(i ? ", " : "") + comm::opName(static_cast<comm::Op>(i));
    throw ConfigError("simulate: unknown collective '" + op + "' (known: " + known + ")");
  }
  std::vector<std::string> out;
  for (const auto& row : comm::algorithmTable())
    if (row.runsOp(*o) && row.simulated()) out.push_back(row.name);
  return out;
}

int siteBlock(const PlatformSpec& p, int members) {
  const int block = p.siteRanks();
  return block > 0 && block < members ? block : 0;
}

int defaultGroupSize(const PlatformSpec& p, comm::Algo a) {
  return a == comm::Algo::sites && p.siteRanks() > 0 ? p.siteRanks() : p.ppn;
}

namespace {

void checkSpec(const PlatformSpec& p, const CollectiveSpec& s) {
  const auto algos = simulatedAlgorithms(s.op);
  const size_t es = comm::dtypeSize(s.dtype);
  if (s.op == "allreduce" || s.op == "allgather") {
    const std::string a = comm::algoName(s.algo);
    if (std::find(algos.begin(), algos.end(), a) == algos.end()) {
      std::string known;
      for (const auto& k : algos) known += (known.empty() ? "" : ", ") + k;
      throw ConfigError("simulate: " + s.op + " algorithm '" + a + "' is not simulated (known: " + known + ")");
    }
    const int group = s.group_size > 0 ? s.group_size : defaultGroupSize(p, s.algo);
    // The simulator's groups are its nodes: they must split the world evenly.
    if (!comm::shapeFits(s.algo, p.world(), group) ||
        (comm::algorithmSpec(s.algo).needs == comm::Needs::groups && p.world() % group != 0))
      throw ConfigError("simulate: " + a + " needs a group size that divides the world and is between 2 and world - 1 (group " +
                        std::to_string(group) + ", world " + std::to_string(p.world()) + ")");
  }
  if (s.bytes % es != 0)
    throw ConfigError("simulate: " + std::to_string(s.bytes) + " bytes is not a whole number of " +
                      comm::dtypeName(s.dtype) + " elements");
  if ((s.op == "reduce_scatter" || s.op == "allgather" || s.op == "alltoall") && s.bytes % (es * p.world()) != 0)
    throw ConfigError("simulate: " + s.op + " of " + std::to_string(s.bytes) + " bytes does not split evenly over " +
                      std::to_string(p.world()) + " ranks");
  if (s.op == "broadcast" && (s.root < 0 || s.root >= p.world()))
    throw ConfigError("simulate: broadcast root " + std::to_string(s.root) + " is not a rank (world " +
                      std::to_string(p.world()) + ")");
  if (s.segment_bytes == 0) throw ConfigError("simulate: segment_bytes must be positive");
}

// The call as the replay records it: allgather is an allgatherv of equal parts.
CallSpec callOf(const CollectiveSpec& s) {
  CallSpec c;
  c.op = s.op == "allgather" ? "allgatherv" : s.op;
  c.algo = s.algo;
  c.bytes = s.bytes;
  c.dtype = s.dtype;
  c.segment_bytes = s.segment_bytes;
  c.group_size = s.group_size;
  c.node_piece = s.node_piece;
  c.root = s.root;
  return c;
}

}  // namespace

std::string callKey(const CollectiveSpec& s) {
  const CallSpec c = callOf(s);
  return c.op + "/" + comm::algoName(c.algo);
}

namespace {

CollectiveResult runSimulation(const PlatformSpec& p, const CollectiveSpec& s) {
  SimPlatform plat = buildPlatform(p);
  const int n = p.world();
  std::vector<int> node_of(n);
  for (int r = 0; r < n; ++r) node_of[r] = p.nodeOf(r);
  std::vector<sg4::Host*> host_of(n);
  for (int r = 0; r < n; ++r) host_of[r] = plat.hosts[r];
  // One call as `bench collectives` times it, back to back: a shaped link's bucket has no idle
  // spell to refill in (the calibration's rows, the tuner's choices), so no burst.
  PlatformSpec links = p;
  links.link_burst_bytes = 0;
  SimNetwork net(host_of, node_of, links);
  std::unique_ptr<InaFabric> ina;
  if (p.in_network_aggregation) net.ina = (ina = std::make_unique<InaFabric>(net, plat.ina, p)).get();
  // Every rank's buffers: never read or written (the executor moves no data), so all ranks share
  // one allocation that the kernel never backs with memory.
  std::unique_ptr<char[]> buf(new char[std::max<size_t>(s.bytes, 1)]);
  std::unique_ptr<char[]> out(new char[std::max<size_t>(s.bytes, 1)]);
  comm::Scratch scratch;
  const CallSpec call = callOf(s);
  CollectiveResult res;
  res.finish_s.assign(n, 0);
  std::string error;
  int finished = 0;
  for (int r = 0; r < n; ++r) {
    sg4::Actor::create("rank" + std::to_string(r), plat.hosts[r], [&, r] {
      try {
        SimExchange ex(net, r, 1);
        runCall(ex, comm::Group::world(r, n), call, defaultGroupSize(p, s.algo), buf.get(), out.get(), scratch);
        ++finished;
      } catch (const std::exception& e) {
        if (error.empty()) error = "rank " + std::to_string(r) + ": " + e.what();
      }
      res.finish_s[r] = sg4::Engine::get_clock();
    });
  }
  plat.engine->run();
  if (!error.empty()) throw Error("simulate: " + error);
  if (finished != n)
    throw Error("simulate: the simulation stopped with " + std::to_string(n - finished) +
                " ranks waiting for messages that never come (a deadlock)");
  res.time_s = *std::max_element(res.finish_s.begin(), res.finish_s.end());
  res.bytes_sent = net.sent;
  res.bytes_recv = net.recv;
  res.messages_sent = net.messages;
  res.inter_node_bytes = net.inter_node;
  res.node_piece = runsInNodeMemory(net, comm::Group::world(0, n), call, p.ppn) ? call.node_piece : 0;
  return res;
}

}  // namespace

CollectiveResult simulateCollective(const PlatformSpec& platform, const CollectiveSpec& spec) {
  validate(platform);
  checkSpec(platform, spec);
  const auto text = runIsolated([&] {
    const auto r = runSimulation(platform, spec);
    nlohmann::json j = {{"time_s", r.time_s},       {"finish_s", r.finish_s},
                        {"bytes_sent", r.bytes_sent}, {"bytes_recv", r.bytes_recv},
                        {"messages_sent", r.messages_sent}, {"inter_node_bytes", r.inter_node_bytes},
                        {"node_piece", r.node_piece}};
    return j.dump();
  });
  const auto j = nlohmann::json::parse(text);
  CollectiveResult r;
  r.time_s = j["time_s"];
  r.finish_s = j["finish_s"].get<std::vector<double>>();
  r.bytes_sent = j["bytes_sent"].get<std::vector<uint64_t>>();
  r.bytes_recv = j["bytes_recv"].get<std::vector<uint64_t>>();
  r.messages_sent = j["messages_sent"].get<std::vector<uint64_t>>();
  r.inter_node_bytes = j["inter_node_bytes"];
  r.node_piece = j["node_piece"];
  return r;
}

}  // namespace lowcomm::sim
