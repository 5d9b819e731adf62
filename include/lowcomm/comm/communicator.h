// Communicator: collectives written by us over Gloo's point-to-point (unbound) buffers.
//
// Contract:
// - Collectives are called by every rank of the communicator in the same order with matching
//   arguments (op, count, dtype, root). With `debug_check`, a fingerprint exchange before each
//   collective turns a mismatch into MismatchError naming the ranks instead of a hang or garbage.
// - Every operation finishes within `timeout` or throws: TimeoutError/PeerError name the peer
//   rank that was being waited for; a peer that died gives PeerError.
// - Buffers are plain memory (pointer + element count + dtype); f16/bf16 are reduced in f32
//   (each addition computed in f32, rounded once per step).
// - Results of allreduce are identical on every rank. With `deterministic`, they are also
//   independent of algorithm and timing: every element is summed in rank order 0..n-1.
// - One thread at a time per Communicator. Communicators made by split() are independent and
//   may be used from other threads. abort() is the exception: any thread, any time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lowcomm/base/trace.h"
#include "lowcomm/comm/algorithm_table.h"
#include "lowcomm/comm/dtype.h"
#include "lowcomm/comm/topology.h"
#include "lowcomm/comm/traffic.h"
#include "lowcomm/net/store.h"
#include "lowcomm/net/transport.h"

namespace lowcomm::comm {

// Shared memory for allreduce when every rank is on this host (same host key, lowcomm/net/shm.h):
// automatic uses it when available, on requires it (ConfigError otherwise), off never.
enum class ShmMode : uint8_t { automatic, on, off };
ShmMode parseShmMode(const std::string& s);

class TunedTable;  // lowcomm/comm/tuned_table.h

constexpr int kMaxStreams = 64;  // CommOptions::streams
constexpr int kAutoStreams = 0;  // CommOptions::streams: chosen from the measured round trip
// "auto" -> kAutoStreams, "1" .. "64" -> that many; ConfigError naming `what` otherwise.
int parseStreams(const std::string& text, const std::string& what = "streams");

struct CommOptions {
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};  // every operation
  std::chrono::milliseconds connect_timeout{0};  // rendezvous and split(); 0 = `timeout`
  bool deterministic = false;   // allreduce always uses the rank-ordered algorithm
  bool debug_check = false;     // fingerprint exchange before every collective
  Algo allreduce_algo = Algo::automatic;
  Algo allgather_algo = Algo::automatic;  // allgather(v) when the call names none (ring, hierarchical)
  // The automatic allreduce from a tuning file (`lowcomm simulate tune`) where it has rules for
  // this communicator's (size, group_size); else the fixed size table (selector.h).
  std::shared_ptr<const TunedTable> tuned;
  size_t segment_bytes = 1 << 20;  // pipelining granularity of ring/tree algorithms
  // hierarchical, rails: ranks per group (a node); 0 = LOCAL_WORLD_SIZE passed in. sites: its
  // groups are the topology's sites when the ranks span sites, else these groups (groupFor).
  int group_size = 0;
  ShmMode shm = ShmMode::automatic;
  size_t shm_piece_bytes = 256 << 10;  // shared-memory pipelining unit (two per rank are mapped)
  // The job token: when set, every connected pair proves it to the other (HMAC challenge-response)
  // before any collective, also in split() communicators; AuthError names a peer that cannot.
  // Empty: no pair authentication (ranks as threads of one process).
  std::string auth_token;
  // The site this rank runs in (the launcher's LOWCOMM_SITE); -1 = unknown. Every rank learns
  // every rank's site at creation (topology()); the traffic meter then counts bytes to peers of
  // another site as "inter-site".
  int site = -1;
  // TCP connections per pair of ranks in different sites, 1..64, or kAutoStreams. With k > 1 and
  // ranks in more than one site, every communicator (also split()) connects k - 1 further
  // authenticated meshes, and a message of at least stripe_min_bytes between two sites travels as
  // k pieces, one per connection (docs/collectives.md: striping). Pairs inside a site never
  // stripe. 1 = one mesh. kAutoStreams: each communicator whose ranks span sites measures its
  // cross-site round trip at creation and every rank takes the same k from it (src/comm/
  // streams_auto.h: 1 on a LAN-like round trip); without sites nothing is measured and k = 1.
  int streams = kAutoStreams;
  size_t stripe_min_bytes = 256 << 10;
  // Messages of up to eager_max_bytes that the sites allreduce sends between sites leave without
  // waiting for the receiver's ready notice (half a round trip less per WAN exchange): each rank
  // keeps 4 receives of that size posted per partner in the other sites (src/comm/eager.h).
  // 0 = off. Only when the ranks span sites.
  size_t eager_max_bytes = 64 << 10;
  // TCP congestion control of this communicator's pair sockets ("cubic", "bbr", "reno", ...);
  // "" or "system" = the system default. ConfigError when the kernel does not offer it.
  std::string congestion_control;

