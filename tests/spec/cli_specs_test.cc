// `weft models` / `weft clusters` (bin/weft/cmd_specs.cc) driven through CLI11 in-process.
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "cli_harness.h"
#include "weft/spec/presets.h"

namespace weft::cli {

namespace {

using test::CliRun;

CliRun run(const std::vector<std::string>& args) { return test::run_cli(register_spec_commands, args); }

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(CliSpecs, ModelsTableListsEveryPresetWithin80Columns) {
  const CliRun r = run({"models"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const auto& name : model_preset_names()) EXPECT_NE(r.out.find(name), std::string::npos) << name;
  for (const auto& l : lines(r.out)) EXPECT_LE(l.size(), 80u) << l;
  EXPECT_NE(r.out.find("64/8"), std::string::npos);     // llama-2-70b heads/kv
  EXPECT_NE(r.out.find("8x14336"), std::string::npos);  // mixtral experts
  EXPECT_NE(r.out.find("6.74B"), std::string::npos);    // llama-2-7b parameters
}

TEST(CliSpecs, ClustersTableWithin80Columns) {
  const CliRun r = run({"clusters"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const auto& name : cluster_preset_names()) EXPECT_NE(r.out.find(name), std::string::npos) << name;
  for (const auto& l : lines(r.out)) EXPECT_LE(l.size(), 80u) << l;
  EXPECT_NE(r.out.find("989.5"), std::string::npos);  // H100 bf16
}

TEST(CliSpecs, ShowJsonLoadsBackEqual) {
  for (const auto& name : model_preset_names()) {
    const CliRun r = run({"models", "--show", name, "--format", "json"});
    ASSERT_EQ(r.code, 0) << r.err;
    Result<ModelSpec> m = model_from_json(Json::parse(r.out), "stdout");
    ASSERT_TRUE(m.ok()) << name << ": " << m.error().message;
    EXPECT_TRUE(*m == load_model(name).value()) << name;
  }
  for (const auto& name : cluster_preset_names()) {
    const CliRun r = run({"clusters", "--show", name, "--format", "json"});
    ASSERT_EQ(r.code, 0) << r.err;
    Result<ClusterSpec> c = cluster_from_json(Json::parse(r.out), "stdout");
    ASSERT_TRUE(c.ok()) << name << ": " << c.error().message;
    EXPECT_TRUE(*c == load_cluster(name).value()) << name;
  }
}

TEST(CliSpecs, ShowAHfConfigConvertsIt) {
  const CliRun r = run({"models", "--show", std::string(WEFT_SPEC_TEST_DATA) + "/mixtral-8x7b.config.json",
                     "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  ModelSpec m = model_from_json(Json::parse(r.out)).value();
  m.name = "mixtral-8x7b";
  EXPECT_TRUE(m == load_model("mixtral-8x7b").value());
}

TEST(CliSpecs, ShowTable) {
  CliRun r = run({"models", "--show", "llama-3-8b"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("kv_heads 8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("8.030 B total"), std::string::npos) << r.out;
  r = run({"clusters", "--show", "a100-80gb"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("bf16 312"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("300 GB/s"), std::string::npos) << r.out;
}

TEST(CliSpecs, JsonListings) {
  CliRun r = run({"models", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = Json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  EXPECT_EQ(j.size(), model_preset_names().size());
  r = run({"clusters", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out).size(), cluster_preset_names().size());
}

TEST(CliSpecs, UnknownPresetExits2NamingTheKnownOnes) {
  CliRun r = run({"models", "--show", "llama-5"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("llama-5"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("llama-2-7b"), std::string::npos) << r.err;
  r = run({"clusters", "--show", "tpu"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("h100-80gb"), std::string::npos) << r.err;
  r = run({"models", "--format", "xml"});
  EXPECT_EQ(r.code, 2);
}

}  // namespace
}  // namespace weft::cli
