// gzip-transparent file reading and the idx format (private to the data layer).
//
// Every failure throws lowcomm::DataError("<path>: <defect>"). Files are read through zlib's
// gzopen/gzread, which also reads uncompressed files unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lowcomm::data::detail {

// An idx array of unsigned bytes: dims from the header, row-major payload.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

// Reads an unsigned-byte idx file with `ndims` dimensions (magic 0x00000800 | ndims). Checks
// the magic, that every dimension is positive and the total is below 4 GiB, that the payload
// holds exactly prod(dims) bytes (shorter = truncated, longer = trailing data), and the gzip
// stream's integrity (CRC, premature end).
IdxArray readIdxFile(const std::string& path, int ndims);

// The whole (decompressed) content of a file.
std::vector<uint8_t> readWholeFile(const std::string& path);

bool fileExists(const std::string& path);

}  // namespace lowcomm::data::detail