  std::chrono::milliseconds rendezvousTimeout() const { return connect_timeout.count() > 0 ? connect_timeout : timeout; }
};

// The algorithm CommOptions::congestion_control sets, or "" for the system default ("" and
// "system"). ConfigError naming `name` and listing /proc/sys/net/ipv4/tcp_available_congestion_control
// when the kernel does not offer it.
std::string checkCongestionControl(const std::string& name);

// A warning for ranks that span sites when their pair sockets use a congestion control that
// restarts from its initial window after an idle retransmission timeout (everything but bbr, with
// net.ipv4.tcp_slow_start_after_idle = 1): every synchronisation across the WAN then starts
// slow. "" when none applies. `congestion_control` as in CommOptions ("" or "system": this
// namespace's default); the sysctls are this process's network namespace's.
std::string idleRestartWarning(bool spans_sites, const std::string& congestion_control);
// The rule itself, on given values (`effective`: the algorithm the sockets use).
std::string idleRestartWarning(bool spans_sites, const std::string& effective, int slow_start_after_idle);

// An allgather(v) algorithm and the group size it runs with (hierarchical: ranks per group).
struct AllgatherChoice {
  Algo algo = Algo::ring;
  int group_size = 0;
};

class Link;
class ShmDomain;

class Communicator {
 public:
  // Rendezvous over `store` and connect a full mesh. Collective across `size` ranks.
  static std::shared_ptr<Communicator> create(std::shared_ptr<net::Store> store, int rank, int size,
                                              const CommOptions& opts = {},
                                              const net::TransportOptions& transport = {});
  ~Communicator();

  int rank() const { return rank_; }
  int size() const { return size_; }
  const CommOptions& options() const { return opts_; }
  void setOptions(const CommOptions& opts) { opts_ = opts; }

  // In place: buf holds count elements on every rank.
  void allreduce(void* buf, size_t count, DType dt, ReduceOp op, Algo algo = Algo::automatic);
  // From `root` to every rank: the binomial tree or the pipelined chain (Algo::tree, Algo::chain;
  // automatic: autoBroadcast by size); another algorithm is a ConfigError.
  void broadcast(void* buf, size_t count, DType dt, int root, Algo algo = Algo::automatic);
  // recv holds size()*count elements, rank i's block at i*count. The ring or the hierarchical
  // algorithm (Algo::ring, Algo::hierarchical over options().group_size; automatic:
  // chooseAllgather, hierarchical by site across sites); another algorithm is a ConfigError.
  void allgather(const void* send, void* recv, size_t count, DType dt, Algo algo = Algo::automatic);
  // recv holds sum(counts) elements, rank i's block after those of ranks < i.
  // counts[rank()] must equal send_count. Algorithms as allgather().
  void allgatherv(const void* send, size_t send_count, void* recv, const std::vector<size_t>& counts, DType dt,
                  Algo algo = Algo::automatic);
  // send holds size()*recv_count elements; rank i receives the reduction of block i. In place
  // (recv is block rank() of send) it reduces in `send` itself instead of a copy of it; the other
  // blocks of `send` then hold partial sums.
  void reduceScatter(const void* send, void* recv, size_t recv_count, DType dt, ReduceOp op);
  // send and recv hold size()*count elements; block j of send goes to rank j.
  void alltoall(const void* send, void* recv, size_t count, DType dt);
  void barrier();
  // Point-to-point; tag distinguishes messages between the same pair. send() returns once the
  // receiver has posted the matching recv (rendezvous, like MPI_Ssend): order calls to avoid cycles.
  void send(const void* buf, size_t bytes, int dst, uint32_t tag = 0);
  void recv(void* buf, size_t bytes, int src, uint32_t tag = 0);
  // Posts every send and receive at once and returns when all completed (like a batch of
  // MPI_Isend/MPI_Irecv and MPI_Waitall): a ring of exchange() calls cannot deadlock, and a rank
  // sending to both neighbours while receiving from both uses each link in both directions at
  // once. Messages match plain send()/recv() with the same tag. At most one send and one receive
  // per peer in one call (ConfigError otherwise, or for this rank or a rank out of range).
  struct P2P {
    int peer;
    void* buf;  // a send's buffer is only read
    size_t bytes;
  };
  void exchange(const std::vector<P2P>& sends, const std::vector<P2P>& recvs, uint32_t tag = 0);
  // Receives one message of `bytes` with `tag` from whichever rank of `srcs` sends it first and
  // returns that rank (a parameter server's receive from any worker). Matches plain send() and
  // exchange() with the same tag. ConfigError for an empty list, this rank or a rank out of
  // range; a timeout (TimeoutError) names every candidate.
  int recvAny(void* buf, size_t bytes, const std::vector<int>& srcs, uint32_t tag = 0);

