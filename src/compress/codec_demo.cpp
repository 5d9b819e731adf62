// demo: DeMo's fast components (Peng, Quesnelle, Kingma 2024, arXiv 2411.19870): chunked DCT,
// top-k of the coefficients.
//
// The n values are cut into chunks of `chunk` values (the last one may be shorter; DeMo applies a
// 2-D DCT to s×s tiles of each matrix, here a chunk is a contiguous run of the flat bucket, i.e.
// a piece of a row, and the transform is 1-D). Each chunk of length L goes through the
// orthonormal DCT-II of length L, X_k = s_k Σ_i x_i cos(π(i + ½)k/L), s_0 = √(1/L), s_k = √(2/L);
// the k = keepCount(ratio, chunk) coefficients of largest magnitude are kept (min(k, L) in a short
// last chunk; ties by lower index), rounded to bfloat16. Decoding applies the inverse (the
// transpose) to the kept coefficients, so what the residual memory keeps is exactly what the
// chunk lost, rounding included; with decay β that memory is DeMo's decoupled momentum.
// DeMo steps along the sign of the averaged result: optimizer.sign = true.
//
// Payload (allgather: every rank decodes every payload):
//   u8 'D', u8 0, u16 0, u32 chunk, u32 k, u16 bf16 coefficient[count] (chunk by chunk),
//   then a bit stream (LSB first) of the count chunk-local coefficient indices, ceil(log2 chunk)
//   bits each, zero-padded to a byte. count and the size are functions of n, chunk and k only.
// decode() rejects a header that disagrees with this codec's chunk and k, a size that is not the
// expected one, a coefficient that is not finite, an index outside its chunk or not increasing
// inside it, and non-zero padding, before it writes anything.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "chunked_payload.h"
#include "codecs.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/dtype.h"
#include "payload.h"
#include "topk_select.h"

namespace lowcomm::compress {
namespace {

constexpr size_t kHeaderBytes = ChunkGeometry::kHeaderBytes;
constexpr int64_t kDefaultChunk = 64;  // compress.chunk = 0
constexpr int64_t kMaxChunk = 1024;  // per value `chunk` multiply-adds; the bases hold 2·chunk² floats

// Orthonormal DCT-II basis of length L: rows[k·L + i] = cols[i·L + k] = s_k cos(π(i + ½)k/L).
// The encoder walks cols (its inner loop over k vectorises), the decoder rows.
struct Basis {
  std::vector<float> rows, cols;
};

Basis dctBasis(size_t L) {
  Basis b{std::vector<float>(L * L), std::vector<float>(L * L)};
  for (size_t k = 0; k < L; ++k) {
    const double s = std::sqrt((k == 0 ? 1.0 : 2.0) / static_cast<double>(L));
    for (size_t i = 0; i < L; ++i) {
      const auto v = static_cast<float>(
          s * std::cos(M_PI * (static_cast<double>(i) + 0.5) * static_cast<double>(k) / static_cast<double>(L)));
      b.rows[k * L + i] = b.cols[i * L + k] = v;
    }
  }
  return b;
}

class DemoCodec : public Codec {
 public:
  explicit DemoCodec(const CodecParams& p) : ratio_(p.ratio) {
    const auto chunk = static_cast<size_t>(p.chunk ? p.chunk : kDefaultChunk);
    if (!(ratio_ > 0 && ratio_ <= 1))
      throw ConfigError(detail::concat("codec demo: ratio must be in (0, 1], got ", ratio_));
    if (chunk < 2 || static_cast<int64_t>(chunk) > kMaxChunk)
      throw ConfigError(detail::concat("codec demo: chunk must be in [2, ", kMaxChunk, "], got ", chunk));
    g_ = ChunkGeometry(chunk, keepCount(ratio_, chunk));
    basis_ = dctBasis(chunk);
  }
  std::string name() const override { return "demo"; }
  Combine combine() const override { return Combine::allgather; }
  size_t maxBytes(size_t n) const override { return kHeaderBytes + 2 * g_.kept(n) + (g_.kept(n) * g_.bits + 7) / 8; }

