// sparseloco: SparseLoCo's pseudo-gradient compression (Sarfi et al. 2025, arXiv 2508.15706):
// chunked top-k with 2-bit values.
//
// The n values are cut into chunks of `chunk` values (the last one may be shorter; the paper
// tiles 2-D tensors into 64×64 blocks, here a chunk is a contiguous run of the flat bucket).
// In each chunk the k = keepCount(ratio, chunk) values of largest magnitude are kept (min(k, len)
// in a short last chunk; ties by lower index), so the density is the same everywhere and no
// chunk starves. The kept values of the whole payload are quantised to 2 bits: four equal bins
// over mean ± 3 standard deviations of the kept values (outside values clamp to the end bins),
// each bin sent as the mean of the values that fell in it (a 4-entry table; an empty bin's entry
// is its centre). Indices are local to their chunk, ceil(log2 chunk) bits each.
//
// Payload (allgather: every rank decodes every payload):
//   u8 'L', u8 0, u16 0, u32 chunk, u32 k, f32 table[4],
//   a bit stream (LSB first) of (index, 2-bit code) per kept value, chunk by chunk, zero-padded
//   to a byte. Its size is a function of n, chunk and k only (maxBytes is exact).
// decode() rejects a header that disagrees with this codec's chunk and k, a non-finite table,
// a size that is not the expected one, an index outside its chunk or not increasing inside it,
// and non-zero padding. NaN and ±inf are selected first and make the table non-finite, so a bad
// gradient is rejected by the decoder on every rank alike.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "chunked_payload.h"
#include "codecs.h"
#include "lowcomm/base/error.h"
#include "payload.h"
#include "topk_select.h"

namespace lowcomm::compress {
namespace {

constexpr size_t kHeaderBytes = ChunkGeometry::kHeaderBytes + 16;  // and the value table

class SparseLoCoCodec : public Codec {
 public:
  explicit SparseLoCoCodec(const CodecParams& p) : ratio_(p.ratio) {
    const auto chunk = static_cast<size_t>(p.chunk ? p.chunk : 4096);
    if (!(ratio_ > 0 && ratio_ <= 1))
      throw ConfigError(detail::concat("codec sparseloco: ratio must be in (0, 1], got ", ratio_));
    if (chunk < 2 || chunk > (size_t{1} << 24))
      throw ConfigError(detail::concat("codec sparseloco: chunk must be in [2, 2^24], got ", chunk));
    g_ = ChunkGeometry(chunk, keepCount(ratio_, chunk));
  }
  std::string name() const override { return "sparseloco"; }
  Combine combine() const override { return Combine::allgather; }
  size_t maxBytes(size_t n) const override { return kHeaderBytes + (g_.kept(n) * (g_.bits + 2) + 7) / 8; }

  size_t encode(const float* x, size_t n, uint8_t* out, const EncodeCtx&) const override {
    std::vector<uint32_t> idx;  // global indices, chunk by chunk, increasing
    std::vector<uint32_t> scratch(std::min(g_.k, g_.chunk));
    for (size_t c0 = 0; c0 < n; c0 += g_.chunk) {
      const size_t got = selectTopK(x + c0, std::min(g_.chunk, n - c0), g_.k, scratch.data());
      for (size_t j = 0; j < got; ++j) idx.push_back(static_cast<uint32_t>(c0 + scratch[j]));
    }
    float table[4];
    std::vector<uint8_t> code(idx.size());
    quantise(x, idx, table, code);
    PayloadWriter w(out);
    g_.writeHeader(w, 'L');
    for (float t : table) w.put<float>(t);
    BitWriter bits(w.cursor());
    for (size_t j = 0; j < idx.size(); ++j) {
      bits.put(static_cast<uint32_t>(idx[j] % g_.chunk), g_.bits);
      bits.put(code[j], 2);
    }
    return w.size() + bits.finish();
  }

  void decode(const uint8_t* p, size_t bytes, size_t n, float* out, float scale, bool accumulate,
              const EncodeCtx&) const override {
    PayloadReader r(p, bytes, "sparseloco");
    g_.readHeader(r, 'L', "sparseloco");
    float table[4];
    for (float& t : table) t = r.getFinite("a value table entry");
    const size_t count = g_.kept(n), stream = (count * (g_.bits + 2) + 7) / 8;
    if (r.remaining() != stream)
      r.fail(std::to_string(r.remaining()) + " bytes after the header, expected " + std::to_string(stream) + " for " +
             std::to_string(n) + " values");
    BitReader bits(r.take(stream), stream);
    std::vector<uint32_t> idx(count);
    std::vector<uint8_t> code(count);
    size_t j = 0;
    for (size_t c0 = 0; c0 < n; c0 += g_.chunk) {
      const size_t len = std::min(g_.chunk, n - c0), got = std::min(g_.k, len);
      for (size_t i = 0; i < got; ++i, ++j) {
        const uint32_t local = bits.get(g_.bits);
        code[j] = static_cast<uint8_t>(bits.get(2));
        if (local >= len) r.fail("index " + std::to_string(local) + " outside its chunk of " + std::to_string(len));
        if (i > 0 && c0 + local <= idx[j - 1]) r.fail("indices inside a chunk are not increasing");
        idx[j] = static_cast<uint32_t>(c0 + local);
      }
    }
    if (!bits.paddingIsZero()) r.fail("padding bits are not zero");
    if (!accumulate) std::fill(out, out + n, 0.0f);
    for (size_t i = 0; i < count; ++i) out[idx[i]] += scale * table[code[i]];
  }

 private:

  // Bins over mean ± 3σ of the kept values; each bin's entry is the mean of its values.
  static void quantise(const float* x, const std::vector<uint32_t>& idx, float table[4], std::vector<uint8_t>& code) {
    double sum = 0, sq = 0;
    for (uint32_t i : idx) sum += x[i];
    const double m = idx.empty() ? 0.0 : sum / static_cast<double>(idx.size());
    for (uint32_t i : idx) sq += (x[i] - m) * (x[i] - m);
    const double sd = idx.empty() ? 0.0 : std::sqrt(sq / static_cast<double>(idx.size()));
    const double lo = m - 3 * sd, width = 1.5 * sd;
    double bin_sum[4] = {0, 0, 0, 0};
    size_t bin_n[4] = {0, 0, 0, 0};
    for (size_t j = 0; j < idx.size(); ++j) {
      const double v = x[idx[j]];
      int b = 0;
      if (width > 0 && std::isfinite(v)) b = static_cast<int>(std::clamp(std::floor((v - lo) / width), 0.0, 3.0));
      code[j] = static_cast<uint8_t>(b);
      bin_sum[b] += v;
      ++bin_n[b];
    }
    for (int b = 0; b < 4; ++b)
      table[b] = static_cast<float>(bin_n[b] ? bin_sum[b] / static_cast<double>(bin_n[b]) : lo + (b + 0.5) * width);
  }

  double ratio_;
  ChunkGeometry g_;
};

}  // namespace

std::unique_ptr<Codec> makeSparseLoCoCodec(const CodecParams& p) { return std::make_unique<SparseLoCoCodec>(p); }

}  // namespace lowcomm::compress
