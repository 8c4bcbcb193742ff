// `weft varlen`: the table and the JSON object (its keys are relied on), and bad input named.
#include <gtest/gtest.h>

#include <fstream>

#include "cli_harness.h"
#include "weft/core/json.h"

namespace weft::cli {
namespace {

using test::run_cli;

// Under the running test's own name: ctest runs this binary's tests as parallel processes, and one
// rewriting a file another is reading breaks the reader.
std::string lengths_file(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + "varlen_" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" + name;
  std::ofstream(path) << content;
  return path;
}

std::string small_lengths() {
  std::string s;
  for (int i = 0; i < 64; ++i) s += std::to_string(i % 9 == 0 ? 20000 + 100 * i : 200 + 37 * i) + "\n";
  return lengths_file("small.txt", s + "500000\n");
}

TEST(VarlenCli, JsonCarriesEveryStepAndTheSummary) {
  auto r = run_cli(register_varlen_commands,
                   {"varlen", "--lengths", small_lengths(), "--model", "gpt-7b", "--cost-model", "flexsp", "--cluster",
                    "a100-40gb", "--gpus", "16", "--memory-gb", "30", "--global-batch", "16", "--max-seq", "65536",
                    "--steps", "3", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = Json::parse(r.out);
  ASSERT_EQ(j.at("steps").size(), 3u);
  int docs = 0;
  for (const Json& step : j.at("steps")) {
    for (const char* k : {"weft_s", "static_s", "adaptive_s", "plan_ms"}) EXPECT_TRUE(step.at(k).is_number()) << k;
    EXPECT_LE(step.at("weft_s").get<double>(), step.at("adaptive_s").get<double>() * (1 + 1e-9));
    EXPECT_LE(step.at("adaptive_s").get<double>(), step.at("static_s").get<double>() * (1 + 1e-9));
    for (const Json& g : step.at("groups")) {
      EXPECT_GE(g.at("size").get<int>(), 1);
      docs += static_cast<int>(g.at("lengths").size());
    }
  }
  EXPECT_EQ(docs, 48);
  const Json& s = j.at("summary");
  for (const char* k : {"speedup_vs_static", "speedup_vs_adaptive", "plan_ms_median", "plan_ms_max", "dropped"})
    EXPECT_TRUE(s.contains(k)) << k;
  EXPECT_GE(s.at("speedup_vs_static").get<double>(), s.at("speedup_vs_adaptive").get<double>());
  EXPECT_EQ(s.at("dropped").get<int>(), 0);  // the 500000 comes after the third batch
}

TEST(VarlenCli, TableSaysWhatWasDroppedAndTheTotals) {
  auto r = run_cli(register_varlen_commands, {"varlen", "--lengths", small_lengths(), "--model", "gpt3-1.3b", "--cluster",
                                              "a100-80gb", "--gpus", "8", "--global-batch", "16", "--max-seq", "21000",
                                              "--steps", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("documents over --max-seq dropped"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("total: weft"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("static: every group of"), std::string::npos) << r.out;
}

// --report: one picture per step, a column per group with its documents, every GPU accounted for.
TEST(VarlenCli, ReportDrawsEveryStep) {
  const std::string path = ::testing::TempDir() + "varlen_report_draws_every_step.html";
  auto r = run_cli(register_varlen_commands,
                   {"varlen", "--lengths", small_lengths(), "--model", "gpt-7b", "--cost-model", "flexsp", "--gpus", "16",
                    "--memory-gb", "30", "--global-batch", "16", "--max-seq", "65536", "--steps", "3", "--report", path});
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(path);
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t pictures = 0, docs = 0;
  for (size_t p = html.find("<svg id=\"varlen-step-"); p != std::string::npos; p = html.find("<svg id=\"varlen-step-", p + 1))
    ++pictures;
  for (size_t p = html.find(" tokens on "); p != std::string::npos; p = html.find(" tokens on ", p + 1)) ++docs;
  EXPECT_EQ(pictures, 3u);
  EXPECT_EQ(docs, 48u);  // every document of the three steps, once
  EXPECT_NE(html.find("static: every group of"), std::string::npos);
}

TEST(VarlenCli, BadInputIsNamed) {
  const std::vector<std::string> base = {"--model", "gpt-7b", "--cost-model", "flexsp", "--gpus", "16", "--global-batch", "4"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"varlen"};
    a.insert(a.end(), extra.begin(), extra.end());
    a.insert(a.end(), base.begin(), base.end());
    return run_cli(register_varlen_commands, a);
  };
  auto neither = with({});
  EXPECT_EQ(neither.code, 2);
  EXPECT_NE(neither.err.find("--lengths FILE or as --data TOKENS --eos ID"), std::string::npos) << neither.err;
  auto bad_line = with({"--lengths", lengths_file("bad.txt", "12\n-4\n")});
  EXPECT_EQ(bad_line.code, 2);
  EXPECT_NE(bad_line.err.find("line 2: length -4 is not positive"), std::string::npos) << bad_line.err;
  auto empty = with({"--lengths", lengths_file("empty.txt", "")});
  EXPECT_NE(empty.err.find("no lengths in the file"), std::string::npos) << empty.err;
  auto no_eos = with({"--data", lengths_file("t.bin", "ab")});
  EXPECT_NE(no_eos.err.find("--eos ID"), std::string::npos) << no_eos.err;
  auto model = run_cli(register_varlen_commands, {"varlen", "--lengths", small_lengths(), "--model", "llama-2-7b",
                                                  "--cost-model", "flexsp", "--global-batch", "4"});
  EXPECT_EQ(model.code, 2);
  EXPECT_NE(model.err.find("gpt-7b, gpt-13b, gpt-30b"), std::string::npos) << model.err;
  // A document no group holds (no --max-seq): the longest, its length, the GPUs.
  auto huge = run_cli(register_varlen_commands,
                      {"varlen", "--lengths", lengths_file("huge.txt", "100\n5000000\n"), "--model", "gpt-7b",
                       "--cost-model", "flexsp", "--gpus", "8", "--global-batch", "2", "--steps", "1"});
  EXPECT_EQ(huge.code, 3);
  EXPECT_NE(huge.err.find("5000000 tokens"), std::string::npos) << huge.err;
}

}  // namespace
}  // namespace weft::cli
