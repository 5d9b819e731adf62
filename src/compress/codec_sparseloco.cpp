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

#include "codecs.h"
#include "lowcomm/base/error.h"
#include "payload.h"
#include "topk_select.h"

namespace lowcomm::compress {
namespace {

constexpr size_t kHeaderBytes = 12 + 16;

int indexBits(size_t chunk) {
  int b = 1;
  while ((size_t{1} << b) < chunk) ++b;
  return b;
}

class BitWriter {
 public:
  explicit BitWriter(uint8_t* out) : out_(out) {}
  void put(uint32_t v, int bits) {
    acc_ |= static_cast<uint64_t>(v) << fill_;
    fill_ += bits;
    while (fill_ >= 8) {
      out_[n_++] = static_cast<uint8_t>(acc_);
      acc_ >>= 8;
      fill_ -= 8;
    }
  }
  size_t finish() {
    if (fill_ > 0) out_[n_++] = static_cast<uint8_t>(acc_);
    return n_;
  }

 private:
  uint8_t* out_;
  uint64_t acc_ = 0;
  int fill_ = 0;
  size_t n_ = 0;
};

class BitReader {
 public:
  BitReader(const uint8_t* p, size_t bytes) : p_(p), end_(bytes) {}
  uint32_t get(int bits) {  // the caller sized the stream: never reads past end_
    while (fill_ < bits) {
      acc_ |= static_cast<uint64_t>(p_[n_++]) << fill_;
      fill_ += 8;
    }
    const uint32_t v = static_cast<uint32_t>(acc_ & ((uint64_t{1} << bits) - 1));
    acc_ >>= bits;
    fill_ -= bits;
    return v;
  }
  bool paddingIsZero() const { return acc_ == 0 && n_ == end_; }

 private:
  const uint8_t* p_;
  size_t end_, n_ = 0;
  uint64_t acc_ = 0;
  int fill_ = 0;
};

class SparseLoCoCodec : public Codec {
 public:
  explicit SparseLoCoCodec(const CodecParams& p) : ratio_(p.ratio), chunk_(static_cast<size_t>(p.chunk)) {
    if (!(ratio_ > 0 && ratio_ <= 1))
      throw ConfigError(detail::concat("codec sparseloco: ratio must be in (0, 1], got ", ratio_));
    if (p.chunk < 2 || p.chunk > (int64_t{1} << 24))
      throw ConfigError(detail::concat("codec sparseloco: chunk must be in [2, 2^24], got ", p.chunk));
    k_ = keepCount(ratio_, chunk_);
    bits_ = indexBits(chunk_);
  }
  std::string name() const override { return "sparseloco"; }
  Combine combine() const override { return Combine::allgather; }
  size_t maxBytes(size_t n) const override { return kHeaderBytes + (kept(n) * (bits_ + 2) + 7) / 8; }

  size_t encode(const float* x, size_t n, uint8_t* out, const EncodeCtx&) const override {
    std::vector<uint32_t> idx;  // global indices, chunk by chunk, increasing
    std::vector<uint32_t> scratch(std::min(k_, chunk_));
    for (size_t c0 = 0; c0 < n; c0 += chunk_) {
      const size_t got = selectTopK(x + c0, std::min(chunk_, n - c0), k_, scratch.data());
      for (size_t j = 0; j < got; ++j) idx.push_back(static_cast<uint32_t>(c0 + scratch[j]));
    }
    float table[4];
    std::vector<uint8_t> code(idx.size());
    quantise(x, idx, table, code);
    PayloadWriter w(out);
    w.put<uint8_t>('L');
    w.put<uint8_t>(0);
    w.put<uint16_t>(0);
    w.put<uint32_t>(static_cast<uint32_t>(chunk_));
    w.put<uint32_t>(static_cast<uint32_t>(k_));
    for (float t : table) w.put<float>(t);
    BitWriter bits(w.cursor());
    for (size_t j = 0; j < idx.size(); ++j) {
      bits.put(static_cast<uint32_t>(idx[j] % chunk_), bits_);
      bits.put(code[j], 2);
    }
    return w.size() + bits.finish();
  }

  void decode(const uint8_t* p, size_t bytes, size_t n, float* out, float scale, bool accumulate,
              const EncodeCtx&) const override {
    PayloadReader r(p, bytes, "sparseloco");
    if (r.get<uint8_t>() != 'L') r.fail("header tag is not sparseloco's");
    if (r.get<uint8_t>() != 0 || r.get<uint16_t>() != 0) r.fail("reserved header bytes are not zero");
    const uint32_t chunk = r.get<uint32_t>(), k = r.get<uint32_t>();
    if (chunk != chunk_ || k != k_)
      r.fail("chunk " + std::to_string(chunk) + " and k " + std::to_string(k) + " differ from this codec's " +
             std::to_string(chunk_) + " and " + std::to_string(k_));
    float table[4];
    for (float& t : table) t = r.getFinite("a value table entry");
    const size_t count = kept(n), stream = (count * (bits_ + 2) + 7) / 8;
    if (r.remaining() != stream)
      r.fail(std::to_string(r.remaining()) + " bytes after the header, expected " + std::to_string(stream) + " for " +
             std::to_string(n) + " values");
    BitReader bits(r.take(stream), stream);
    std::vector<uint32_t> idx(count);
    std::vector<uint8_t> code(count);
    size_t j = 0;
    for (size_t c0 = 0; c0 < n; c0 += chunk_) {
      const size_t len = std::min(chunk_, n - c0), got = std::min(k_, len);
      for (size_t i = 0; i < got; ++i, ++j) {
        const uint32_t local = bits.get(bits_);
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
  size_t kept(size_t n) const {
    const size_t full = n / chunk_, rest = n % chunk_;
    return full * std::min(k_, chunk_) + std::min(k_, rest);
  }

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
  size_t chunk_, k_ = 1;
  int bits_ = 1;
};

}  // namespace

std::unique_ptr<Codec> makeSparseLoCoCodec(const CodecParams& p) { return std::make_unique<SparseLoCoCodec>(p); }

}  // namespace lowcomm::compress
