// Bounds-checked payload writing and reading for codecs with a header (two_phase, allgather).
// Every read checks the remaining size first; a violation is a DataError naming the codec.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "lowcomm/base/error.h"

namespace lowcomm::compress {

class PayloadWriter {
 public:
  explicit PayloadWriter(uint8_t* out) : p_(out) {}
  template <typename T>
  void put(T v) {
    std::memcpy(p_ + n_, &v, sizeof(T));
    n_ += sizeof(T);
  }
  void putBytes(const void* src, size_t bytes) {
    if (bytes) std::memcpy(p_ + n_, src, bytes);
    n_ += bytes;
  }
  uint8_t* cursor() { return p_ + n_; }
  void skip(size_t bytes) { n_ += bytes; }
  size_t size() const { return n_; }

 private:
  uint8_t* p_;
  size_t n_ = 0;
};

class PayloadReader {
 public:
  PayloadReader(const uint8_t* p, size_t bytes, const char* codec) : p_(p), end_(bytes), codec_(codec) {}
  [[noreturn]] void fail(const std::string& why) const {
    throw DataError(std::string("codec ") + codec_ + ": malformed payload: " + why);
  }
  void need(size_t bytes) const {
    if (bytes > end_ - n_)
      fail("needs " + std::to_string(bytes) + " more bytes at offset " + std::to_string(n_) + ", has " +
           std::to_string(end_ - n_));
  }
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_ + n_, sizeof(T));
    n_ += sizeof(T);
    return v;
  }
  float getFinite(const char* what) {
    const float v = get<float>();
    if (!std::isfinite(v)) fail(std::string(what) + " is not finite");
    return v;
  }
  const uint8_t* take(size_t bytes) {
    need(bytes);
    const uint8_t* q = p_ + n_;
    n_ += bytes;
    return q;
  }
  void expectEnd() const {
    if (n_ != end_) fail(std::to_string(end_ - n_) + " trailing bytes");
  }
  size_t remaining() const { return end_ - n_; }

 private:
  const uint8_t* p_;
  size_t end_;
  size_t n_ = 0;
  const char* codec_;
};

// Checks a payload's size against the exact size a fixed-size codec produces for n values.
inline void expectSize(const char* codec, size_t bytes, size_t expected) {
  if (bytes != expected)
    throw DataError(std::string("codec ") + codec + ": malformed payload: " + std::to_string(bytes) +
                    " bytes, expected " + std::to_string(expected));
}

}  // namespace lowcomm::compress
