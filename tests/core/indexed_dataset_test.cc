// Megatron-LM indexed datasets: weft's reader against files written byte by byte from the
// documented layout (tests/support/megatron_dataset.h); every damage a file can carry is refused
// with the file, the field and the numbers.
#include "weft/core/indexed_dataset.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>

#include "megatron_dataset.h"

namespace weft {
namespace {

using testing::MegatronDataset;

std::string temp_prefix(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() / ("weft_megatron_" + std::to_string(getpid()));
  std::filesystem::create_directories(d);
  return (d / name).string();
}

MegatronDataset three_documents(int code) {
  MegatronDataset d;
  d.dtype_code = code;
  d.documents = {{{5, 6, 7, 2}}, {{9, 10}, {11, 12, 13, 2}}, {{1, 2}}};  // the middle one in two sentences
  return d;
}

TEST(IndexedDataset, ReadsDocumentsAndTokensOfEachIntegerType) {
  for (int code : {1, 2, 3, 4, 5, 8}) {
    const std::string p = temp_prefix("ok" + std::to_string(code));
    testing::write_megatron_dataset(p, three_documents(code));
    for (const std::string& spelled : {p, p + ".bin", p + ".idx"}) {
      auto ds = read_indexed_dataset(spelled);
      ASSERT_TRUE(ds.ok()) << ds.error().message;
      EXPECT_EQ(ds->prefix, p);
      EXPECT_EQ(ds->item_bytes, testing::megatron_item_bytes(code));
      EXPECT_EQ(ds->tokens(), 12);
      EXPECT_EQ(ds->documents(), 3);
      EXPECT_EQ(ds->document_spans().length, (std::vector<std::int64_t>{4, 6, 2}));
      EXPECT_EQ(ds->document_spans().start, (std::vector<std::int64_t>{0, 4, 10}));
      EXPECT_EQ(ds->sequence_lengths.size(), 4u);
    }
    EXPECT_TRUE(is_indexed_dataset(p));
    EXPECT_TRUE(is_indexed_dataset(p + ".bin"));
  }
  EXPECT_FALSE(is_indexed_dataset(temp_prefix("absent")));
}

// The damaged index, and what the error must name.
struct Damage {
  const char* what;
  std::function<void(std::string& idx, std::string& bin)> apply;
  std::vector<std::string> says;
};

TEST(IndexedDataset, RefusesDamagedFilesNamingTheFieldAndNumbers) {
  const auto set64 = [](std::string& s, std::size_t at, std::int64_t v) { std::memcpy(&s[at], &v, 8); };
  const std::size_t lengths_at = 34, pointers_at = 34 + 4 * 4, docs_at = 34 + 12 * 4;
  const std::vector<Damage> cases = {
      {"magic", [](std::string& i, std::string&) { i[0] = 'X'; }, {"MMIDIDX"}},
      {"version", [&](std::string& i, std::string&) { set64(i, 9, 2); }, {"version 2"}},
      {"dtype code", [](std::string& i, std::string&) { i[17] = 9; }, {"dtype code 9"}},
      {"float dtype", [](std::string& i, std::string&) { i[17] = 7; }, {"float32"}},
      {"truncated index", [](std::string& i, std::string&) { i.resize(i.size() - 3); }, {"4 sequences", "bytes"}},
      {"huge count", [&](std::string& i, std::string&) { set64(i, 18, std::int64_t(1) << 60); }, {"sequences", "need"}},
      {"multimodal", [](std::string& i, std::string&) { i.append(4, '\0'); }, {"multimodal"}},
      {"negative length", [&](std::string& i, std::string&) { std::int32_t v = -1; std::memcpy(&i[lengths_at], &v, 4); },
       {"sequence 0", "length -1"}},
      {"gap between sequences", [&](std::string& i, std::string&) { set64(i, pointers_at + 8, 10); },
       {"sequence 1", "byte 10", "byte 8"}},
      {"truncated data", [](std::string&, std::string& b) { b.resize(b.size() - 2); }, {"points past", ".bin"}},
      {"longer data", [](std::string&, std::string& b) { b.append(2, '\0'); }, {"24 bytes", "26"}},
      {"documents not from 0", [&](std::string& i, std::string&) { set64(i, docs_at, 1); }, {"document index 0 is 1"}},
      {"documents not to S", [&](std::string& i, std::string&) { set64(i, docs_at + 24, 3); }, {"last document index is 3"}},
      {"documents going back", [&](std::string& i, std::string&) { set64(i, docs_at + 16, 0); }, {"document index 2", "goes back"}},
  };
  const auto [idx0, bin0] = testing::megatron_bytes(three_documents(8));
  for (const Damage& c : cases) {
    std::string idx = idx0, bin = bin0;
    c.apply(idx, bin);
    const std::string p = temp_prefix("bad");
    testing::write_bytes(p + ".idx", idx);
    testing::write_bytes(p + ".bin", bin);
    auto ds = read_indexed_dataset(p);
    ASSERT_FALSE(ds.ok()) << c.what;
    EXPECT_EQ(ds.error().kind, ErrorKind::kBadInput) << c.what;
    EXPECT_NE(ds.error().message.find(p + ".idx"), std::string::npos) << c.what << ": " << ds.error().message;
    for (const std::string& s : c.says)
      EXPECT_NE(ds.error().message.find(s), std::string::npos) << c.what << ": " << ds.error().message;
  }
  auto missing = read_indexed_dataset(temp_prefix("absent"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().kind, ErrorKind::kIo);
  EXPECT_NE(missing.error().message.find("absent.idx"), std::string::npos);
}

}  // namespace
}  // namespace weft
