// Writing a whole file so that readers see its old content or its new one, never a part.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace lowcomm {

// Writes bytes to path through a temp file (path + ".tmp") + fsync + rename (+ fsync of the
// directory). Every call is checked: a failure (disk full, permissions, an I/O error) throws
// IoError naming the file and the call; the temp file is removed and `path` keeps its previous
// content. A path that exists and is not a regular file (/dev/null, /dev/stdout, a FIFO) is
// written in place: renaming over it would replace the device with a file (as root, /dev/null).
// A directory is an IoError.
void writeFileAtomically(const std::string& path, const std::string& bytes);
// The same for content produced piece by piece: `fill` calls the sink with each piece, in order,
// and nothing is buffered in memory (a checkpoint is written as the archive serialises it). After
// a failed write the sink ignores further pieces; the error is thrown once `fill` returns.
using FileSink = std::function<void(const void* data, size_t bytes)>;
void writeFileAtomicallyWith(const std::string& path, const std::function<void(const FileSink&)>& fill);

}  // namespace lowcomm