  // Non-blocking point-to-point (MPI_Isend/MPI_Irecv): isend()/irecv() post the message and
  // return at once; Request::wait() blocks until it completed (a send: the receiver took it) or
  // throws what send()/recv() would, the timeout counted from the post. The buffer must stay
  // valid until wait() returned. Requests match send()/recv()/exchange() with the same tag,
  // in posting order per (peer, tag); they may be waited in any order and from another thread
  // than the one that posted them. A request destroyed unwaited while in flight poisons the
  // communicator (its state is unknown). Do not mix them with collectives running on this
  // communicator from another thread: give point-to-point traffic its own split().
  class Request {
   public:
    struct Impl;
    explicit Request(std::unique_ptr<Impl> impl);
    ~Request();
    void wait();
    bool done() const;
    int peer() const;

   private:
    std::unique_ptr<Impl> impl_;
  };
  std::unique_ptr<Request> isend(const void* buf, size_t bytes, int dst, uint32_t tag = 0);
  std::unique_ptr<Request> irecv(void* buf, size_t bytes, int src, uint32_t tag = 0);

  // Ends this communicator and every one split from it (or it from, transitively: they share one
  // abort state) for good, from any thread: every wait in flight on any of them returns within
  // milliseconds (TCP, lanes, eager messages; shared memory within 20 ms), and it and every later
  // call throw AbortedError naming `why`; the connections close, so the peers' waits on this
  // rank fail at once too. For a membership change: the work in flight is redone on the next
  // epoch's communicator (docs/elastic.md). Idempotent; the first reason stays.
  void abort(const std::string& why);
  bool aborted() const;

  // Collective: ranks with the same color form a new communicator, ordered by (key, rank).
  // color < 0 returns nullptr. The child shares this communicator's traffic meter (the split's
  // own exchange is counted under op "setup").
  std::shared_ptr<Communicator> split(int color, int key);
  // Collective: one communicator of 2 * size() ranks in which this process holds two ranks,
  // rank() and size() + rank(), returned as two objects {first, second} (e.g. a worker and a
  // parameter-server role). The two may be used from two threads at once; both share this
  // communicator's traffic meter.
  std::pair<std::shared_ptr<Communicator>, std::shared_ptr<Communicator>> splitRoles();

  // Records every collective call (op, algorithm, bytes, dtype; allgatherv's per-rank bytes) as a
  // timeline event of category "collective" on the calling thread's lane (Trace::threadLane), so
  // `lowcomm simulate replay` can rerun the calls. nullptr stops it. Communicators made by
  // split() afterwards record to the same trace, with their members' ranks in the root
  // communicator (arg "ranks") when those differ from their own. Point-to-point calls are events
  // of category "p2p" named after the call (send, recv, exchange, isend, irecv, and a request's
  // "wait"), with "sends"/"recvs" as "peer:bytes,..." in root ranks, "tag", and a posted
  // request's id ("req") on its post and its wait, and the communicator ("comm": its store
  // prefix). recvAny() is recorded as "recv_any", which the simulator does not replay.
  void setTrace(Trace* trace) { trace_ = trace; }

  // Phase label for the traffic meter (e.g. "grad", "sync").
  void setPhase(const std::string& phase);
  const std::string& phase() const;
  // Starts at zero when create() returns (rendezvous traffic is not counted).
  TrafficMeter& meter() { return *meter_; }
  std::shared_ptr<TrafficMeter> sharedMeter() const { return meter_; }

