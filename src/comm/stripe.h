// Striping a message over a Link's streams (private to the comm layer).
//
// On a lossy, high-latency path one TCP stream is held to the Mathis bound (about
// MSS / (RTT * sqrt(loss)): ~4 Mbit/s at 50 ms and 0.5 % loss, however fast the link), so a pair of
// ranks in different sites sends a large message as k pieces over k connections (Link streams,
// each a Gloo mesh of its own). Contract shared by sender and receiver:
// - A message is striped iff Link::stripes(peer, bytes) — the same answer on both sides, since
//   sites, streams and stripe_min are the same on every rank of a communicator. Collective
//   messages among them travel on lanes instead (lanes.h: Link::laned); these fixed pieces are
//   for point-to-point messages, whose receiver may learn the sender only from piece 0.
// - Piece j of k covers [offset, offset + bytes) given by stripePiece(bytes, k, j): contiguous,
//   near-equal (the first bytes % k pieces one byte longer), every piece non-empty when bytes >= k.
// - Piece j travels on stream j under the message's own slot: each stream's pair is a separate
//   TCP connection with its own slot matching, so equal slots on different streams never meet.
// - The message completes when every piece has; the traffic meter records it once, with its
//   payload bytes (the same as unstriped).
#pragma once

#include <cstddef>

namespace lowcomm::comm {

struct Piece {
  size_t offset;
  size_t bytes;
};

Piece stripePiece(size_t bytes, int k, int j);

}  // namespace lowcomm::comm
