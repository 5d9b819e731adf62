// `lowcomm bench collectives`: nccl-tests-style sweep of our collectives and, in the same run,
// of c10d::ProcessGroupGloo (PyTorch's Gloo backend) as the baseline.
//
// Sizes are nccl-tests' "size": the whole buffer for allreduce/broadcast, the gathered output
// for allgather, the scattered input for reduce_scatter and alltoall. time_us is the slowest
// rank's mean per call; busbw uses nccl-tests' factors.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "bench_collectives_rows.h"
#include "bench_options.h"
#include "c10d_backend.h"
#include "cli_util.h"
#include "lowcomm/comm/selector.h"
#include "lowcomm/comm/tuned_table.h"
#include "lowcomm/base/error.h"
#include "lowcomm/runtime/worker.h"

namespace lowcomm::cli {

namespace {

using comm::Algo;
using comm::DType;
using Clock = std::chrono::steady_clock;

// Elements per rank's block for an nccl-tests size.
size_t countFor(const std::string& op, size_t bytes, size_t es, int n) {
  const bool per_block = op == "allgather" || op == "reduce_scatter" || op == "alltoall";
  return std::max<size_t>(1, bytes / es / (per_block ? n : 1));
}

// One benchmark case: buffers in nccl-tests layout, a fill with checkable values, a check.
struct Case {
  std::string op;
  DType dt;
  int n, rank;
  size_t count;
  std::vector<char> in, out;

