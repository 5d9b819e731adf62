// topk and dgc_topk: keep the values of largest magnitude, send (index, value) pairs, every rank
// decodes every rank's payload (allgather). Payload: the sparse layout of topk_select.h, tag 'K'
// (topk) or 'D' (dgc_topk).
//
// topk keeps exactly k = keepCount(ratio, n) values (ties by lower index). dgc_topk (Lin et al.,
// Deep Gradient Compression) estimates the magnitude threshold from a sample of sample_ratio·n
// values and keeps what passes it: ceil(k/2) <= count <= k + floor(3k/10), or exactly k, and never
// more than min(n, 2k), which maxBytes assumes. Its sample is keyed by the whole EncodeCtx, so an
// encode is a deterministic function of (x, ctx).
//
// A NaN or ±inf among the values is always selected (it has the largest magnitude key), sent,
// and rejected as a DataError by the decoder on every rank alike: one rank throwing before the
// allgather would leave its peers waiting, a rank throwing after it does not.
#include <cmath>
#include <memory>

#include "codecs.h"
#include "lowcomm/base/error.h"
#include "topk_select.h"

namespace lowcomm::compress {
namespace {

void checkRatio(const char* codec, const char* what, double r) {
  if (!(r > 0 && r <= 1))
    throw ConfigError(std::string("codec ") + codec + ": " + what + " must be in (0, 1], got " + std::to_string(r));
}

class TopKCodec : public Codec {
 public:
  TopKCodec(const CodecParams& p, bool sampled) : ratio_(p.ratio), sample_ratio_(p.sample_ratio), sampled_(sampled) {
    checkRatio(codec(), "ratio", ratio_);
    if (sampled_) checkRatio(codec(), "sample_ratio", sample_ratio_);
  }
  std::string name() const override { return codec(); }
  Combine combine() const override { return Combine::allgather; }
  size_t maxBytes(size_t n) const override {
    const size_t k = keepCount(ratio_, n);
    return sparsePayloadBytes(sampled_ ? approxTopKCapacity(n, k) : k);
  }

  size_t encode(const float* x, size_t n, uint8_t* out, const EncodeCtx& ctx) const override {
    const size_t k = keepCount(ratio_, n);
    std::unique_ptr<uint32_t[]> idx(new uint32_t[sampled_ ? approxTopKCapacity(n, k) : k]);
    const size_t c = sampled_ ? selectTopKApprox(x, n, k, sample_ratio_, sampleKey(ctx), idx.get())
                              : selectTopK(x, n, k, idx.get());
    return writeSparsePayload(tag(), x, idx.get(), c, out);
  }

  void decode(const uint8_t* p, size_t bytes, size_t n, float* out, float scale, bool accumulate,
              const EncodeCtx&) const override {
    decodeSparsePayload(codec(), tag(), p, bytes, n, out, scale, accumulate);
  }

 private:
  const char* codec() const { return sampled_ ? "dgc_topk" : "topk"; }
  uint8_t tag() const { return sampled_ ? 'D' : 'K'; }
  static uint64_t sampleKey(const EncodeCtx& c) {
    uint64_t h = mix64(c.seed ^ 0x646763ull);
    for (uint64_t v : {static_cast<uint64_t>(c.step), static_cast<uint64_t>(c.bucket), static_cast<uint64_t>(c.chunk),
                       static_cast<uint64_t>(c.rank)})
      h = mix64(h ^ v);
    return h;
  }

  double ratio_, sample_ratio_;
  bool sampled_;
};

}  // namespace

std::unique_ptr<Codec> makeTopKCodec(const CodecParams& p) { return std::make_unique<TopKCodec>(p, false); }
std::unique_ptr<Codec> makeDgcTopKCodec(const CodecParams& p) { return std::make_unique<TopKCodec>(p, true); }

}  // namespace lowcomm::compress
