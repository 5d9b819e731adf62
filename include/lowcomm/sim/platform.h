// A simulated cluster for `lowcomm simulate` (SimGrid, src/sim). The first platform is the
// emulated cluster's (tools/cluster): `nodes` hosts, each with its own full-duplex link to one
// switch, `ppn` ranks per host; ranks on one host talk through its loopback (shared memory).
#pragma once

#include <string>

namespace lowcomm::sim {

struct PlatformSpec {
  std::string topology = "star";
  int nodes = 4;
  int ppn = 1;
  double link_Bps = 125e6;          // bytes per second, per link and direction (1 Gbit/s)
  double link_latency_s = 50e-6;    // per link: a route between two hosts crosses two links
  double loopback_Bps = 4e9;        // between ranks of one host
  double loopback_latency_s = 0;
  double reduce_Bps = 2e9;          // a core's speed at reductions and copies (bytes per second)
  int cores = 2;                    // per host: ranks of one host share them
  double bandwidth_factor = 1.0;    // achieved / nominal link rate (calibrated)
  // Gloo's rendezvous: a message leaves only once the receiver's "receive posted" notice (one
  // small TCP segment: Ethernet + IP + TCP headers and Gloo's 48-byte preamble) has reached the
  // sender. 0: the sender learns of the post at once.
  double notice_bytes = 114;
  // Time a message waits at its sender before it goes on the wire (the host's part of a
  // message: system calls, Gloo's event loop, scheduling when the cores are oversubscribed).
  // Calibrated from a training run's timeline (simulate calibrate --timeline).
  double message_overhead_s = 0;

  int world() const { return nodes * ppn; }
  int nodeOf(int rank) const { return rank / ppn; }  // ranks fill one node after another
};

// "NxP@RATE" as bench/e2e and tools/cluster write it (4x1@100mbit, 2x2@1gbit; RATE in bit,
// kbit, mbit or gbit per second). Throws ConfigError naming the setting.
PlatformSpec parseSetting(const std::string& setting);

// Bits per second from "100mbit", "1gbit", "25gbit", "500kbit", "1000bit". Throws ConfigError.
double parseRate(const std::string& rate);

// Throws ConfigError naming the field when a value cannot describe a platform.
void validate(const PlatformSpec& p);

}  // namespace lowcomm::sim
