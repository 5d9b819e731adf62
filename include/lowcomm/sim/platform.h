// A simulated cluster for `lowcomm simulate` (SimGrid, src/sim): `nodes` hosts, `ppn` ranks per
// host; ranks on one host talk through its loopback (shared memory). Topologies:
// - "star": the emulated cluster's (tools/cluster): each host has its own full-duplex link to one
//   switch.
// - "fat-tree": two levels. Leaf switches of `leaf_size` hosts (one link each); each leaf has
//   leaf_size / oversubscription uplinks, one to each spine switch (every spine reaches every
//   leaf), so a leaf's uplinks carry 1 / oversubscription of what its hosts can send. Fewer nodes
//   than leaf_size: one leaf.
// - "torus": a 2-D torus of the squarest X x Y = nodes, each host routing to its 4 neighbours.
// - "rail": rail-optimised (NVIDIA DGX SuperPOD style): local rank j of every node has its own
//   NIC on rail switch j, so each rank is a host of its own (max(1, cores / ppn) cores) and the
//   ranks of a node reach each other through one shared memory link (loopback_Bps). A message
//   between two nodes on different rails first crosses the sending node's memory to the rank on
//   the receiver's rail (NCCL's PXN), so no traffic needs a spine: the routes of a rail-only
//   network (Wang et al., 2023). Cross-rail bytes are what inter_leaf counts.
// Every link runs at link_Bps x bandwidth_factor with link_latency_s, split duplex.
// In-network aggregation (star or fat-tree): the switches sum allreduce packets, SwitchML/ATP-
// like; every allreduce over ranks of more than one node then goes through them, a node's ranks
// summing in its shared memory first where the call's ranks of each node are contiguous (else
// each streams its own buffer; src/sim/ina.h, src/sim/run_call.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace lowcomm::sim {

struct PlatformSpec {
  std::string topology = "star";
  int leaf_size = 16;        // fat-tree: hosts per leaf switch
  int oversubscription = 1;  // fat-tree: a leaf's host links / its uplinks
  int nodes = 4;
  int ppn = 1;
  double link_Bps = 125e6;          // bytes per second, per link and direction (1 Gbit/s)
  double link_latency_s = 50e-6;    // per link: a route between two hosts crosses two links
  double loopback_Bps = 4e9;        // between ranks of one host
  double loopback_latency_s = 0;
  double reduce_Bps = 2e9;          // a core's speed at reductions and copies (bytes per second)
  int cores = 2;                    // per host: ranks of one host share them
  // A rank's speed at the copies and sums of its node's shared memory (hier allreduce's node
  // part, src/sim/sim_node.h), bytes per second. Not reduce_Bps: the emulated cluster's ranks share
  // this machine's two cores, caches and memory bandwidth with the other node's, so it is
  // calibrated: from hier rows that ran in shared memory (simulate calibrate --measured: an idle
  // machine, buffers in cache) or from a training run's timeline (--node-timeline: what training
  // leaves of them, several times slower here).
  double node_memory_Bps = 2e9;
  double bandwidth_factor = 1.0;    // achieved / nominal link rate (calibrated)
  // Gloo's rendezvous: a message leaves only once the receiver's "receive posted" notice (one
  // small TCP segment: Ethernet + IP + TCP headers and Gloo's 48-byte preamble) has reached the
  // sender. 0: the sender learns of the post at once.
  double notice_bytes = 114;
  // Time a message waits at its sender before it goes on the wire (the host's part of a
  // message: system calls, Gloo's event loop, scheduling when the cores are oversubscribed),
  // counted from its post, so it overlaps the connection's earlier transfers (a pipelined ring
  // hides it, a latency-bound small collective pays it per hop). Calibrated from a training
  // run's timeline (simulate calibrate --timeline).
  double message_overhead_s = 0;
  // Token-bucket shaped host links (the emulated cluster's `tbf`, tools/cluster): a link that
  // has been idle lets up to this many bytes through at once before its rate applies; its bucket
  // refills at link_Bps while nothing crosses it (empty at time 0, so full after B / link_Bps).
  // Replays only: one collective simulated alone stands for a back-to-back series (no idle
  // spell). Star only; 0: plain links.
  double link_burst_bytes = 0;
  // The shaped links' FIFO queue, in seconds of traffic at the link's rate (tbf's latency). A
  // rendezvous notice waits behind the data its node's way out holds (what the messages crossing it
  // have left to send, at most this much), as tbf makes it wait; with notice_bytes 0 there is no
  // notice to wait. Star only; 0: no queue.
  double link_queue_s = 0;
  // Host time per collective call, by "op/algo" as the simulator runs it ("allreduce/ring",
  // "allreduce/hier", "allgatherv/ring", ...): every rank waits this long before the call's first
  // message. What the links cannot explain, e.g. a per-call floor of several processes sharing
  // few cores, which makes a 4 KiB allreduce cost the same whatever its number of steps.
  // Calibrated per algorithm (simulate calibrate --call-overheads); absent: none.
  std::map<std::string, double> call_overhead_s;
  // In-network aggregation: the unit the switch sums (coarser for buffers over 64 of them) and
  // how many of a rank's chunks may await their sum (the switch's slot pool).
  bool in_network_aggregation = false;
  uint64_t ina_chunk_bytes = 256 << 10;
  int ina_window = 4;
  // Sites (star only; tools/cluster --sites): the nodes split into `sites` contiguous groups of
  // nodes / sites. A site's nodes reach each other over their own links (the star's); between
  // sites a message also crosses the sending site's WAN uplink (up) and the receiving site's (down),
  // each a split-duplex link of wan_Bps x wan_factor. The WAN's latency, (wan_rtt_s +
  // wan_rtt_extra_s) / 2 each way, is not on those links: a message's bytes leave at the links'
  // rate and arrive that much later (its send is complete once they have left, as on a TCP
  // socket), and a rendezvous notice arrives that much after crossing. The host links' tbf burst
  // and queue apply inside a site only: across, the WAN's rate is what shapes a message.
  int sites = 1;
  double wan_Bps = 12.5e6;        // per site uplink and direction, nominal (100 Mbit/s)
  double wan_factor = 1.0;        // achieved / nominal WAN rate (calibrated)
  double wan_rtt_s = 0.05;        // the setting's round trip between two sites
  double wan_rtt_extra_s = 0;     // what the emulated WAN adds to it (calibrated, may be negative)
  // Loss: the fraction of packets the WAN drops each way. SimGrid's flows lose nothing, so a
  // lossy WAN is a cap on every flow crossing it: one TCP stream carries at most
  // mss_bytes / RTT x stream_c / sqrt(wan_loss) bytes per second (Mathis et al. 1997; Reno's
  // stream_c is 1.22, CUBIC does better at a large bandwidth-delay product; calibrated).
  double wan_loss = 0;
  double stream_c = 1.22;
  // The bound as mss_bytes / RTT x stream_c / wan_loss^loss_exponent: Mathis's 0.5, unless rows
  // at two losses or more fit another (CUBIC's response function falls faster with loss).
  double loss_exponent = 0.5;
  double mss_bytes = 1448;
  // Striping (CommOptions::streams, stripe_min_bytes): a message of at least stripe_min_bytes
  // between ranks of different sites travels as `streams` contiguous near-equal pieces, one flow
  // each, in parallel (each under its own loss cap); the message is in once all are.
  int streams = 1;
  uint64_t stripe_min_bytes = 256 << 10;
  // Eager messages (CommOptions::eager_max_bytes): the sites allreduce's messages of at most this
  // many bytes between sites go without waiting for the receiver's notice (its receive was posted
  // before the call). 0 = off.
  uint64_t eager_max_bytes = 64 << 10;

