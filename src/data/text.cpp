// Byte-level text corpus for language modelling: files under a directory, split by file.
#include <fnmatch.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "idx_file.h"
#include "lowcomm/base/error.h"
#include "lowcomm/data/dataset.h"

namespace lowcomm::data {
namespace fs = std::filesystem;

std::vector<std::string> textCorpusFiles(const std::string& dir, const std::string& glob) {
  if (dir.empty()) throw ConfigError("data.dir: the text data set needs a directory of text files");
  if (glob.empty()) throw ConfigError("data.glob: must not be empty (\"*\" takes every file)");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw DataError("data.dir: '" + dir + "' is not a readable directory");
  std::vector<std::string> rel;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  if (ec) throw DataError("data.dir: cannot list '" + dir + "': " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) throw DataError("data.dir: cannot list '" + dir + "': " + ec.message());
    std::error_code fec;
    if (!it->is_regular_file(fec)) continue;
    const std::string r = fs::relative(it->path(), dir, fec).generic_string();
    if (!fec && fnmatch(glob.c_str(), r.c_str(), FNM_PATHNAME) == 0) rel.push_back(r);
  }
  std::sort(rel.begin(), rel.end());
  return rel;
}

Dataset loadTextCorpus(const std::string& dir, const std::string& glob, bool train, int64_t seq_len) {
  if (seq_len < 1) throw ConfigError("model.seq_len: must be >= 1, got " + std::to_string(seq_len));
  const std::vector<std::string> files = textCorpusFiles(dir, glob);
  if (files.size() < 2)
    throw DataError("data.glob: '" + glob + "' matches " + std::to_string(files.size()) + " file(s) under '" + dir +
                    "'; the text data set needs at least 2 (every 10th file, or the last of fewer than 10, is "
                    "the validation split)");
  // Every 10th file in sorted order is validation; with fewer than 10 files, the last one is.
  auto isValidation = [&](size_t i) { return files.size() < 10 ? i + 1 == files.size() : i % 10 == 9; };
  std::vector<uint8_t> bytes;  // each file appended in place, capped (detail::kMaxFileBytes)
  for (size_t i = 0; i < files.size(); ++i)
    if (isValidation(i) != train) detail::appendWholeFile(dir + "/" + files[i], bytes);
  const int64_t n = (static_cast<int64_t>(bytes.size()) - 1) / seq_len;
  if (n < 1)
    throw DataError("data.dir: the " + std::string(train ? "training" : "validation") + " files of '" + dir +
                    "' (glob '" + glob + "') hold " + std::to_string(bytes.size()) + " bytes, fewer than one " +
                    "sequence of model.seq_len + 1 = " + std::to_string(seq_len + 1));
  // Window i: inputs bytes[i T, (i+1) T), targets shifted by one. Both are views of one int64
  // copy of the bytes the windows use (8x the corpus; the bytes are freed on return).
  const auto tokens = torch::from_blob(bytes.data(), {n * seq_len + 1}, torch::kUInt8).to(torch::kInt64);
  Dataset ds;
  ds.name = "text";
  ds.task = Task::language_model;
  ds.classes = 256;
  ds.images = tokens.narrow(0, 0, n * seq_len).view({n, seq_len});
  ds.labels = tokens.narrow(0, 1, n * seq_len).view({n, seq_len});
  return ds;
}

}  // namespace lowcomm::data
