#include "lowcomm/runtime/worker.h"

#include <ATen/Parallel.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <future>
#include <random>
#include <thread>

#include "lowcomm/base/error.h"
#include "lowcomm/net/membership.h"

namespace lowcomm::runtime {

namespace {
// The soft fd limit up to the hard one (often 1024 of 1048576): a rank of a large job holds two
// sockets per peer, and rank 0 the rendezvous store's clients too.
void raiseFdLimit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
}
}  // namespace

int pinTorchThreads(int local_world) {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int n = std::max(1, hw / std::max(1, local_world));
  at::set_num_threads(n);
  return n;
}

std::string jobTokenFromEnv(int world) {
  if (const char* t = std::getenv("LOWCOMM_JOB_TOKEN"); t && *t) {
    if (std::strlen(t) < 16) throw ConfigError("environment variable LOWCOMM_JOB_TOKEN is shorter than 16 characters");
    return t;
  }
  if (world == 1) {
    std::random_device rd;
    return "single-rank-" + std::to_string(rd()) + std::to_string(rd()) + std::to_string(rd());
  }
  throw ConfigError(
      "environment variable LOWCOMM_JOB_TOKEN is not set: `lowcomm launch` sets it for its workers; under "
      "torchrun, srun or mpirun export the same secret on every rank, e.g. "
      "LOWCOMM_JOB_TOKEN=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \\n')");
}

Worker initWorker(const WorkerOptions& opts) {
  auto env = net::detectWorkerEnv();
  if (!env)
    throw ConfigError(
        "no launcher environment: set RANK and WORLD_SIZE (and MASTER_ADDR, MASTER_PORT), start through "
        "`lowcomm launch`, torchrun, srun (SLURM_PROCID/SLURM_NTASKS) or mpirun (OMPI_COMM_WORLD_*, PMI_*)");
  // On an emulated cluster every "node" shares this machine's cores: the launcher says how many
  // processes it started here (LOWCOMM_PROCS_ON_HOST), which LOCAL_WORLD_SIZE no longer is.
  int sharing = env->local_world;
  if (const char* on_host = std::getenv("LOWCOMM_PROCS_ON_HOST"); on_host && std::atoi(on_host) > 0)
    sharing = std::atoi(on_host);
  if (opts.pin_threads) pinTorchThreads(sharing);
  raiseFdLimit();  // pairs, shared memory, files and (rank 0) the rendezvous store's clients
  Worker w;
  w.env = *env;
  w.watch = std::make_shared<LauncherWatch>(launcherPidFromEnv(), "rank " + std::to_string(env->rank));
  const auto rendezvous = opts.rendezvous_timeout.count() > 0 ? opts.rendezvous_timeout : opts.comm.timeout;
  const std::string token = jobTokenFromEnv(env->world);
  const int site = net::siteFromEnv();  // before the rendezvous: a bad value fails this rank at once
  const ElasticEnv elastic = elasticFromEnv(env->rank, env->world);
  if (env->rank == 0 && elastic.slot < 0)
    w.server = std::make_shared<net::RdzvServer>(env->master_addr, env->master_port, token);
  w.connect = [addr = env->master_addr, port = env->master_port, token, rendezvous] {
    return std::make_shared<net::RdzvClient>(addr, port, token, rendezvous);
  };
  w.store = w.connect();
  comm::CommOptions co = opts.comm;
  co.auth_token = token;  // every Gloo pair proves it too
  if (co.group_size == 0) co.group_size = env->local_world;
  if (co.site < 0) co.site = site;  // the launcher's site of this rank (absent: unknown)
  co.connect_timeout = rendezvous;
  w.comm_options = co;
  w.transport = opts.transport;
  if (w.transport.route_to.empty()) w.transport.route_to = env->master_addr;  // listen where the job rendezvouses
  if (elastic.slot >= 0) {
    w.membership = std::make_shared<MembershipMonitor>(w.connect, elastic);
    if (!elastic.joining()) joinNextEpoch(w, 0, rendezvous);  // a replacement joins once it is ready
    return w;
  }
  try {
    w.comm = comm::Communicator::create(w.store, env->rank, env->world, co, w.transport);
  } catch (const TimeoutError& e) {
    throw TimeoutError("rank " + std::to_string(env->rank) + ": " + e.what());
  }
  return w;
}

namespace {
// The epoch's communicator, or AbortedError as soon as the monitor aborts the epoch's store.
// A Gloo pair waiting for a peer that has moved on to the next epoch is not woken by the store's
// abort (it waits up to net::kPairConnectTime, 30 s); the connection then goes on, abandoned, on
// a thread of its own that owns everything it uses, and ends within that time.
std::shared_ptr<comm::Communicator> connectEpoch(std::shared_ptr<net::Store> store, net::RdzvClient& client, int rank,
                                                 int size, comm::CommOptions co, net::TransportOptions transport) {
  auto task = std::make_shared<std::packaged_task<std::shared_ptr<comm::Communicator>()>>(
      [store = std::move(store), rank, size, co = std::move(co), transport = std::move(transport)] {
        return comm::Communicator::create(store, rank, size, co, transport);
      });
  auto done = task->get_future();
  std::thread([task] { (*task)(); }).detach();
  while (done.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready)
    if (client.aborted()) client.check("elastic/epoch");  // throws the abort's AbortedError
  return done.get();
}
}  // namespace

void joinNextEpoch(Worker& w, int64_t after, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  w.comm.reset();
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    const net::Epoch e = w.membership->awaitNext(*w.store, after, std::max(left, std::chrono::milliseconds(1)));
    auto client = w.connect();
    w.membership->watch(e.number, nullptr, client);
    try {
      auto store = std::make_shared<net::PrefixStore>(client, net::membership::commPrefix(e.number));
      comm::CommOptions co = w.comm_options;
      if (co.streams == comm::kAutoStreams && e.streams > 0) co.streams = e.streams;
      auto comm = connectEpoch(store, *client, e.rankOf(w.membership->env().slot), static_cast<int>(e.members.size()),
                               co, w.transport);
      w.membership->watch(e.number, comm, client);
      // The k that `auto` chose from this epoch's round trip stays the job's: the launcher hands
      // it to every later epoch, whose members then connect their stream meshes alongside the
      // first one (communicator.cpp) instead of after measuring again.
      if (w.comm_options.streams == comm::kAutoStreams && e.streams == 0 && comm->streams() > 1 &&
          !client->check(net::membership::chosenStreamsKey()))
        client->set(net::membership::chosenStreamsKey(), net::toBytes(std::to_string(comm->streams())));
      w.comm = std::move(comm);
      w.epoch_store = std::move(client);
      w.epoch = e;
      return;
    } catch (const Error& ex) {
      // A member died while the others connected (its closed sockets, or our abort when the
      // launcher's next epoch came first): join the next epoch, which awaitNext waits for.
      if (!dynamic_cast<const AbortedError*>(&ex) && !dynamic_cast<const PeerError*>(&ex) &&
          !dynamic_cast<const TimeoutError*>(&ex))
        throw;
      after = e.number;
    }
  }
}

}  // namespace lowcomm::runtime
