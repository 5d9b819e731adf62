#include "idx_file.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "lowcomm/base/error.h"

namespace lowcomm::data::detail {
namespace {

constexpr size_t kChunk = size_t{4} << 20;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError(path + ": " + what);
}

[[noreturn]] void failOverCap(const std::string& path, const std::string& what) {
  fail(path, what + " more than " + std::to_string(kMaxFileBytes >> 20) +
                 " MiB, the cap on one data file (a gzip bomb, or a file to split)");
}

// Owns a gzFile; every read checks zlib's error state, including the Z_BUF_ERROR that gzread
// reports only through gzerror when the compressed stream ends early.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
    if (S_ISDIR(st.st_mode)) fail(path, "is a directory, expected a file");
    errno = 0;
    file_ = gzopen(path.c_str(), "rb");
    if (!file_) fail(path, std::string("cannot open: ") + (errno ? std::strerror(errno) : "zlib out of memory"));
    gzbuffer(file_, 1 << 18);
  }
  ~GzReader() {
    if (file_) gzclose_r(file_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes; fewer only at the end of the data. Throws on any stream error.
  size_t read(void* buf, size_t n) {
    size_t got = 0;
    auto* p = static_cast<unsigned char*>(buf);
    while (got < n) {
      const unsigned ask = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
      const int r = gzread(file_, p + got, ask);
      checkError();
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    return got;
  }

 private:
  void checkError() {
    int err = Z_OK;
    const char* msg = gzerror(file_, &err);
    if (err == Z_OK) return;
    if (err == Z_BUF_ERROR) fail(path_, "truncated: the gzip stream ends before its end marker");
    if (err == Z_ERRNO) fail(path_, std::string("read error: ") + std::strerror(errno));
    fail(path_, std::string("corrupt gzip data: ") + (msg ? msg : "unknown zlib error"));
  }

  std::string path_;
  gzFile file_ = nullptr;
};

uint32_t bigEndian32(const unsigned char* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

std::string hex32(uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex;
  os.width(8);
  os.fill('0');
  os << v;
  return os.str();
}

}  // namespace

bool fileExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode);
}

IdxArray readIdxFile(const std::string& path, int ndims) {
  GzReader in(path);
  const uint32_t expectMagic = 0x00000800u | static_cast<uint32_t>(ndims);

  unsigned char head[4];
  if (in.read(head, 4) < 4) fail(path, "truncated: shorter than the 4-byte idx magic");
  const uint32_t magic = bigEndian32(head);
  if (magic != expectMagic) {
    fail(path, "bad idx magic " + hex32(magic) + ", expected " + hex32(expectMagic) +
                   " (unsigned bytes, " + std::to_string(ndims) + " dimensions)");
  }

  IdxArray out;
  uint64_t total = 1;
  for (int d = 0; d < ndims; ++d) {
    if (in.read(head, 4) < 4) fail(path, "truncated: idx header ends inside the dimension sizes");
    const uint32_t n = bigEndian32(head);
    if (n == 0) fail(path, "idx dimension " + std::to_string(d) + " is 0");
    total *= n;
    if (total > kMaxFileBytes) failOverCap(path, "the idx header declares");
    out.dims.push_back(static_cast<int64_t>(n));
  }

  // Grow while reading so a corrupt header cannot force a huge allocation up front.
  out.data.reserve(std::min<uint64_t>(total, 64u << 20));
  size_t got = 0;
  while (got < total) {
    const size_t want = std::min<size_t>(total - got, kChunk);
    out.data.resize(got + want);
    const size_t r = in.read(out.data.data() + got, want);
    got += r;
    if (r < want) {
      fail(path, "truncated: payload has " + std::to_string(got) + " of the " + std::to_string(total) +
                     " bytes the idx header declares");
    }
  }
  unsigned char extra;
  if (in.read(&extra, 1) != 0) {
    fail(path, "trailing data: longer than the " + std::to_string(total) + " payload bytes the idx header declares");
  }
  return out;
}

std::vector<uint8_t> readWholeFile(const std::string& path) {
  std::vector<uint8_t> data;
  appendWholeFile(path, data);
  return data;
}

// Through a fixed chunk: `out` grows only by bytes within the cap.
size_t appendWholeFile(const std::string& path, std::vector<uint8_t>& out) {
  GzReader in(path);
  std::vector<uint8_t> chunk(kChunk);
  size_t got = 0;
  for (;;) {
    const size_t r = in.read(chunk.data(), kChunk);
    if (got + r > kMaxFileBytes) failOverCap(path, "decompresses to");
    out.insert(out.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(r));
    got += r;
    if (r < kChunk) return got;
  }
}

}  // namespace lowcomm::data::detail
