// Reading document lengths (lengths files, token files) and drawing global batches from them.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "weft/varlen/lengths.h"

namespace weft::varlen {
namespace {

std::string temp_file(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

TEST(Lengths, ReadsOnePerLineSkippingBlanksAndComments) {
  auto r = read_lengths(temp_file("ok.txt", "# lengths\n12\n\n  7 \r\n3000\n"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, (std::vector<std::int64_t>{12, 7, 3000}));
}

TEST(Lengths, BadLinesAreNamedWithTheirNumbers) {
  struct Case {
    std::string content, expect;
  } cases[] = {
      {"5\n0\n", "line 2: length 0 is not positive"},
      {"5\n-3\n", "line 2: length -3 is not positive"},
      {"5\n6\n2.5\n", "line 3: \"2.5\" is not an integer length"},
      {"abc\n", "line 1: \"abc\" is not an integer length"},
      {"99999999999999999999999\n", "line 1: \"99999999999999999999999\" is not an integer length"},
      {"", "no lengths in the file"},
      {"# only a comment\n\n", "no lengths in the file"},
  };
  int n = 0;
  for (const Case& c : cases) {
    auto r = read_lengths(temp_file("bad" + std::to_string(n++) + ".txt", c.content));
    ASSERT_FALSE(r.ok()) << c.content;
    EXPECT_EQ(r.error().kind, ErrorKind::kBadInput);
    EXPECT_NE(r.error().message.find(c.expect), std::string::npos) << r.error().message;
  }
  auto missing = read_lengths(::testing::TempDir() + "no-such-file.txt");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("cannot open"), std::string::npos);
}

TEST(Lengths, TokenFilesSplitAtTheEndOfDocumentId) {
  // uint16 ids: documents [5 6 0] [7 0] [0] [8 9] with eos 0 (the last without an eos).
  const std::vector<std::uint16_t> ids = {5, 6, 0, 7, 0, 0, 8, 9};
  std::string bytes(reinterpret_cast<const char*>(ids.data()), ids.size() * 2);
  auto r = document_lengths(temp_file("tokens.bin", bytes), 0);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, (std::vector<std::int64_t>{3, 2, 1, 2}));
  const std::vector<std::uint32_t> wide = {70000, 1, 70000, 3};
  std::string wbytes(reinterpret_cast<const char*>(wide.data()), wide.size() * 4);
  auto w = document_lengths(temp_file("tokens.u32", wbytes), 70000);
  ASSERT_TRUE(w.ok()) << w.error().message;
  EXPECT_EQ(*w, (std::vector<std::int64_t>{1, 2, 1}));
  // A uint16 file cut in the middle of an id, an eos no uint16 can hold, an empty file.
  EXPECT_NE(document_lengths(temp_file("odd.bin", std::string(3, '\1')), 0).error().message.find("not a whole number"),
            std::string::npos);
  EXPECT_NE(document_lengths(temp_file("t.bin", bytes), 70000).error().message.find("--eos 70000"), std::string::npos);
  EXPECT_NE(document_lengths(temp_file("e.bin", ""), 0).error().message.find("no tokens"), std::string::npos);
  EXPECT_NE(document_lengths(temp_file("t.txt", "x"), 0).error().message.find("uint16 (.bin, .u16) or uint32"),
            std::string::npos);
}

TEST(Lengths, DocumentsComeFromExactlyOneSource) {
  const std::string l = temp_file("one.txt", "5\n6\n");
  EXPECT_EQ(*load_documents(l, "", -1), (std::vector<std::int64_t>{5, 6}));
  EXPECT_NE(load_documents(l, l, 0).error().message.find("not both"), std::string::npos);
  EXPECT_NE(load_documents("", "", -1).error().message.find("--lengths FILE or as --data TOKENS --eos ID"),
            std::string::npos);
  EXPECT_NE(load_documents("", "t.bin", -1).error().message.find("--eos ID names"), std::string::npos);
}

TEST(Lengths, BatchesAreDrawnInOrderDroppingTheLongOnes) {
  const std::vector<std::int64_t> l = {1, 2, 50, 3, 4, 5, 6, 70, 7, 8};
  auto b = draw_batches(l, 3, 2, 0, 10, 0);
  ASSERT_TRUE(b.ok()) << b.error().message;
  ASSERT_EQ(b->steps.size(), 2u);
  EXPECT_EQ(b->steps[0], (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(b->steps[1], (std::vector<std::int64_t>{4, 5, 6}));
  EXPECT_EQ(b->dropped, 1);  // 50; 70 comes after the last batch
  EXPECT_EQ(b->longest, 6);
  // From the second batch on.
  auto c = draw_batches(l, 3, 1, 1, 10, 0);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->steps[0], (std::vector<std::int64_t>{4, 5, 6}));
  // A seed shuffles; the same seed draws the same batches.
  auto s1 = draw_batches(l, 3, 2, 0, 0, 7), s2 = draw_batches(l, 3, 2, 0, 0, 7);
  ASSERT_TRUE(s1.ok() && s2.ok());
  EXPECT_EQ(s1->steps, s2->steps);
  EXPECT_NE(s1->steps, b->steps);
  // Too few documents: say how many there are and how many the flags ask for.
  auto few = draw_batches(l, 3, 3, 0, 10, 0);
  ASSERT_FALSE(few.ok());
  EXPECT_NE(few.error().message.find("8 documents within --max-seq, fewer than 9"), std::string::npos)
      << few.error().message;
  EXPECT_FALSE(draw_batches(l, 0, 1, 0, 0, 0).ok());
  EXPECT_FALSE(draw_batches(l, 3, 0, 0, 0, 0).ok());
}

}  // namespace
}  // namespace weft::varlen