  Case(std::string o, DType d, int world, int r, size_t c) : op(std::move(o)), dt(d), n(world), rank(r), count(c) {
    const size_t es = comm::dtypeSize(dt);
    const bool wide_in = op == "reduce_scatter" || op == "alltoall";
    const bool wide_out = op == "allgather" || op == "alltoall";
    in.resize((wide_in ? n : 1) * count * es);
    out.resize((wide_out ? n : 1) * count * es);
  }
  size_t inCount() const { return in.size() / comm::dtypeSize(dt); }
  void fill() {
    for (size_t i = 0; i < inCount(); ++i) {
      const double block = op == "alltoall" ? static_cast<double>(i / count) : 0.0;
      comm::storeValue(dt, in.data(), i, rank + 1 + block * n);
    }
  }
  // `want` goes through the dtype first: u8 wraps, bf16/f16 round large values.
  bool differs(const std::vector<char>& b, size_t i, double want) const {
    char tmp[8];
    comm::storeValue(dt, tmp, 0, want);
    return comm::loadValue(dt, b.data(), i) != comm::loadValue(dt, tmp, 0);
  }
  int64_t wrong() const {
    int64_t bad = 0;
    const double sum = n * (n + 1) / 2.0;
    if (op == "allreduce" || op == "broadcast") {
      const double want = op == "allreduce" ? sum : 1.0;
      for (size_t i = 0; i < count; ++i) bad += differs(in, i, want);
    } else if (op == "reduce_scatter") {
      for (size_t i = 0; i < count; ++i) bad += differs(out, i, sum);
    } else {  // allgather: block j == j+1; alltoall: block j == j+1 + rank*n
      for (size_t i = 0; i < out.size() / comm::dtypeSize(dt); ++i) {
        const double j = static_cast<double>(i / count);
        const double want = op == "allgather" ? j + 1 : j + 1 + static_cast<double>(rank) * n;
        bad += differs(out, i, want);
      }
    }
    return bad;
  }
};

void runOurs(comm::Communicator& c, Case& k, Algo algo) {
  if (k.op == "allreduce") c.allreduce(k.in.data(), k.count, k.dt, comm::ReduceOp::sum, algo);
  else if (k.op == "broadcast") c.broadcast(k.in.data(), k.count, k.dt, 0, algo);
  else if (k.op == "allgather") c.allgather(k.in.data(), k.out.data(), k.count, k.dt, algo);
  else if (k.op == "reduce_scatter") c.reduceScatter(k.in.data(), k.out.data(), k.count, k.dt, comm::ReduceOp::sum);
  else if (k.op == "alltoall") c.alltoall(k.in.data(), k.out.data(), k.count, k.dt);
  else throw ConfigError("unknown op '" + k.op + "' (expected allreduce, allgather, broadcast, reduce_scatter, alltoall)");
}

double maxOver(comm::Communicator& c, double v) {
  c.allreduce(&v, 1, DType::f64, comm::ReduceOp::max);
  return v;
}

// Times `once` the same number of times on every rank; returns the slowest rank's mean in us.
template <typename F>
double timeIt(comm::Communicator& c, const CollectiveBenchOptions& o, F&& once) {
  for (int i = 0; i < o.warmup; ++i) once();
  c.barrier();
  auto t0 = Clock::now();
  once();
  const double est = maxOver(c, std::chrono::duration<double>(Clock::now() - t0).count());
  const int iters = std::max(o.min_iters, std::min(o.max_iters, static_cast<int>(o.seconds_per_size / std::max(est, 1e-7))));
  c.barrier();
  t0 = Clock::now();
  for (int i = 0; i < iters; ++i) once();
  const double mean = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
  return maxOver(c, mean) * 1e6;
}

using Row = CollectiveRow;

Row makeRow(const Case& k, const std::string& algo, const std::string& backend, size_t bytes, double us,
            int64_t wrong) {
  Row r{k.op, algo, backend, comm::dtypeName(k.dt), k.n, bytes, k.count, us, 0, 0, wrong};
  r.algbw = static_cast<double>(bytes) / (us * 1e-6) / 1e9;
  r.busbw = r.algbw * busFactor(k.op, k.n);
  return r;
}

std::string opAlgo(const std::string& op) {
  if (op == "broadcast") return "tree";
  if (op == "alltoall") return "pairwise";
  return "ring";
}

int worker(const CollectiveBenchOptions& o) {
  runtime::WorkerOptions wo;
  wo.comm.timeout = std::chrono::seconds(o.timeout_s);
  wo.comm.group_size = o.group_size;
  wo.comm.segment_bytes = o.segment_bytes;
  wo.comm.shm = o.shm;
  if (!o.tuning.empty()) wo.comm.tuned = std::make_shared<const comm::TunedTable>(comm::TunedTable::load(o.tuning));
  wo.comm.shm_piece_bytes = o.shm_piece_bytes;
  wo.comm.streams = o.streams;
  wo.comm.stripe_min_bytes = o.stripe_min_bytes;
  wo.comm.eager_max_bytes = o.eager_max_bytes;
  wo.comm.congestion_control = o.congestion_control == "system" ? "" : o.congestion_control;
  wo.transport.iface = o.iface;
  wo.transport.address = o.address;
  auto w = runtime::initWorker(wo);
  auto& c = *w.comm;
  const int n = c.size(), rank = c.rank();
  std::string base_iface = o.iface;
  if (const char* env = std::getenv("GLOO_SOCKET_IFNAME"); base_iface.empty() && o.address.empty() && env && *env)
    base_iface = env;  // as PyTorch's Python frontend does
  // Through c10d's API: PyTorch's Gloo backend (baseline) and, with --torch-lowcomm, ours.
  std::vector<std::pair<std::string, std::unique_ptr<C10dBackend>>> backends;
  if (o.baseline && o.dtype == DType::f32)
    backends.emplace_back("c10d-gloo", std::make_unique<C10dBackend>("gloo", w.store, rank, n, base_iface, o.address,
                                                                     o.timeout_s));
  if (o.torch_lowcomm && o.dtype == DType::f32)
    backends.emplace_back("torch-lowcomm", std::make_unique<C10dBackend>("lowcomm", w.store, rank, n, base_iface,
                                                                         o.address, o.timeout_s));
  std::string base_names;
  for (const auto& [name, b] : backends) base_names += (base_names.empty() ? "" : ", ") + name;
  if (rank == 0) {
    std::printf("# lowcomm bench collectives: world %d, dtype %s, %zu sizes, %d round%s, through c10d: %s\n", n,
                comm::dtypeName(o.dtype), o.sizes.size(), o.rounds, o.rounds == 1 ? "" : "s",
                base_names.empty() ? "off" : base_names.c_str());
    if (c.crossSiteRtt() > 0)
      std::printf("# streams auto: %d per cross-site pair (cross-site round trip %.2f ms)\n", c.streams(),
                  c.crossSiteRtt() * 1e3);
    printRowHeader();
  }
  std::vector<Row> rows;
  int64_t total_wrong = 0;
  for (size_t op_index = 0; op_index < o.ops.size(); ++op_index) {
    const std::string& op = o.ops[op_index];
    // Broadcast and allgather: the --algos entries naming theirs, else the automatic choice.
    std::vector<std::string> algos = algosFor(op, o.algos);
    if (algos.empty() && (op == "broadcast" || op == "allgather")) algos.push_back("auto");
    if (algos.empty()) algos.push_back(opAlgo(op));
    for (size_t bytes : o.sizes) {
      const size_t es = comm::dtypeSize(o.dtype);
      Case k(op, o.dtype, n, rank, countFor(op, bytes, es, n));
      const size_t real_bytes = k.count * es * (op == "allgather" || op == "reduce_scatter" || op == "alltoall" ? n : 1);
      auto algoOf = [&](const std::string& a) {
        return op == "allreduce" || op == "broadcast" || op == "allgather" ? comm::parseAlgo(a) : Algo::automatic;
      };
      // --rounds: every algorithm once per round, in an order shuffled each round (roundOrder),
      // so a slow phase of the machine and what ran just before hit them alike; each row is its
      // algorithm's median round.
      std::vector<std::vector<double>> round_us(algos.size());
      std::vector<std::vector<int>> round_pos(algos.size());
      const uint64_t salt = bytes * 131 + static_cast<uint64_t>(op_index);  // the same on every rank and build
      for (int round = 0; round < o.rounds; ++round) {
        std::vector<size_t> order = roundOrder(algos.size(), round, salt);
        if (o.rounds == 1) std::sort(order.begin(), order.end());  // one round: as listed
        int pos = 0;
        for (const size_t i : order) {
          const Algo algo = algoOf(algos[i]);
          if (algo == Algo::shm && (!c.allLocal() || o.shm == comm::ShmMode::off)) continue;
          k.fill();
          round_us[i].push_back(timeIt(c, o, [&] { runOurs(c, k, algo); }));
          round_pos[i].push_back(pos++);
        }
      }
      for (size_t i = 0; i < algos.size(); ++i) {
        const std::string& a = algos[i];
        const Algo algo = algoOf(a);
        if (algo == Algo::shm && (!c.allLocal() || o.shm == comm::ShmMode::off)) {
          if (rank == 0 && bytes == o.sizes.front()) std::printf("# shm rows skipped: ranks do not share a host (or --shm off)\n");
          continue;
        }
        std::vector<double> us_all = round_us[i];
        std::nth_element(us_all.begin(), us_all.begin() + us_all.size() / 2, us_all.end());
        const double us = us_all[us_all.size() / 2];
        k.fill();
        runOurs(c, k, algo);
        int64_t wrong = k.wrong();
        c.allreduce(&wrong, 1, DType::i64, comm::ReduceOp::sum);
        total_wrong += wrong;
        std::string shown = a;
        if (op == "allreduce" && algo == Algo::automatic)
          shown = std::string("auto:") + comm::algoName(c.chooseAllreduce(k.count * es));
        if (op == "broadcast" && algo == Algo::automatic)  // the row names what ran (calibration reads it)
          shown = comm::algoName(comm::autoBroadcast(k.count * es, n, c.options().segment_bytes));
        if (op == "allgather" && algo == Algo::automatic)
          shown = comm::algoName(c.chooseAllgather().algo);
        rows.push_back(makeRow(k, shown, "lowcomm", real_bytes, us, wrong));
        rows.back().round_us = round_us[i];
        rows.back().round_pos = round_pos[i];
        rows.back().streams = o.streams == comm::kAutoStreams ? c.streams() : o.streams;
        rows.back().streams_used = c.streams();
        rows.back().streams_auto = o.streams == comm::kAutoStreams;
        rows.back().cross_site_rtt_us = c.crossSiteRtt() * 1e6;
        rows.back().stripe_min_bytes = o.stripe_min_bytes;
        rows.back().eager_max_bytes = o.eager_max_bytes;
        rows.back().congestion_control = o.congestion_control;
        if (op == "allreduce" && algo == Algo::hierarchical) rows.back().node_piece = c.nodePiece();
        if (rank == 0) printRow(rows.back());
      }
      for (auto& [name, base] : backends) {
        if (!base->supports(op)) continue;
        auto* in = reinterpret_cast<float*>(k.in.data());
        auto* out = reinterpret_cast<float*>(k.out.data());
        k.fill();
        const double us = timeIt(c, o, [&, b = base.get()] { b->run(op, in, out, k.count, n); });
        k.fill();
        base->run(op, in, out, k.count, n);
        int64_t wrong = k.wrong();
        c.allreduce(&wrong, 1, DType::i64, comm::ReduceOp::sum);
        total_wrong += wrong;
        std::string shown = name == "c10d-gloo" ? "gloo" : (op == "allreduce" ? "auto" : opAlgo(op));
        if (name != "c10d-gloo" && op == "broadcast")
          shown = comm::algoName(comm::autoBroadcast(k.count * es, n, c.options().segment_bytes));
        rows.push_back(makeRow(k, shown, name, real_bytes, us, wrong));
        if (rank == 0) printRow(rows.back());
      }
    }
  }
  if (rank == 0 && !o.json.empty()) {
    writeRowsJson(o.json, rows);
    std::printf("# wrote %zu rows to %s\n", rows.size(), o.json.c_str());
  }
  if (total_wrong) {
    if (rank == 0) std::fprintf(stderr, "bench collectives: %lld wrong elements\n", static_cast<long long>(total_wrong));
    return 3;
  }
  return 0;
}

}  // namespace

int benchCollectives(int argc, char** argv) {
  CollectiveBenchOptions o;
  std::string sizes = "4B:256MiB", ops = "allreduce", algos = "auto,ring,hd,shm", dtype = "f32", shm = "auto";
  CLI::App app{"Sweep message sizes over our collectives, c10d::ProcessGroupGloo (baseline) and our c10d backend",
               "lowcomm bench collectives"};
  app.add_option("--nproc", o.nproc, "launch this many local workers (else run as a launched worker)")
      ->check(CLI::Range(1, 65536));
  app.add_option("--sizes", sizes, "LO:HI (powers of two) or a list, e.g. 4B:256MiB or 4B,64MiB")->capture_default_str();
  app.add_option("--ops", ops, "allreduce,allgather,broadcast,reduce_scatter,alltoall")->capture_default_str();
  app.add_option("--algos", algos, "allreduce algorithms: auto,ring,hd,hier,rails,ordered,shm (shm only when all ranks share the host); broadcast: tree,chain; allgather: ring,hier (none listed: the automatic choice)")->capture_default_str();
  app.add_option("--dtype", dtype, "f32, f64, f16, bf16, i32, i64, u8 (baseline only for f32)")->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed calls per case")->capture_default_str();
  app.add_option("--iters", o.max_iters, "at most this many timed calls per case")->capture_default_str();
  app.add_option("--min-iters", o.min_iters, "at least this many timed calls per case")->capture_default_str();
  app.add_option("--seconds", o.seconds_per_size, "timing budget per case")->capture_default_str();
  app.add_option("--rounds", o.rounds,
                 "time each size's algorithms in turn this many times (--seconds each, in a shuffled order each "
                 "round) and report each one's median round: a slow phase of a shared machine, and what ran just "
                 "before, then hit every algorithm alike")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_flag("!--no-baseline", o.baseline, "skip the c10d-gloo rows");
  app.add_flag("--torch-lowcomm", o.torch_lowcomm,
               "also time our torch.distributed backend (ProcessGroupLowcomm through c10d's API: its queue and "
               "Work handles on top of our collectives), rows torch-lowcomm");
  app.add_option("--json", o.json, "write all rows to this JSON file (rank 0)");
  app.add_option("--iface", o.iface, "network interface to bind (else GLOO_SOCKET_IFNAME, else hostname)");
  app.add_option("--address", o.address, "address to bind");
  app.add_option("--group-size", o.group_size, "ranks per group for hier and rails (0 = LOCAL_WORLD_SIZE)")->capture_default_str();
  app.add_option("--shm", shm, "shared memory for allreduce among local ranks: auto, on, off")->capture_default_str();
  app.add_option("--shm-piece", o.shm_piece_bytes, "shared-memory pipelining unit, bytes")->capture_default_str();
  app.add_option("--tuning", o.tuning, "a `simulate tune` file: the auto allreduce rows follow it");
  app.add_option("--segment", o.segment_bytes, "pipelining segment of ring/tree algorithms, bytes")->capture_default_str();
  std::string streams = "auto";
  app.add_option("--streams", streams,
                 "TCP connections per pair of ranks in different sites (LOWCOMM_SITE), 1..64, or auto (from the "
                 "cross-site round trip measured at setup); messages of at least --stripe-min bytes between sites "
                 "are striped over them")
      ->capture_default_str();
  app.add_option("--stripe-min", o.stripe_min_bytes, "smallest message striped over --streams connections, bytes")
      ->check(CLI::Range(size_t{1}, size_t{1} << 40))
      ->capture_default_str();
  app.add_option("--eager-max", o.eager_max_bytes,
                 "largest message the sites allreduce sends between sites without waiting for the receiver's ready "
                 "notice, bytes; 0 = off")
      ->check(CLI::Range(size_t{0}, size_t{16} << 20))
      ->capture_default_str();
  app.add_option("--congestion-control", o.congestion_control,
                 "TCP congestion control of our pair sockets: system (the kernel's default) or one the kernel offers "
                 "(cubic, bbr, reno, ...)")
      ->capture_default_str();
  app.add_option("--timeout", o.timeout_s, "per-operation timeout in seconds")
      ->check(CLI::Range(1, 30 * 24 * 3600))
      ->capture_default_str();
  ClusterArgs cluster;
  addClusterOptions(app, cluster);
  if (!parseArgs(app, argc, argv)) return 0;
  o.sizes = parseSizes(sizes);
  o.ops = splitList(ops);
  o.algos = splitList(algos);
  o.dtype = comm::parseDType(dtype);
  o.shm = comm::parseShmMode(shm);
  o.streams = comm::parseStreams(streams, "--streams");
  for (const auto& a : o.algos) comm::parseAlgo(a);  // fail before launching anything
  comm::checkCongestionControl(o.congestion_control);
  if (!o.tuning.empty()) comm::TunedTable::load(o.tuning);
  if (std::find(o.ops.begin(), o.ops.end(), "allreduce") != o.ops.end() && algosFor("allreduce", o.algos).empty())
    throw ConfigError("--algos '" + algos + "' names no allreduce algorithm (tree and chain are broadcast's)");
  if (o.warmup < 0 || o.min_iters < 1 || o.max_iters < o.min_iters)
    throw ConfigError("need --warmup >= 0 and 1 <= --min-iters <= --iters");

  if (const int rc = relaunchAsWorkers(o.nproc, "bench collectives", argc, argv, cluster); rc >= 0) return rc;
  return worker(o);
}

}  // namespace lowcomm::cli
