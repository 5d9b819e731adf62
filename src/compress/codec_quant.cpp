// Stochastic quantisers, unbiased: E[decoded] = x, up to the 2^-16 resolution of the random
// numbers (a probability p is realised as round(p·2^16)/2^16: |bias| <= 2^-17 of a step).
// Both scale per block of B = CodecParams::block values (8..2^20): block j holds values
// [j·B, min(n, (j+1)·B)), nb = ceil(n/B) blocks. One scale for a whole bucket lets the variance
// grow with n (QSGD's bound min(n/s², √n/s)·||x||² is ~50·||x||² at n ≈ 500K: training
// diverged), and quantises small-gradient layers against the largest ones; per block the
// variance is bounded by B.
//
// qsgd (Alistarh et al., with the paper's bucketing), s = levels in 1..127:
//   f32 norm[nb] (norm_j = ||block j||_2), then per value i of block j the level
//   l = floor(x/norm_j·s + u) in [-s, s], u uniform in [0,1) (distributed as the paper's
//   sign(x)·floor(|x|/norm_j·s + u)); decoded = norm_j·l/s. Levels are two's complement, packed
//   over the whole input regardless of blocks: s <= 7 two per byte (value 2k in the low nibble
//   of byte k, 2k+1 in the high one), else one int8 per value. Size 4·nb + ceil(n/2) or 4·nb + n;
//   alignment B (2·B for an odd B with nibbles), so two-phase chunks split at block boundaries.
// terngrad (Wen et al.; a per-block max does the job of their per-layer scaling and clipping):
//   f32 scale[nb] (scale_j = max|x| over block j), then two bit planes of ceil(n/8) bytes over
//   the whole input (value i: bit i%8 of byte i/8): nonzero (P = |x|/scale_j), and negative (set
//   only with nonzero). decoded = ±scale_j or 0. Size 4·nb + 2·ceil(n/8), alignment lcm(B, 8).
// u of value i comes from simd::randomBlock(i / 8, key(ctx)): deterministic given the EncodeCtx,
// independent across steps, buckets, chunks and ranks. Non-finite input is refused (DataError).
// A norm (scale) below ~2e-32, where s·2^16/norm (2^16/scale) overflows, is sent as 0.
// The encoders take one block at a time (its norm, then its levels while it is in cache). Where
// a block boundary falls inside a byte (B not a multiple of 8, or odd with nibbles) the earlier
// block leaves the rest of the byte 0 and the later one ors its bits in.
// Padding bits are 0. Decode checks every scale (finite, >= 0) before writing; qsgd finds a
// level outside [-s, s] while decoding, so on that DataError out[] may be partly written
// (terngrad validates its planes first).
//
// The kernels and drivers are in quant_kernels.cpp; this file holds the codecs and their checks.
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>

#include "codecs.h"
#include "payload.h"
#include "quant_kernels.h"

namespace lowcomm::compress {
namespace {

// Reads the nb block scales; DataError unless each is finite and >= 0.
void checkScales(PayloadReader& r, size_t nb, const char* what) {
  for (size_t j = 0; j < nb; ++j)
    if (r.getFinite(what) < 0) r.fail(std::string("negative ") + what);
}

class QsgdCodec : public Codec {
 public:
  QsgdCodec(int32_t s, size_t block) : s_(s), block_(block) {}
  std::string name() const override { return "qsgd"; }
  Combine combine() const override { return Combine::two_phase; }
  size_t maxBytes(size_t n) const override { return 4 * blockCount(n, block_) + (nibble() ? (n + 1) / 2 : n); }
  size_t alignment() const override { return nibble() && block_ % 2 ? 2 * block_ : block_; }

  size_t encode(const float* x, size_t n, uint8_t* out, const EncodeCtx& ctx) const override {
    (nibble() ? qsgdEncode<true> : qsgdEncode<false>)(x, n, block_, s_, ctx, out);
    return maxBytes(n);
  }

  void decode(const uint8_t* p, size_t bytes, size_t n, float* out, float scale, bool accumulate,
              const EncodeCtx&) const override {
    expectSize("qsgd", bytes, maxBytes(n));
    PayloadReader r(p, bytes, "qsgd");
    checkScales(r, blockCount(n, block_), "block norm");
    const uint8_t* q = r.take(r.remaining());
    if (nibble() && n % 2 && q[n / 2] >> 4) r.fail("non-zero padding nibble");
    const auto blocks = nibble() ? (accumulate ? qsgdDecodeBlocks<true, true> : qsgdDecodeBlocks<true, false>)
                                 : (accumulate ? qsgdDecodeBlocks<false, true> : qsgdDecodeBlocks<false, false>);
    if (blocks(p, n, block_, s_, scale, out))
      r.fail("level outside [-" + std::to_string(s_) + ", " + std::to_string(s_) + "]");
  }

 private:
  bool nibble() const { return s_ <= 7; }
  int32_t s_;
  size_t block_;
};

class TernGradCodec : public Codec {
 public:
  explicit TernGradCodec(size_t block) : block_(block) {}
  std::string name() const override { return "terngrad"; }
  Combine combine() const override { return Combine::two_phase; }
  size_t maxBytes(size_t n) const override { return 4 * blockCount(n, block_) + 2 * ((n + 7) / 8); }
  size_t alignment() const override { return block_ / std::gcd(block_, size_t{8}) * 8; }  // lcm(block, 8)

  size_t encode(const float* x, size_t n, uint8_t* out, const EncodeCtx& ctx) const override {
    ternEncode(x, n, block_, ctx, out);
    return maxBytes(n);
  }

  void decode(const uint8_t* p, size_t bytes, size_t n, float* out, float scale, bool accumulate,
              const EncodeCtx&) const override {
    expectSize("terngrad", bytes, maxBytes(n));
    PayloadReader r(p, bytes, "terngrad");
    checkScales(r, blockCount(n, block_), "block scale");
    const size_t planeBytes = (n + 7) / 8;
    const uint8_t* nz = r.take(planeBytes);
    const uint8_t* neg = r.take(planeBytes);
    uint32_t bad = 0;
    for (size_t b = 0; b < planeBytes; ++b) bad |= neg[b] & ~nz[b];
    if (bad) r.fail("negative bit without nonzero bit");
    if (n % 8 && nz[n / 8] >> (n % 8)) r.fail("non-zero padding bits");
    (accumulate ? ternDecodeBlocks<true> : ternDecodeBlocks<false>)(p, n, block_, scale, out);
  }

 private:
  size_t block_;
};

size_t checkedBlock(const char* codec, const CodecParams& p) {
  if (p.block < 8 || p.block > (int64_t{1} << 20))
    throw ConfigError(std::string("codec ") + codec + ": block = " + std::to_string(p.block) +
                      " out of range [8, 1048576]");
  return static_cast<size_t>(p.block);
}

}  // namespace

std::unique_ptr<Codec> makeQsgdCodec(const CodecParams& p) {
  if (p.levels < 1 || p.levels > 127)
    throw ConfigError("codec qsgd: levels = " + std::to_string(p.levels) + " out of range [1, 127]");
  return std::make_unique<QsgdCodec>(static_cast<int32_t>(p.levels), checkedBlock("qsgd", p));
}

std::unique_ptr<Codec> makeTernGradCodec(const CodecParams& p) {
  return std::make_unique<TernGradCodec>(checkedBlock("terngrad", p));
}

}  // namespace lowcomm::compress
