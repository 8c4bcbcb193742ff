#include "weft/core/json.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "weft/core/error.h"

namespace weft {
namespace {

TEST(JsonObj, NamesMissingField) {
  Json j = Json::parse(R"({"a": 1})");
  JsonObj o(j, "model");
  try {
    (void)o.integer("hidden");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "model.hidden: missing required field");
  }
}

TEST(JsonObj, NamesWrongType) {
  Json j = Json::parse(R"({"hidden": "big"})");
  JsonObj o(j, "model");
  try {
    (void)o.integer("hidden");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "model.hidden: expected an integer, got a string \"big\"");
  }
}

TEST(JsonObj, AcceptsIntegralFloatRejectsFraction) {
  Json j = Json::parse(R"({"a": 4.0, "b": 4.5})");
  JsonObj o(j, "x");
  EXPECT_EQ(o.integer("a"), 4);
  EXPECT_THROW((void)o.integer("b"), InputError);
}

TEST(JsonObj, RejectsUnknownKeys) {
  Json j = Json::parse(R"({"hiden": 1})");
  JsonObj o(j, "model");
  try {
    o.reject_unknown({"hidden"});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("model.hiden: unknown field"), std::string::npos);
  }
}

TEST(JsonObj, ArrayPathsAreIndexed) {
  Json j = Json::parse(R"({"groups": [{"count": 1}, {"count": "x"}]})");
  JsonObj o(j, "model");
  auto groups = o.array_of_obj("groups");
  ASSERT_EQ(groups.size(), 2u);
  try {
    (void)groups[1].integer("count");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("model.groups[1].count:", 0), 0u);
  }
}

TEST(JsonFile, MissingFileIsIoError) {
  auto r = catch_errors([] { return read_json_file("/nonexistent/x.json"); });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kIo);
  EXPECT_NE(r.error().message.find("/nonexistent/x.json"), std::string::npos);
}

TEST(JsonFile, MalformedNamesFile) {
  const std::string path = (std::filesystem::temp_directory_path() / "weft_bad.json").string();
  write_text_file(path, "{\"a\": ");
  auto r = catch_errors([&] { return read_json_file(path); });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("malformed JSON"), std::string::npos);
  std::remove(path.c_str());
}

TEST(JsonFile, WriteIsAtomicAndReadable) {
  const std::string path = (std::filesystem::temp_directory_path() / "weft_ok.json").string();
  write_json_file(path, Json{{"k", 3}});
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(read_json_file(path)["k"], 3);
  std::remove(path.c_str());
}

TEST(JsonHash, StableAndSensitive) {
  EXPECT_EQ(json_hash(Json{{"a", 1}}), json_hash(Json{{"a", 1}}));
  EXPECT_NE(json_hash(Json{{"a", 1}}), json_hash(Json{{"a", 2}}));
  EXPECT_EQ(json_hash(Json{{"a", 1}}).size(), 16u);
}

}  // namespace
}  // namespace weft

#include "weft/core/enum_names.h"

namespace weft {
namespace {

enum class Color { kRed, kGreen, kBlue };
constexpr EnumName<Color> kColorNames[] = {{Color::kRed, "red"}, {Color::kGreen, "green"}, {Color::kBlue, "blue"}};

TEST(JsonObj, ArrayOfStringsNamesTheBadElement) {
  const Json j = Json::parse(R"({"ok": ["a", "b"], "bad": ["a", 3], "notarray": "x"})");
  JsonObj o(j, "profile");
  EXPECT_EQ(o.array_of_str("ok"), (std::vector<std::string>{"a", "b"}));
  try {
    (void)o.array_of_str("bad");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("profile.bad[1]: expected a string"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)o.array_of_str("notarray"), InputError);
}

TEST(EnumNames, BothDirectionsAndTheMessage) {
  EXPECT_STREQ(enum_name(kColorNames, Color::kGreen), "green");
  auto c = enum_from_name(kColorNames, "blue", "color");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value(), Color::kBlue);
  auto bad = enum_from_name(kColorNames, "pink", "color");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().kind, ErrorKind::kBadInput);
  EXPECT_EQ(bad.error().message, "color: unknown value \"pink\" (expected red, green or blue)");
}

}  // namespace
}  // namespace weft
