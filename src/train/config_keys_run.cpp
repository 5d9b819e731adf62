// The keys of the run's plumbing sections: [comm], [logging], [checkpoint].
#include "config_schema.h"
#include "lowcomm/comm/algorithm_table.h"
#include "lowcomm/comm/communicator.h"

namespace lowcomm::train {

namespace {
constexpr int64_t kIntMax = 2147483647;
// Deadlines are steady_clock time points in nanoseconds: a timeout of centuries overflows them.
constexpr int64_t kMaxTimeoutS = 30 * 24 * 3600;
}  // namespace

schema::Section<CommConfig> commSection() {
  using O = CommConfig;
  schema::Section<O> s("comm", "the collectives: algorithms, transport, checks");
  s.integer("timeout_s", &O::timeout_s, 1, kMaxTimeoutS, "a peer silent this long is an error (never a hang)")
      .choice("algo", &O::algo, comm::algorithmChoices(comm::Op::allreduce),
              "allreduce algorithm; auto = the selector (docs/collectives)")
      .choice("allgather", &O::allgather, comm::algorithmChoices(comm::Op::allgather), "allgather(v) algorithm (sparse codecs, ZeRO)")
      .text("tuning", &O::tuning, "a `lowcomm simulate tune` file the automatic allreduce follows")
      .choice("shm", &O::shm, {"auto", "on", "off"}, "shared memory between the ranks of a node")
      .flag("deterministic", &O::deterministic, "reductions in a fixed order: bit-identical runs")
      .flag("debug_check", &O::debug_check, "check before each collective that every rank calls the same one")
      .text("iface", &O::iface, "network interface to bind (default: the one routing to MASTER_ADDR)")
      .text("address", &O::address, "address to bind")
      .integer("streams", &O::streams, 1, comm::kMaxStreams,
               "TCP connections per pair of ranks in different sites; large messages are striped over them; auto = "
               "from the round trip measured at setup (docs/collectives.md)",
               {{"auto", comm::kAutoStreams}})
      .integer("stripe_min_bytes", &O::stripe_min_bytes, 1, kIntMax, "smallest message striped over `streams` connections")
      .integer("eager_max_bytes", &O::eager_max_bytes, 0, 16 << 20,
               "largest message the sites allreduce sends between sites without waiting for the receiver's ready "
               "notice (half a round trip less); 0 = off (docs/collectives.md)")
      .choice("congestion_control", &O::congestion_control, {"system", "cubic", "bbr", "reno"},
              "TCP congestion control of the pair sockets; system = the kernel's default");
  return s;
}

schema::Section<LoggingConfig> loggingSection() {
  using O = LoggingConfig;
  schema::Section<O> s("logging", "where outputs go and how often the run reports");
  s.text("out_dir", &O::out_dir, "run directory: config.toml, metrics.jsonl, summary.json, model_state.pt", true)
      .integer("log_every", &O::log_every, 1, kIntMax, "steps between progress lines / JSONL step records")
      .integer("eval_every", &O::eval_every, 0, kIntMax,
               "steps between test evaluations besides each epoch's end; 0 = epoch ends only")
      .flag("progress", &O::progress, "print progress lines");
  return s;
}

schema::Section<CheckpointConfig> checkpointSection() {
  using O = CheckpointConfig;
  schema::Section<O> s("checkpoint", "resumable checkpoints (torch.load reads them)");
  s.integer("every_steps", &O::every_steps, 0, kIntMax, "0 = only at the end (and every_minutes)")
      .number("every_minutes", &O::every_minutes, schema::Range::closed(0, 1e6),
              "also about this often, converted to steps from the measured rate; 0 = off")
      .integer("keep_last", &O::keep_last, 0, kIntMax, "checkpoints kept (older ones removed once a newer one is durable); 0 = all")
      .text("dir", &O::dir, "empty = <out_dir>/checkpoints");
  return s;
}

}  // namespace lowcomm::train
