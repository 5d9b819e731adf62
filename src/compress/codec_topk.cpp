// topk and dgc_topk, and the sparse payload they share with threshold (topk_select.h).
//
// topk and dgc_topk keep the values of largest magnitude, send (index, value) pairs, every rank
// decodes every rank's payload (allgather). Payload: the sparse layout of topk_select.h, tag 'K'
// (topk) or 'D' (dgc_topk).
//
// topk keeps exactly k = keepCount(ratio, n) values (ties by lower index). dgc_topk (Lin et al.,
// Deep Gradient Compression) estimates the magnitude threshold from a sample of sample_ratio·n
// values and keeps what passes it: ceil(k/2) <= count <= k + floor(3k/10), or exactly k, and never
// more than min(n, 2k), which maxBytes assumes. Its sample is keyed by the whole EncodeCtx, so an
// encode is a deterministic function of (x, ctx).
//
// NaN and ±inf have the largest magnitude keys, so a non-finite value is selected first, sent,
// and rejected as a DataError by the decoder on every rank alike: one rank throwing before the
// allgather would leave its peers waiting, a rank throwing after it does not.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "codecs.h"
#include "lowcomm/base/error.h"
#include "payload.h"
#include "topk_select.h"

namespace lowcomm::compress {
namespace {

void checkRatio(const char* codec, const char* what, double r) {
  if (!(r > 0 && r <= 1))
    throw ConfigError(detail::concat("codec ", codec, ": ", what, " must be in (0, 1], got ", r));
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

size_t writeSparsePayload(uint8_t tag, const float* x, const uint32_t* idx, size_t count, uint8_t* out) {
  PayloadWriter w(out);
  w.put<uint8_t>(tag);
  w.put<uint8_t>(0);
  w.put<uint16_t>(0);
  w.put<uint32_t>(static_cast<uint32_t>(count));
  w.putBytes(idx, 4 * count);
  for (size_t j = 0; j < count; ++j) w.put<float>(x[idx[j]]);
  return w.size();
}

void decodeSparsePayload(const char* codec, uint8_t tag, const uint8_t* payload, size_t bytes, size_t n, float* out,
                         float scale, bool accumulate) {
  PayloadReader r(payload, bytes, codec);
  const auto got_tag = r.get<uint8_t>();
  if (got_tag != tag) r.fail("header tag " + std::to_string(got_tag) + ", expected " + std::to_string(tag));
  if (r.get<uint8_t>() != 0 || r.get<uint16_t>() != 0) r.fail("reserved header bytes are not zero");
  const size_t count = r.get<uint32_t>();
  if (count > n) r.fail("count " + std::to_string(count) + " exceeds the " + std::to_string(n) + " values");
  if (r.remaining() != 8 * count)
    r.fail(std::to_string(r.remaining()) + " bytes after the header, expected " + std::to_string(8 * count) +
           " for " + std::to_string(count) + " entries");
  const uint8_t* ip = r.take(4 * count);
  const uint8_t* vp = r.take(4 * count);
  r.expectEnd();
  auto index = [ip](size_t j) {
    uint32_t v;
    std::memcpy(&v, ip + 4 * j, 4);
    return v;
  };
  auto value = [vp](size_t j) {
    float v;
    std::memcpy(&v, vp + 4 * j, 4);
    return v;
  };
  for (size_t j = 0; j < count; ++j) {
    const uint32_t i = index(j);
    if (i >= n) r.fail("index " + std::to_string(i) + " at entry " + std::to_string(j) + " is out of range (n = " +
                       std::to_string(n) + ")");
    if (j > 0 && i <= index(j - 1))
      r.fail("index " + std::to_string(i) + " at entry " + std::to_string(j) + " does not exceed the previous " +
             std::to_string(index(j - 1)));
    if (!std::isfinite(value(j))) r.fail("value at entry " + std::to_string(j) + " is not finite");
  }
  if (!accumulate) std::fill(out, out + n, 0.0f);
  for (size_t j = 0; j < count; ++j) out[index(j)] += scale * value(j);
}

std::unique_ptr<Codec> makeTopKCodec(const CodecParams& p) { return std::make_unique<TopKCodec>(p, false); }
std::unique_ptr<Codec> makeDgcTopKCodec(const CodecParams& p) { return std::make_unique<TopKCodec>(p, true); }

}  // namespace lowcomm::compress
