// A fresh temporary directory, removed with everything in it when the object goes away.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace lowcomm::test {

struct TempDir {
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "lc_test_XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::filesystem::path path;
};

}  // namespace lowcomm::test
