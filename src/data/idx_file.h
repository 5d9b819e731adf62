// gzip-transparent file reading and the idx format (private to the data layer).
//
// Every failure throws lowcomm::DataError("<path>: <defect>"). Files are read through zlib's
// gzopen/gzread, which also reads uncompressed files unchanged. No file may expand to more than
// kMaxFileBytes: a gzip bomb (1 MB of zeros expands ~1000-fold) is a DataError naming the file
// and the cap before it can exhaust a rank's memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lowcomm::data::detail {

// A constant, not a config key: no data set lowcomm reads has a file near it (Fashion-MNIST's
// largest is 47 MB, a CIFAR-10 batch 30 MB, a text corpus is many files), and every rank holds a
// text file 8-fold as int64 tokens, so a larger file is better split than allowed.
constexpr uint64_t kMaxFileBytes = uint64_t{1} << 30;

// An idx array of unsigned bytes: dims from the header, row-major payload.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

// Reads an unsigned-byte idx file with `ndims` dimensions (magic 0x00000800 | ndims). Checks
// the magic, that every dimension is positive and the total at most kMaxFileBytes, that the payload
// holds exactly prod(dims) bytes (shorter = truncated, longer = trailing data), and the gzip
// stream's integrity (CRC, premature end).
IdxArray readIdxFile(const std::string& path, int ndims);

// The whole (decompressed) content of a file.
std::vector<uint8_t> readWholeFile(const std::string& path);

// Appends the whole (decompressed) content of a file to `out`; returns the bytes appended.
size_t appendWholeFile(const std::string& path, std::vector<uint8_t>& out);

bool fileExists(const std::string& path);

}  // namespace lowcomm::data::detail
