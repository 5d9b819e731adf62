// The automatic number of streams per cross-site pair (CommOptions::streams = kAutoStreams;
// private to the comm layer).
//
// Why: one loss-based TCP stream (CUBIC, Reno) carries at most its Mathis bound
//   B(rtt, p) = MSS / rtt * C / sqrt(p),  C = sqrt(3/2),
// whatever the link's rate; k streams carry about k B until the link is full (stripe.h).
//
// The rule (autoStreams, a pure function of what was measured):
//   k = 1                                  when rtt < kLanRtt (a LAN: no stream is loss-bound
//                                          there at any plausible loss; pairs keep one connection)
//   k = clamp(ceil(rate / B(rtt, p)), 1, kAutoMaxStreams)   otherwise,
// where p and rate are the measured loss and delivery rate when known, else the design values
// kDesignLoss and kDesignRate: the worst loss and the fastest pair share auto is built to fill.
//
// When it runs: once per communicator, at creation, and only when its ranks span sites (a
// communicator without sites opens one mesh and measures nothing, exactly as with streams = 1).
// Every rank then measures its cross-site pair sockets (TCP_INFO after the authenticated
// handshake and the locality exchange: tcpi_min_rtt, the smallest RTT sample, which delayed ACKs
// cannot inflate), the ranks exchange their largest, and all decide k from the largest RTT of
// the communicator — so every rank holds the same k, which striping requires (stripe.h: sender
// and receiver derive the pieces from k). A fresh connection has carried a few hundred bytes: its
// loss and delivery rate say nothing yet, so the decision at creation uses the design values
// for both, and k stays fixed for the communicator's life (a message's pieces are posted before
// any of its bytes move, so changing k per message would need the two ends to agree on every
// message; see docs/collectives.md).
#pragma once

#include <chrono>

namespace lowcomm::comm {

class Link;

constexpr double kLanRtt = 2e-3;           // seconds
constexpr double kDesignLoss = 0.01;       // 1 %: the lossiest WAN
constexpr double kDesignRate = 12.5e6;     // bytes/s per pair: 100 Mbit/s
// Each further stream is one more mesh to connect at creation (~1.6 s across a 50 ms WAN, about
// 32 round trips of store calls and pair handshakes); they connect at once, so 16 cost ~2 s more
// than one per communicator that spans sites and 32 ~3.5 s; 32 measured 15-20 % faster at 0.5 %
// loss (docs/collectives.md).
constexpr int kAutoMaxStreams = 16;
constexpr double kDefaultMss = 1448;       // bytes: Ethernet's 1500 minus IPv4, TCP and timestamps

// What is known of a path; a value <= 0 (loss < 0) is unknown.
struct PathSample {
  double rtt_s = 0;     // unknown: treated as a LAN
  double loss = -1;     // retransmitted / sent segments; 0 is a measured clean path
  double rate_Bps = 0;  // what the pair should carry
  double mss = 0;
};

// One loss-based stream's bound in bytes/s; infinite for loss 0.
double mathisBound(double rtt_s, double loss, double mss);

// The rule above: 1 .. kAutoMaxStreams.
int autoStreams(const PathSample& path);

// Collective over the link: the largest tcpi_min_rtt (seconds) of any pair socket between ranks
// of different sites, over every rank (0 when none was found). `timeout` bounds the exchanges.
double measureCrossSiteRtt(Link& link, std::chrono::milliseconds timeout);

}  // namespace lowcomm::comm
