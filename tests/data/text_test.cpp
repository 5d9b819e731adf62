// The byte-level text corpus: which files, the split by file, the windows, errors, and the real
// corpus the shipped config uses (Debian's Python standard library).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "lowcomm/base/error.h"
#include "lowcomm/data/dataset.h"
#include "lowcomm/data/loader.h"
#include "test_util.h"

namespace lowcomm::data {
namespace {

using testing::TempDir;

void writeText(const std::string& path, const std::string& text) {
  testing::writeRaw(path, std::vector<uint8_t>(text.begin(), text.end()));
}

std::string bytesOf(const torch::Tensor& row) {
  std::string s;
  for (int64_t i = 0; i < row.numel(); ++i) s.push_back(static_cast<char>(row[i].item<int64_t>()));
  return s;
}

TEST(TextCorpus, GlobMatchesPathsBelowTheDirectorySorted) {
  TempDir d;
  std::filesystem::create_directories(d.file("sub"));
  for (const char* f : {"b.txt", "a.txt", "c.md", "sub/d.txt"}) writeText(d.file(f), "x");
  EXPECT_EQ(textCorpusFiles(d.path(), "*.txt"), (std::vector<std::string>{"a.txt", "b.txt"}));
  EXPECT_EQ(textCorpusFiles(d.path(), "*/*.txt"), (std::vector<std::string>{"sub/d.txt"}));
  EXPECT_EQ(textCorpusFiles(d.path(), "*"), (std::vector<std::string>{"a.txt", "b.txt", "c.md"}));
}

// Fewer than 10 files: the last one is validation; windows of T inputs, targets shifted by one.
TEST(TextCorpus, SplitsByFileAndCutsShiftedWindows) {
  TempDir d;
  writeText(d.file("1.txt"), "hello ");
  writeText(d.file("2.txt"), "world, again");
  writeText(d.file("3.txt"), "validation text");
  const Dataset train = loadTextCorpus(d.path(), "*.txt", true, 4);
  const std::string stream = "hello world, again";  // 18 bytes: (18 - 1) / 4 = 4 windows
  EXPECT_EQ(train.task, Task::language_model);
  EXPECT_EQ(train.classes, 256);
  ASSERT_EQ(train.size(), 4);
  EXPECT_EQ(train.seqLen(), 4);
  EXPECT_EQ(train.images.scalar_type(), torch::kInt64);
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(bytesOf(train.images[i]), stream.substr(i * 4, 4)) << i;
    EXPECT_EQ(bytesOf(train.labels[i]), stream.substr(i * 4 + 1, 4)) << i;
  }
  const Dataset val = loadTextCorpus(d.path(), "*.txt", false, 4);
  ASSERT_EQ(val.size(), 3);  // 15 bytes
  EXPECT_EQ(bytesOf(val.images[0]), "vali");
  EXPECT_EQ(bytesOf(val.labels[2]), "n te");  // window 2 is "on t"
}

// With 10 files or more every 10th in sorted order (index 9, 19, ...) is validation.
TEST(TextCorpus, EveryTenthFileIsValidation) {
  TempDir d;
  for (int i = 0; i < 12; ++i) writeText(d.file("f" + std::to_string(10 + i) + ".txt"), std::string(3, 'a' + i));
  const Dataset val = loadTextCorpus(d.path(), "*", false, 2);
  EXPECT_EQ(bytesOf(val.images[0]), "jj");  // f19.txt, the 10th
  const Dataset train = loadTextCorpus(d.path(), "*", true, 2);
  EXPECT_EQ(train.size(), (11 * 3 - 1) / 2);
  EXPECT_EQ(bytesOf(train.images[13]), "ik");  // f20.txt follows f18.txt: f19.txt is not in it
}

TEST(TextCorpus, BadInputNamesTheProblem) {
  TempDir d;
  writeText(d.file("only.txt"), "one file only");
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  std::string e = message([&] { loadTextCorpus(d.path(), "*.txt", true, 4); });
  EXPECT_NE(e.find("data.glob"), std::string::npos) << e;
  EXPECT_NE(e.find("1 file"), std::string::npos) << e;
  EXPECT_THROW(loadTextCorpus(d.path(), "*.txt", true, 4), DataError);
  e = message([&] { loadTextCorpus(d.file("missing"), "*", true, 4); });
  EXPECT_NE(e.find("missing"), std::string::npos) << e;
  writeText(d.file("short.txt"), "ab");
  e = message([&] { loadTextCorpus(d.path(), "*.txt", false, 4); });  // validation: "short.txt", 2 bytes
  EXPECT_NE(e.find("validation"), std::string::npos) << e;
  EXPECT_NE(e.find("model.seq_len"), std::string::npos) << e;
  EXPECT_THROW(loadTextCorpus(d.path(), "*.txt", true, 0), ConfigError);
  EXPECT_THROW(loadTextCorpus(d.path(), "", true, 4), ConfigError);
}

// The shipped config's corpus: Debian's Python standard library (libpython3.11-stdlib), through
// the registry, in batches.
TEST(TextCorpus, PythonStandardLibraryThroughTheRegistry) {
  const std::string dir = "/usr/lib/python3.11";
  if (!std::filesystem::exists(dir + "/os.py")) GTEST_SKIP() << dir << " is not installed";
  const Dataset train = loadDataset("text", dir, true, 0, TextOptions{"*.py", 128});
  const Dataset val = loadDataset("text", dir, false, 0, TextOptions{"*.py", 128});
  EXPECT_GT(train.size(), 20000);
  EXPECT_GT(val.size(), 1000);
  EXPECT_GT(train.size(), 5 * val.size());
  EXPECT_GE(train.images.min().item<int64_t>(), 0);
  EXPECT_LT(train.images.max().item<int64_t>(), 256);
  BatchLoader loader(train, 1, 2, 8, 42);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  EXPECT_EQ(b.x.sizes(), (std::vector<int64_t>{8, 128}));
  EXPECT_TRUE(b.x.narrow(1, 1, 127).equal(b.y.narrow(1, 0, 127)));  // targets are the next bytes
  EXPECT_THROW(BatchLoader(train, 0, 1, 8, 42, Augment{true, 2, true}), ConfigError);  // no image augmentation
}

}  // namespace
}  // namespace lowcomm::data
