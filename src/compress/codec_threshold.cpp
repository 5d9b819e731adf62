// threshold: keep every value with |x| > t (Strom 2015, "fixed threshold" sparsification); the
// count depends on the data, so payloads are gathered (allgather). Payload: the sparse layout of
// topk_select.h with tag 'T'; maxBytes(n) = 8 + 8n covers every value passing.
//
// t is p.threshold rounded to float and compared in magnitude-key order, so NaN counts as
// passing: it is sent and the decoder rejects it on every rank (see codec_topk.cpp for why
// encoders do not throw).
#include <cmath>
#include <memory>

#include "codecs.h"
#include "lowcomm/base/error.h"
#include "topk_select.h"

namespace lowcomm::compress {
namespace {

class ThresholdCodec : public Codec {
 public:
  explicit ThresholdCodec(const CodecParams& p) : t_(static_cast<float>(p.threshold)) {
    if (!(p.threshold > 0) || !std::isfinite(t_) || t_ == 0)
      throw ConfigError(detail::concat("codec threshold: threshold must be a positive, finite float, got ",
                                       p.threshold));
  }
  std::string name() const override { return "threshold"; }
  Combine combine() const override { return Combine::allgather; }
  size_t maxBytes(size_t n) const override { return sparsePayloadBytes(n); }

  size_t encode(const float* x, size_t n, uint8_t* out, const EncodeCtx&) const override {
    std::unique_ptr<uint32_t[]> idx(new uint32_t[n]);  // untouched pages beyond the kept count cost nothing
    const size_t c = selectAtLeast(x, n, magnitudeKey(t_) + 1, idx.get(), n);
    return writeSparsePayload('T', x, idx.get(), c, out);
  }

  void decode(const uint8_t* p, size_t bytes, size_t n, float* out, float scale, bool accumulate,
              const EncodeCtx&) const override {
    decodeSparsePayload("threshold", 'T', p, bytes, n, out, scale, accumulate);
  }

 private:
  float t_;
};

}  // namespace

std::unique_ptr<Codec> makeThresholdCodec(const CodecParams& p) { return std::make_unique<ThresholdCodec>(p); }

}  // namespace lowcomm::compress
