// `lowcomm train --config FILE.toml [--set key=value ...] [--nproc N]`: data-parallel training.
// With --nproc it launches itself through the launcher; started by a launcher (RANK, ...) it is
// one worker; otherwise it trains as a single process.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "commands.h"
#include "elastic_membership.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/tuned_table.h"
#include "lowcomm/net/env.h"
#include "lowcomm/net/rdzv_store.h"
#include "lowcomm/runtime/worker.h"
#include "lowcomm/parallel/strategy_spec.h"
#include "lowcomm/train/checkpoint.h"
#include "lowcomm/train/trainer.h"

namespace lowcomm::cli {

namespace {

comm::CommOptions commOptions(const train::TrainConfig& c) {
  comm::CommOptions o;
  o.timeout = std::chrono::seconds(c.comm.timeout_s);
  o.allreduce_algo = comm::parseAlgo(c.comm.algo);
  o.allgather_algo = comm::parseAlgo(c.comm.allgather);
  if (!c.comm.tuning.empty())
    o.tuned = std::make_shared<const comm::TunedTable>(comm::TunedTable::load(c.comm.tuning));  // errors name the file
  o.shm = comm::parseShmMode(c.comm.shm);
  o.deterministic = c.comm.deterministic;
  o.debug_check = c.comm.debug_check;
  o.streams = static_cast<int>(c.comm.streams);
  o.stripe_min_bytes = static_cast<size_t>(c.comm.stripe_min_bytes);
  o.eager_max_bytes = static_cast<size_t>(c.comm.eager_max_bytes);
  o.congestion_control = c.comm.congestion_control == "system" ? "" : c.comm.congestion_control;
  return o;
}

// LOWCOMM_RESTART_COUNT, set by `lowcomm launch --max-restarts` (0 when unset).
int restartCount() {
  const char* v = std::getenv("LOWCOMM_RESTART_COUNT");
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || n < 0 || n > 1000000)
    throw ConfigError(std::string("environment variable LOWCOMM_RESTART_COUNT='") + v + "' is not a restart count");
  return static_cast<int>(n);
}

void printSummary(const nlohmann::json& s, const train::TrainConfig& cfg) {
  std::printf("\n== summary ==\n");
  std::printf("  %-22s %s\n", "strategy", s["strategy"].get<std::string>().c_str());
  std::printf("  %-22s %s on %s\n", "model", s["model"].get<std::string>().c_str(), s["dataset"].get<std::string>().c_str());
  std::printf("  %-22s %d\n", "world", s["world"].get<int>());
  if (s.contains("parallel") && (s["parallel"]["tp"].get<int>() > 1 || s["parallel"]["pp"].get<int>() > 1)) {
    const auto& p = s["parallel"];
    const auto& axis = p["bytes_sent_by_axis"];
    std::printf("  %-22s dp %d x tp %d x pp %d (order %s); sent %.1f MB dp, %.1f MB tp, %.1f MB pp (all ranks)\n", "grid",
                p["dp"].get<int>(), p["tp"].get<int>(), p["pp"].get<int>(), p.value("order", "tp-dp-pp").c_str(),
                axis["dp"].get<double>() / 1048576.0,
                axis["tp"].get<double>() / 1048576.0, axis["pp"].get<double>() / 1048576.0);
    if (p.contains("pipeline"))
      std::printf("  %-22s %s, %lld micro-batches: bubble %.3f measured, %.3f theory\n", "pipeline",
                  p["pipeline"]["schedule"].get<std::string>().c_str(), p["pipeline"]["micro_batches"].get<long long>(),
                  p["pipeline"]["bubble_fraction"].get<double>(), p["pipeline"]["bubble_fraction_theory"].get<double>());
  }
  std::printf("  %-22s %lld (%.2f epochs)\n", "steps", s["steps"].get<long long>(), s["epochs"].get<double>());
  for (const auto& r : s.value("resumes", nlohmann::json::array()))
    std::printf("  %-22s from step %lld, %lld steps lost (restart %d)\n", "resumed",
                r["from_step"].get<long long>(), r["steps_lost"].get<long long>(), r["restart"].get<int>());
  if (s.contains("bits_per_byte")) {
    std::printf("  %-22s %.4f (loss %.4f nats per byte)\n", "validation bits/byte", s["bits_per_byte"].get<double>(),
                s["test_loss"].get<double>());
    std::printf("  %-22s %.2f %%\n", "next-byte accuracy", 100.0 * s["test_accuracy"].get<double>());
  } else {
    std::printf("  %-22s %.2f %%\n", "test accuracy", 100.0 * s["test_accuracy"].get<double>());
  }
  std::printf("  %-22s %.1f s (%.0f samples/s)\n", "wall time", s["wall_s"].get<double>(), s["samples_per_s"].get<double>());
  std::printf("  %-22s %.1f MB total, %.1f MB per rank\n", "bytes sent", s["bytes_sent"].get<double>() / 1048576.0,
              s["bytes_sent_per_rank"].get<double>() / 1048576.0);
  if (s.contains("bytes_sent_by_link"))
    std::printf("  %-22s %.1f MB inter-node, %.1f MB intra-node (all ranks)\n", "bytes by link",
                s["bytes_sent_by_link"]["inter-node"].get<double>() / 1048576.0,
                s["bytes_sent_by_link"]["intra-node"].get<double>() / 1048576.0);
  if (s.contains("bytes_sent_by_link") && s["bytes_sent_by_link"].contains("inter-site"))
    std::printf("  %-22s %.1f MB inter-site (all ranks)\n", "", s["bytes_sent_by_link"]["inter-site"].get<double>() / 1048576.0);
  std::printf("  %-22s %.2f (raw / encoded gradient bytes)\n", "codec ratio", s["compression_ratio"].get<double>());
  const auto& spec = train::strategySpec(cfg);
  if (spec.summary_lines && s.contains(spec.name))
    for (const auto& [label, text] : spec.summary_lines(s[spec.name])) std::printf("  %-22s %s\n", label.c_str(), text.c_str());
  std::printf("  %-22s comm %.1f s, waited %.1f s (%.0f %% of communication hidden)\n", "communication",
              s["comm_s"].get<double>(), s["wait_s"].get<double>(), 100.0 * s["comm_hidden_fraction"].get<double>());
  std::printf("  %-22s rank %d (waited least)\n", "straggler", s["straggler_rank"].get<int>());
  std::printf("  %-22s %s\n", "checkpoint", s["checkpoint"].get<std::string>().c_str());
  std::fflush(stdout);
}

// On an emulated cluster the launcher reads the links' counters after the workers end, so rank 0's
// summary is written without them: add them as a "wire" block to each summary file.
void addWireToSummaries(const std::string& wire_path, const std::vector<std::string>& summaries) {
  std::ifstream wf(wire_path);
  if (!wf) throw Error("no wire bytes file '" + wire_path + "' after the run");
  const auto wire = nlohmann::json::parse(wf);
  for (const auto& path : summaries) {
    std::ifstream sf(path);
    if (!sf) throw Error("no summary '" + path + "' after the run");
    auto s = nlohmann::json::parse(sf);
    const double tx = wire["tx_bytes"].get<double>(), payload = s["bytes_sent"].get<double>();
    s["wire"] = {{"cluster", wire["cluster"]}, {"rate", wire["rate"]}, {"tx_bytes", wire["tx_bytes"]},
                 {"rx_bytes", wire["rx_bytes"]}, {"tx_packets", wire["tx_packets"]}, {"rx_packets", wire["rx_packets"]},
                 {"tx_bytes_per_rank", tx / s["world"].get<double>()},
                 {"wire_over_payload", payload > 0 ? tx / payload : 0.0}, {"file", wire_path}};
    if (wire.contains("inter_site_tx_bytes")) s["wire"]["inter_site_tx_bytes"] = wire["inter_site_tx_bytes"];
    train::writeFileAtomically(path, s.dump(1) + "\n");
  }
  const auto& s = wire;
  std::printf("  %-22s %.1f MB sent on the links of cluster %s (%s)\n", "wire bytes", s["tx_bytes"].get<double>() / 1048576.0,
              s["cluster"].get<std::string>().c_str(), s["rate"].get<std::string>().c_str());
  if (s.contains("inter_site_tx_bytes"))
    std::printf("  %-22s %.1f MB sent across the WAN between sites\n", "inter-site wire bytes",
                s["inter_site_tx_bytes"].get<double>() / 1048576.0);
}

}  // namespace

