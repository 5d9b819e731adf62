#include "reduce_paths.h"

#include <algorithm>
#include <chrono>

#include "lowcomm/base/error.h"

namespace lowcomm::compress {

namespace {

// Runs one collective and adds its time to s.comm_s.
template <typename F>
void timed(PathScratch& s, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  s.comm_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void afterEncode(const Codec& codec, const uint8_t* payload, size_t bytes, const float* x, size_t n, float scale,
                 const EncodeCtx& ctx, Memory* mem, int key, PathScratch& s) {
  if (!mem || !mem->needsApprox()) {
    if (mem) mem->update(key, x, nullptr, n);
    return;
  }
  s.approx.resize(n);
  codec.decode(payload, bytes, n, s.approx.data(), scale, false, ctx);
  mem->update(key, x, s.approx.data(), n);
}

}  // namespace

std::pair<size_t, size_t> chunkRange(size_t n, int world, size_t align, int j) {
  size_t per = (n + world - 1) / world;
  per = (per + align - 1) / align * align;
  const size_t b = std::min(n, per * j);
  return {b, std::min(n, b + per)};
}

size_t reduceSummable(comm::Communicator& comm, const Codec& codec, float* x, size_t n, EncodeCtx ctx, Memory* mem,
                      int key, PathScratch& s) {
  const int world = comm.size();
  const float inv = 1.0f / static_cast<float>(world);
  s.tmp.resize(n);
  for (size_t i = 0; i < n; ++i) s.tmp[i] = x[i] * inv;  // pre-divide: partial sums stay in range
  s.send.resize(codec.maxBytes(n));
  const size_t bytes = codec.encode(s.tmp.data(), n, s.send.data(), ctx);
  afterEncode(codec, s.send.data(), bytes, x, n, static_cast<float>(world), ctx, mem, key, s);
  const size_t esize = comm::dtypeSize(codec.wireType());
  LC_ENFORCE(bytes % esize == 0, "codec ", codec.name(), " produced ", bytes, " bytes, not whole ", esize, "-byte values");
  timed(s, [&] { comm.allreduce(s.send.data(), bytes / esize, codec.wireType(), comm::ReduceOp::sum); });
  codec.decode(s.send.data(), bytes, n, x, 1.0f, false, ctx);
  return bytes;
}

size_t reduceTwoPhase(comm::Communicator& comm, const Codec& codec, float* x, size_t n, EncodeCtx ctx, Memory* mem,
                      Memory* server, int key, PathScratch& s) {
  const int world = comm.size(), me = comm.rank();
  const size_t align = std::max<size_t>(1, codec.alignment());
  const auto [b0, e0] = chunkRange(n, world, align, 0);
  const size_t slot = codec.maxBytes(e0 - b0);  // chunk 0 is the longest
  s.send.assign(slot * world, 0);
  size_t produced = 0;
  for (int j = 0; j < world; ++j) {
    const auto [b, e] = chunkRange(n, world, align, j);
    ctx.chunk = j;
    produced += codec.encode(x + b, e - b, s.send.data() + j * slot, ctx);
  }
  if (mem && mem->needsApprox()) {
    s.approx.resize(n);
    for (int j = 0; j < world; ++j) {
      const auto [b, e] = chunkRange(n, world, align, j);
      ctx.chunk = j;
      codec.decode(s.send.data() + j * slot, codec.maxBytes(e - b), e - b, s.approx.data() + b, 1.0f, false, ctx);
    }
    mem->update(key, x, s.approx.data(), n);
  } else if (mem) {
    mem->update(key, x, nullptr, n);
  }
  s.recv.resize(slot * world);
  timed(s, [&] { comm.alltoall(s.send.data(), s.recv.data(), slot, comm::DType::u8); });

  // This rank owns chunk `me`: average the world encodings of it, then re-encode the average.
  const auto [mb, me_end] = chunkRange(n, world, align, me);
  const size_t len = me_end - mb;
  s.tmp.assign(len, 0.0f);
  ctx.chunk = me;
  for (int r = 0; r < world; ++r) {
    EncodeCtx from = ctx;
    from.rank = r;
    codec.decode(s.recv.data() + r * slot, codec.maxBytes(len), len, s.tmp.data(), 1.0f / world, true, from);
  }
  ctx.chunk = world + me;
  if (server) server->compensate(key, s.tmp.data(), len);
  std::vector<uint8_t> mine(slot, 0);
  codec.encode(s.tmp.data(), len, mine.data(), ctx);
  if (server) afterEncode(codec, mine.data(), codec.maxBytes(len), s.tmp.data(), len, 1.0f, ctx, server, key, s);
  s.recv.resize(slot * world);
  timed(s, [&] { comm.allgather(mine.data(), s.recv.data(), slot, comm::DType::u8); });
  for (int j = 0; j < world; ++j) {
    const auto [b, e] = chunkRange(n, world, align, j);
    EncodeCtx from = ctx;
    from.rank = j;
    from.chunk = world + j;
    codec.decode(s.recv.data() + j * slot, codec.maxBytes(e - b), e - b, x + b, 1.0f, false, from);
  }
  return produced;
}

size_t reduceGather(comm::Communicator& comm, const Codec& codec, float* x, size_t n, EncodeCtx ctx, Memory* mem,
                    int key, PathScratch& s) {
  const int world = comm.size();
  s.send.resize(codec.maxBytes(n));
  const size_t bytes = codec.encode(x, n, s.send.data(), ctx);
  afterEncode(codec, s.send.data(), bytes, x, n, 1.0f, ctx, mem, key, s);
  std::vector<int64_t> sizes(world);
  const int64_t mine = static_cast<int64_t>(bytes);
  timed(s, [&] { comm.allgather(&mine, sizes.data(), 1, comm::DType::i64); });
  std::vector<size_t> counts(world);
  size_t total = 0;
  for (int r = 0; r < world; ++r) {
    if (sizes[r] < 0 || static_cast<size_t>(sizes[r]) > codec.maxBytes(n))
      throw DataError("codec " + codec.name() + ": rank " + std::to_string(r) + " announced a payload of " +
                      std::to_string(sizes[r]) + " bytes, more than the " + std::to_string(codec.maxBytes(n)) +
                      " possible for " + std::to_string(n) + " values");
    counts[r] = static_cast<size_t>(sizes[r]);
    total += counts[r];
  }
  s.recv.resize(std::max<size_t>(total, 1));
  timed(s, [&] { comm.allgatherv(s.send.data(), bytes, s.recv.data(), counts, comm::DType::u8); });
  std::fill(x, x + n, 0.0f);
  size_t off = 0;
  for (int r = 0; r < world; ++r) {
    EncodeCtx from = ctx;
    from.rank = r;
    codec.decode(s.recv.data() + off, counts[r], n, x, 1.0f / world, true, from);
    off += counts[r];
  }
  return bytes;
}

}  // namespace lowcomm::compress