  // The algorithm allreduce would use for this many bytes (after options and forcing; the order
  // and the sites rule: selector.h). Forcing `sites` over sites that are not contiguous blocks
  // (Topology::siteBlock) is a ConfigError.
  Algo chooseAllreduce(size_t bytes, Algo forced = Algo::automatic) const;
  // The algorithm and group size allgather(v) would use: `forced` (or options().allgather_algo)
  // over options().group_size, else autoAllgather (selector.h: hierarchical by site across sites).
  AllgatherChoice chooseAllgather(Algo forced = Algo::automatic) const;
  // Whether every rank runs on this host (same network namespace), so shared memory works.
  bool allLocal() const { return all_local_; }
  // Node of every rank: ranks with the same host key (same machine and network namespace) share
  // a number; nodes are numbered 0, 1, ... in order of their lowest rank.
  const std::vector<int>& nodeOf() const { return topology_.node_of; }
  // Node and site of every rank (the same on every rank of this communicator).
  const Topology& topology() const { return topology_; }
  // TCP connections per pair of ranks in different sites: options().streams (or, for
  // kAutoStreams, the k chosen at creation) when the ranks span sites, else 1.
  int streams() const;
  // The cross-site round trip (seconds) that kAutoStreams measured at creation, the largest of
  // every cross-site pair; 0 when nothing was measured (a fixed k, or no sites).
  double crossSiteRtt() const { return cross_site_rtt_; }
  // The piece size of the hierarchical groups' shared memory once a hierarchical allreduce has
  // mapped it (each node's part then runs in shared memory); 0 before that or when the groups
  // talk TCP (shm off, a group spanning hosts, or mapping failed).
  size_t nodePiece() const;

 private:
  Communicator(std::shared_ptr<net::Store> store, std::string prefix, int rank, int size, CommOptions opts,
               std::shared_ptr<TrafficMeter> meter, std::unique_ptr<Link> link);
  void checkFingerprint(const char* op, size_t count, DType dt, int extra);
  // Host keys (and, unless `sites` gives them, sites) of every rank; then connectStreams().
  void detectLocality(std::vector<int> sites = {});
  void setSites(std::vector<int> sites);
  // The group size algorithm `a` runs with: the site size (topology_.siteBlock()) for the sites
  // algorithm when the ranks span sites in that layout, else options().group_size.
  int groupFor(Algo a) const;
  void connectStreams();  // the further meshes when striping applies (early_streams_ if connected ahead)
  std::vector<std::unique_ptr<Link>> early_streams_;
  void openEagerInbox();  // eager receives from the other sites' ranks at this rank's index
  std::shared_ptr<Communicator> joinRole(const std::string& prefix, int rank, int size);
  // Runs `how` (its group_size: hierarchical's groups) without choosing; "setup" calls record nothing.
  void allgatherImpl(const void* send, size_t send_count, void* recv, const std::vector<size_t>& counts, DType dt,
                     const char* op, AllgatherChoice how);
  ShmDomain* shmDomain();  // maps the segment on first use; nullptr when shared memory is unusable
  // The shared memory of this rank's hierarchical group (group_size contiguous ranks), mapped by
  // every rank at its first hierarchical allreduce; nullptr when shm is off, a group spans hosts
  // or mapping failed anywhere (then the groups talk TCP). Collective on first call.
  ShmDomain* nodeShm();
  bool voteAll(bool ok, TrafficMeter& meter);  // collective AND over TCP, its traffic on `meter`
  // The store prefix of the next ShmDomain::create try under `base` (counted in `tries`).
  static std::string shmTryPrefix(const std::string& base, int& tries);

  std::shared_ptr<net::Store> store_;
  std::string prefix_;
  int rank_;
  int size_;
  CommOptions opts_;
  std::shared_ptr<TrafficMeter> meter_;
  std::unique_ptr<Link> link_;
  uint64_t splits_ = 0;
  std::string phase_;
  bool all_local_ = false;
  Topology topology_;
  int site_block_ = 0;  // topology_.siteBlock(), set with the sites
  double cross_site_rtt_ = 0;
  std::unique_ptr<ShmDomain> shm_;
  std::unique_ptr<ShmDomain> node_shm_;
  bool node_shm_tried_ = false;
  int shm_tries_ = 0, node_shm_tries_ = 0;  // ShmDomain::create calls so far (shm = on retries after a failure)
  Trace* trace_ = nullptr;
  std::atomic<uint64_t> p2p_requests_{0};  // posted requests so far: their ids on the timeline
  std::vector<int> world_ranks_;  // this communicator's ranks in the root one (split); empty: the same
};

}  // namespace lowcomm::comm
