// Reading /proc/PID/... files of processes that may exit at any moment.
#pragma once

#include <string>

namespace lowcomm {

// The contents of a small /proc file (up to 4 KiB, e.g. "/proc/123/stat"), read with read(2);
// empty when it cannot be opened or read. A process that exits or is reaped while its file is
// read makes the read fail with ESRCH: that is "empty" here, never an exception (std::ifstream
// throws std::ios_base::failure from that read).
std::string readProcFile(const std::string& path);

// The state letter of /proc/PID/stat (field 3: R, S, D, Z, X, ...), '\0' when there is no such
// process (or it vanished while being read).
char processStateOf(long pid);

}  // namespace lowcomm
