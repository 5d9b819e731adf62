// What the chunked sparse codecs (sparseloco, demo) share: the chunk geometry (k of every chunk
// of `chunk` values, min(k, len) in a short last one, chunk-local indices of ceil(log2 chunk)
// bits), their 12-byte header (u8 tag, u8 0, u16 0, u32 chunk, u32 k) and LSB-first bit packing:
// a field of `bits` (1..32) bits goes into the stream at the next free bit, low bits first;
// finish() zero-pads to a byte. The reader never reads past the size its caller validated.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "payload.h"

namespace lowcomm::compress {

// Bits to index a position in a chunk of `chunk` values: ceil(log2 chunk), at least 1.
inline int indexBits(size_t chunk) {
  int b = 1;
  while ((size_t{1} << b) < chunk) ++b;
  return b;
}

struct ChunkGeometry {
  size_t chunk = 2, k = 1;
  int bits = 1;  // per index
  ChunkGeometry() = default;
  ChunkGeometry(size_t c, size_t keep) : chunk(c), k(keep), bits(indexBits(c)) {}
  size_t kept(size_t n) const { return n / chunk * std::min(k, chunk) + std::min(k, n % chunk); }

  static constexpr size_t kHeaderBytes = 12;
  void writeHeader(PayloadWriter& w, uint8_t tag) const {
    w.put<uint8_t>(tag);
    w.put<uint8_t>(0);
    w.put<uint16_t>(0);
    w.put<uint32_t>(static_cast<uint32_t>(chunk));
    w.put<uint32_t>(static_cast<uint32_t>(k));
  }
  // DataError (through r) unless the header is this codec's, with this chunk and k.
  void readHeader(PayloadReader& r, uint8_t tag, const char* codec) const {
    if (r.get<uint8_t>() != tag) r.fail(std::string("header tag is not ") + codec + "'s");
    if (r.get<uint8_t>() != 0 || r.get<uint16_t>() != 0) r.fail("reserved header bytes are not zero");
    const uint32_t c = r.get<uint32_t>(), kk = r.get<uint32_t>();
    if (c != chunk || kk != k)
      r.fail("chunk " + std::to_string(c) + " and k " + std::to_string(kk) + " differ from this codec's " +
             std::to_string(chunk) + " and " + std::to_string(k));
  }
};

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
  size_t finish() {  // bytes written
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

}  // namespace lowcomm::compress