int cmdTrain(int argc, char** argv) {
  std::string config, summary, timeline;
  std::vector<std::string> sets;
  int nproc = 0;
  bool resume = false, list_keys = false;
  ClusterArgs cluster;
  CLI::App app{"Data-parallel training on LibTorch", "lowcomm train"};
  app.add_option("--config", config, "TOML configuration file (configs/*.toml)");
  app.add_option("--set", sets, "override a key: section.key=value (repeatable)");
  app.add_option("--nproc", nproc, "launch this many local worker processes")->check(CLI::Range(1, 65536));
  app.add_option("--summary", summary, "also write the summary JSON here");
  app.add_option("--timeline", timeline, "write a Chrome trace (Perfetto / chrome://tracing) of every rank");
  app.add_flag("--resume", resume, "continue from the latest checkpoint in checkpoint.dir");
  app.add_flag("--list-keys", list_keys, "print every configuration key and exit");
  addClusterOptions(app, cluster);
  app.add_flag("--elastic", cluster.elastic.enabled,
               "with --nproc: a worker that dies is replaced while the others train on, no restart (the [elastic] "
               "section; docs/elastic.md)");
  app.add_option("--max-restarts", cluster.max_restarts,
                 "with --nproc: after a worker is killed, loses a peer or times out, restart all workers from the "
                 "latest checkpoint after a backoff, up to N times (a config, data or checkpoint error is not restarted)")
      ->check(CLI::Range(0, 1000000));
  if (!parseArgs(app, argc, argv)) return 0;
  if (list_keys) {
    for (const auto& k : train::configKeys()) std::cout << k << "\n";
    return 0;
  }
  const auto cfg = train::loadConfig(config, sets);  // fail before launching anything

  cluster.elastic.heartbeat = std::chrono::milliseconds(cfg.elastic.heartbeat_ms);
  cluster.elastic.heartbeat_timeout = std::chrono::milliseconds(cfg.elastic.heartbeat_timeout_ms);
  cluster.elastic.max_replacements = static_cast<int>(cfg.elastic.max_replacements);
  if (!cluster.name.empty() && nproc > 0 && cluster.wire_json.empty())
    cluster.wire_json = (std::filesystem::path(cfg.logging.out_dir) / "wire.json").string();
  if (const int rc = relaunchAsWorkers(nproc, "train", argc, argv, cluster); rc >= 0) {
    if (rc == 0 && !cluster.name.empty()) {
      std::vector<std::string> summaries{(std::filesystem::path(cfg.logging.out_dir) / "summary.json").string()};
      if (!summary.empty()) summaries.push_back(summary);
      addWireToSummaries(cluster.wire_json, summaries);
    }
    return rc;
  }

  std::shared_ptr<comm::Communicator> world;
  std::shared_ptr<train::ElasticMembership> elastic;
  runtime::Worker worker;  // alive until training ends: it exits the process if the launcher dies
  if (net::detectWorkerEnv()) {
    runtime::WorkerOptions wo;
    wo.comm = commOptions(cfg);
    wo.transport.iface = cfg.comm.iface;
    wo.transport.address = cfg.comm.address;
    worker = runtime::initWorker(wo);
    world = worker.comm;  // --elastic: the first epoch's; none for a replacement (it joins once built)
    if (worker.membership) elastic = makeWorkerMembership(worker);
  } else {
    runtime::pinTorchThreads(1);
    net::TransportOptions t;
    t.address = "127.0.0.1";
    world = comm::Communicator::create(std::make_shared<net::MemoryStore>(), 0, 1, commOptions(cfg), t);
  }
  const int gs = world ? world->options().group_size : 0;
  if (world && cfg.comm.allgather == "hier" && world->size() > 1 && !(gs > 1 && gs < world->size()))
    throw ConfigError("comm.allgather = \"hier\" needs nodes of several ranks and more than one node (ranks per node " +
                      std::to_string(gs) + ", world " + std::to_string(world->size()) + ")");
  train::TrainOptions to;
  to.summary_path = summary;
  to.timeline_path = timeline;
  to.resume = resume;
  to.restart_count = restartCount();
  if (const char* token = std::getenv("LOWCOMM_JOB_TOKEN"); token && *token) to.job_id = net::jobId(token);
  to.elastic = elastic;
  nlohmann::json s;
  try {
    s = train::runTraining(cfg, world, to);
  } catch (const runtime::JobFinishedError& e) {  // --elastic: a replacement that came too late
    std::fprintf(stderr, "lowcomm train: %s; exiting\n", e.what());
    return 0;
  }
  const int final_rank = elastic ? s["elastic"]["rank"].get<int>() : world->rank();  // --elastic: the last epoch's
  world.reset();  // --elastic: the first epoch's communicator is long gone from the run
  if (final_rank == 0) printSummary(s, cfg);
  return 0;
}

}  // namespace lowcomm::cli
