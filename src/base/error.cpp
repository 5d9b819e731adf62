#include "lowcomm/base/error.h"

namespace lowcomm::detail {

void throwEnforce(const char* file, int line, const char* cond, const std::string& msg) {
  std::ostringstream os;
  os << file << ":" << line << ": check `" << cond << "` failed";
  if (!msg.empty()) os << ": " << msg;
  throw Error(os.str());
}

}  // namespace lowcomm::detail