  int world() const { return nodes * ppn; }
  int nodeOf(int rank) const { return rank / ppn; }  // ranks fill one node after another
  // The leaf switch of a node (fat-tree; 0 elsewhere): link classes are intra-node, intra-leaf
  // and across the spine.
  int leafOf(int node) const { return topology == "fat-tree" ? node / leafHosts() : 0; }
  // A rank's leaf switch: its node's on a fat-tree, its rail (local rank) on "rail".
  int leafOfRank(int rank) const { return topology == "rail" ? rank % ppn : leafOf(nodeOf(rank)); }
  int leafHosts() const { return nodes < leaf_size ? nodes : leaf_size; }
  int siteOf(int node) const { return sites > 1 ? node / (nodes / sites) : 0; }
  // Ranks per site (contiguous, as the launcher numbers them); 0 without sites.
  int siteRanks() const { return sites > 1 ? nodes / sites * ppn : 0; }
  double wanRtt() const { return wan_rtt_s + wan_rtt_extra_s; }
  // One TCP stream's bound across the lossy WAN, bytes per second (0: no loss, no bound).
  double streamCapBps() const;
};

// "NxP@RATE" as bench/e2e and tools/cluster write it (4x1@100mbit, 2x2@1gbit; RATE in bit,
// kbit, mbit or gbit per second), with tools/cluster's tbf burst and queue; or a setting of sites
// "SsNxP@LAN/WAN,RTTms[,LOSS%]" (2s2x1@1gbit/100mbit,50ms,0.1%: S sites of N nodes of P
// processes, LAN and WAN rates, round trip and loss in percent), also with every '/' written as
// '-' (bench/e2e's run directories). Throws ConfigError naming the setting.
PlatformSpec parseSetting(const std::string& setting);

// The burst of tools/cluster's tbf at `link_Bps`: 4 ms of traffic, at least 128 KiB (one GSO
// super-packet must fit). Its queue: 50 ms (kEmulatedQueueS).
double emulatedBurstBytes(double link_Bps);
constexpr double kEmulatedQueueS = 0.05;

// Bits per second from "100mbit", "1gbit", "25gbit", "500kbit", "1000bit". Throws ConfigError.
double parseRate(const std::string& rate);

// Throws ConfigError naming the field when a value cannot describe a platform.
void validate(const PlatformSpec& p);

}  // namespace lowcomm::sim
