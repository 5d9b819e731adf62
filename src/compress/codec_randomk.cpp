// randomk: keep k = keepCount(ratio, n) values at indices every rank draws alike, so payloads are
// summable (allreduce of k f32 values, no header). Payload: f32 value[k], value j belonging to
// the j-th smallest drawn index.
//
// Indices: k distinct indices of [0, n), uniform over all k-subsets, drawn by Floyd's algorithm
// with a counter RNG keyed only by (ctx.seed, ctx.step, ctx.bucket, ctx.chunk) - never the rank -
// and marked in a bitmap, which also yields them sorted. decode() must get the ctx encode() got.
// With p.unbiased each value is scaled by n/k at encode: every index is kept with probability
// k/n, so the decoded vector is an unbiased estimate of x.
//
// Values are not checked for finiteness at decode: the payload is a sum over ranks made by the
// communicator, and a NaN gradient propagates exactly as it does through a dense allreduce.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "codecs.h"
#include "lowcomm/base/error.h"
#include "payload.h"
#include "topk_select.h"

namespace lowcomm::compress {
namespace {

uint64_t streamKey(const EncodeCtx& c) {
  uint64_t h = mix64(c.seed ^ 0x72616e646f6d6bull);
  for (uint64_t v : {static_cast<uint64_t>(c.step), static_cast<uint64_t>(c.bucket), static_cast<uint64_t>(c.chunk)})
    h = mix64(h ^ v);
  return h;
}

// Floyd: for j = n-k .. n-1 draw t uniform in [0, j]; take t, or j if t is taken already. Each
// k-subset comes out with equal probability; k random bit probes plus a scan of n/64 words.
void drawIndices(uint64_t key, size_t n, size_t k, uint32_t* out) {
  std::vector<uint64_t> taken((n + 63) / 64, 0);
  for (size_t j = n - k; j < n; ++j) {
    const size_t t = uniformBelow(counterRandom(key, j), j + 1);
    const size_t pick = (taken[t / 64] >> (t % 64)) & 1 ? j : t;
    taken[pick / 64] |= uint64_t{1} << (pick % 64);
  }
  size_t c = 0;
  for (size_t w = 0; w < taken.size(); ++w)
    for (uint64_t b = taken[w]; b != 0; b &= b - 1) out[c++] = static_cast<uint32_t>(64 * w + __builtin_ctzll(b));
}

class RandomKCodec : public Codec {
 public:
  explicit RandomKCodec(const CodecParams& p) : ratio_(p.ratio), unbiased_(p.unbiased) {
    if (!(ratio_ > 0 && ratio_ <= 1))
      throw ConfigError(detail::concat("codec randomk: ratio must be in (0, 1], got ", ratio_));
  }
  std::string name() const override { return "randomk"; }
  Combine combine() const override { return Combine::allreduce; }
  comm::DType wireType() const override { return comm::DType::f32; }
  size_t maxBytes(size_t n) const override { return 4 * keepCount(ratio_, n); }

  size_t encode(const float* x, size_t n, uint8_t* out, const EncodeCtx& ctx) const override {
    const size_t k = keepCount(ratio_, n);
    const auto idx = indices(n, k, ctx);
    const float s = unbiased_ ? static_cast<float>(static_cast<double>(n) / static_cast<double>(k)) : 1.0f;
    PayloadWriter w(out);
    for (size_t j = 0; j < k; ++j) w.put<float>(s * x[idx[j]]);
    return w.size();
  }

  void decode(const uint8_t* p, size_t bytes, size_t n, float* out, float scale, bool accumulate,
              const EncodeCtx& ctx) const override {
    const size_t k = keepCount(ratio_, n);
    expectSize("randomk", bytes, 4 * k);
    const auto idx = indices(n, k, ctx);
    if (!accumulate) std::fill(out, out + n, 0.0f);
    for (size_t j = 0; j < k; ++j) {
      float v;
      std::memcpy(&v, p + 4 * j, 4);
      out[idx[j]] += scale * v;
    }
  }

 private:
  static std::unique_ptr<uint32_t[]> indices(size_t n, size_t k, const EncodeCtx& ctx) {
    LC_ENFORCE(n <= 0xffffffffull, "randomk indexes with uint32: ", n, " values are too many");
    std::unique_ptr<uint32_t[]> idx(new uint32_t[k]);
    if (k > 0) drawIndices(streamKey(ctx), n, k, idx.get());
    return idx;
  }

  double ratio_;
  bool unbiased_;
};

}  // namespace

std::unique_ptr<Codec> makeRandomKCodec(const CodecParams& p) { return std::make_unique<RandomKCodec>(p); }

}  // namespace lowcomm::compress
