// write_file_durably: the new contents replace the old whole or not at all; failures name the path.
// (That each file and its directory are fsynced in order is checked end to end on checkpoints in
// tests/runtime/train_test.cc with a preloaded recorder of the calls.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>

#include "weft/core/durable_file.h"
#include "weft/core/json.h"

namespace weft {
namespace {

std::string temp_dir(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() / ("weft_durable_" + std::to_string(getpid()) + "_" + name);
  std::filesystem::create_directories(d);
  return d.string();
}

TEST(DurableFile, ReplacesTheContentsAndLeavesNoTemporaryFile) {
  const std::string dir = temp_dir("replace"), path = dir + "/f.bin";
  write_text_file(path, "old");
  const std::string big(3 << 20, 'x');  // larger than the write buffer
  Status s = write_file_durably(path, [&](ByteSink& out) {
    out.write("new:");
    out.write(big.data(), big.size());
  });
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(read_text_file(path), "new:" + big);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove_all(dir);
}

TEST(DurableFile, AFailedFillLeavesTheOldFileWhole) {
  const std::string dir = temp_dir("throw"), path = dir + "/f.txt";
  write_text_file(path, "old contents");
  EXPECT_THROW((void)write_file_durably(path,
                                        [](ByteSink& out) {
                                          out.write("half");
                                          throw std::runtime_error("producer failed");
                                        }),
               std::runtime_error);
  EXPECT_EQ(read_text_file(path), "old contents");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove_all(dir);
}

TEST(DurableFile, AnUnwritableDirectoryIsAnIoErrorNamingThePath) {
  const std::string path = temp_dir("missing") + "/no/such/dir/f.txt";
  Status s = write_file_durably(path, [](ByteSink& out) { out.write("x"); });
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::kIo);
  EXPECT_NE(s.error().message.find(path), std::string::npos) << s.error().message;
  EXPECT_FALSE(sync_directory("/no/such/dir").ok());
}

}  // namespace
}  // namespace weft