  size_t encode(const float* x, size_t n, uint8_t* out, const EncodeCtx&) const override {
    const size_t count = g_.kept(n);
    std::vector<float> coef(g_.chunk);
    std::vector<uint32_t> pick(std::min(g_.k, g_.chunk)), idx;
    PayloadWriter w(out);
    g_.writeHeader(w, 'D');
    idx.reserve(count);
    for (size_t c0 = 0; c0 < n; c0 += g_.chunk) {
      const size_t len = std::min(g_.chunk, n - c0);
      const float* cols = basisOf(len).cols.data();
      std::fill(coef.begin(), coef.begin() + static_cast<std::ptrdiff_t>(len), 0.0f);
      for (size_t i = 0; i < len; ++i) {
        const float xi = x[c0 + i];
        const float* col = cols + i * len;
        for (size_t k = 0; k < len; ++k) coef[k] += col[k] * xi;
      }
      const size_t got = selectTopK(coef.data(), len, g_.k, pick.data());
      for (size_t j = 0; j < got; ++j) {
        w.put<uint16_t>(comm::floatToBf16(coef[pick[j]]));
        idx.push_back(pick[j]);
      }
    }
    BitWriter bits(w.cursor());
    for (uint32_t i : idx) bits.put(i, g_.bits);
    return w.size() + bits.finish();
  }

  void decode(const uint8_t* p, size_t bytes, size_t n, float* out, float scale, bool accumulate,
              const EncodeCtx&) const override {
    PayloadReader r(p, bytes, "demo");
    g_.readHeader(r, 'D', "demo");
    const size_t count = g_.kept(n), stream = (count * g_.bits + 7) / 8;
    if (r.remaining() != 2 * count + stream)
      r.fail(std::to_string(r.remaining()) + " bytes after the header, expected " +
             std::to_string(2 * count + stream) + " for " + std::to_string(n) + " values");
    std::vector<float> val(count);
    for (float& v : val) {
      v = comm::bf16ToFloat(r.get<uint16_t>());
      if (!std::isfinite(v)) r.fail("a coefficient is not finite");
    }
    BitReader bits(r.take(stream), stream);
    std::vector<uint32_t> idx(count);
    for (size_t c0 = 0, j = 0; c0 < n; c0 += g_.chunk) {
      const size_t len = std::min(g_.chunk, n - c0), got = std::min(g_.k, len);
      for (size_t i = 0; i < got; ++i, ++j) {
        idx[j] = bits.get(g_.bits);
        if (idx[j] >= len) r.fail("index " + std::to_string(idx[j]) + " outside its chunk of " + std::to_string(len));
        if (i > 0 && idx[j] <= idx[j - 1]) r.fail("indices inside a chunk are not increasing");
      }
    }
    if (!bits.paddingIsZero()) r.fail("padding bits are not zero");
    if (!accumulate) std::fill(out, out + n, 0.0f);
    for (size_t c0 = 0, j = 0; c0 < n; c0 += g_.chunk) {
      const size_t len = std::min(g_.chunk, n - c0), got = std::min(g_.k, len);
      const float* rows = basisOf(len).rows.data();
      for (size_t i = 0; i < got; ++i, ++j) {
        const float v = scale * val[j];
        const float* row = rows + idx[j] * len;
        for (size_t t = 0; t < len; ++t) out[c0 + t] += v * row[t];
      }
    }
  }

 private:
  // The basis for a chunk of `len` values: the codec's, or the short last chunk's (built once per
  // length; a bucket has at most one short chunk, and buckets keep their sizes across steps).
  const Basis& basisOf(size_t len) const {
    if (len == g_.chunk) return basis_;
    std::lock_guard<std::mutex> lock(mu_);
    auto& b = short_[len];
    if (b.rows.empty()) b = dctBasis(len);
    return b;
  }

  double ratio_;
  ChunkGeometry g_;
  Basis basis_;
  mutable std::mutex mu_;
  mutable std::map<size_t, Basis> short_;
};

}  // namespace

std::unique_ptr<Codec> makeDemoCodec(const CodecParams& p) { return std::make_unique<DemoCodec>(p); }

}  // namespace lowcomm::compress
