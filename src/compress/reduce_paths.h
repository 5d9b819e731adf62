// The three ways a codec's payloads meet (Codec::combine()), as collectives over a communicator.
//
// Contract (all three): collective over `comm`; x[0..n) holds this rank's (memory-compensated)
// values on entry and the decoded average over the ranks on return, identical on every rank.
// Right after encoding, before any communication, `mem` (may be null) gets update(key, x, approx)
// with approx = the local decode of this rank's payload. Returns the bytes this rank encoded for
// its own values (the compressed size of its gradient, used for the compression ratio).
#pragma once

#include <cstdint>
#include <vector>

#include "lowcomm/comm/communicator.h"
#include "lowcomm/compress/codec.h"
#include "lowcomm/compress/memory.h"

namespace lowcomm::compress {

// Reusable buffers, grown on demand.
struct PathScratch {
  std::vector<uint8_t> send, recv;
  std::vector<float> tmp, approx;
  double comm_s = 0;  // time the paths spent in collectives (added to, never reset here)
};

// allreduce: x/world is encoded, the payloads summed in the codec's wire type, decoded.
size_t reduceSummable(comm::Communicator& comm, const Codec& codec, float* x, size_t n, EncodeCtx ctx, Memory* mem,
                      int key, PathScratch& s);
// two_phase: chunk j of every rank goes to rank j (alltoall of fixed-size payloads); rank j
// decodes and averages them, adds its `server` memory (may be null; error feedback for the
// second compression, as in 1-bit Adam), re-encodes, and the chunks are allgathered.
size_t reduceTwoPhase(comm::Communicator& comm, const Codec& codec, float* x, size_t n, EncodeCtx ctx, Memory* mem,
                      Memory* server, int key, PathScratch& s);
// allgather: payload sizes, then payloads (allgatherv); every rank decodes all in rank order.
size_t reduceGather(comm::Communicator& comm, const Codec& codec, float* x, size_t n, EncodeCtx ctx, Memory* mem,
                    int key, PathScratch& s);

// Element range [begin, end) of chunk j when n values are split over `world` chunks whose
// boundaries are multiples of `align`; trailing chunks may be short or empty.
std::pair<size_t, size_t> chunkRange(size_t n, int world, size_t align, int j);

}  // namespace lowcomm::compress
