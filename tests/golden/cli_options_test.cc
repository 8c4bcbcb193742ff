// The command-line surface: the option names of every `weft` command, as `--help` prints them,
// against tests/golden/cli_options.json. A flag removed or renamed by accident breaks users'
// scripts; a deliberate change regenerates the file (WEFT_UPDATE_GOLDEN=1) and shows in its diff.
// Commands that need libtorch (train, launch, profile) are compared only in builds that have them.
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "golden_file.h"
#include "weft/core/json.h"

namespace weft {
namespace {

const std::vector<std::string> kCommands = {"models",   "clusters", "plan",   "estimate",         "report",
                                            "simulate", "export",   "import galvatron", "varlen", "moe-placement"};
const std::vector<std::string> kTorchCommands = {"train", "launch", "profile hardware", "profile model"};

std::string help_of(const std::string& cmd) {
  std::string out;
  FILE* f = popen((std::string(WEFT_BINARY_DIR) + "/bin/weft " + cmd + " --help 2>&1").c_str(), "r");
  if (!f) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

// The long option names (--name) that start an option line of the help text, every name of an
// option with several ("--tp,--tensor-model-parallel-size").
std::vector<std::string> options_of(const std::string& help) {
  std::set<std::string> names;
  const std::regex line(R"re(^\s+(?:-[A-Za-z],)?(--[a-z0-9][a-z0-9-]*(?:,--[a-z0-9][a-z0-9-]*)*))re");
  std::smatch m;
  size_t pos = 0;
  while (pos < help.size()) {
    size_t nl = help.find('\n', pos);
    if (nl == std::string::npos) nl = help.size();
    const std::string l = help.substr(pos, nl - pos);
    if (std::regex_search(l, m, line)) {
      const std::string all = m[1].str();
      for (size_t start = 0, end; start < all.size(); start = end + 1) {
        end = all.find(',', start);
        if (end == std::string::npos) end = all.size();
        names.insert(all.substr(start, end - start));
      }
    }
    pos = nl + 1;
  }
  return {names.begin(), names.end()};
}

TEST(GoldenCli, EveryCommandKeepsItsOptions) {
  std::vector<std::string> cmds = kCommands;
  if (WEFT_WITH_TORCH_BUILD) cmds.insert(cmds.end(), kTorchCommands.begin(), kTorchCommands.end());
  golden::GoldenFile file(std::string(WEFT_GOLDEN_DIR) + "/cli_options.json");
  if (file.updating() && !WEFT_WITH_TORCH_BUILD) GTEST_SKIP() << "regenerate from a build with libtorch (all commands)";
  for (const std::string& cmd : cmds) {
    const std::vector<std::string> got = options_of(help_of(cmd));
    EXPECT_GT(got.size(), 0u) << "weft " << cmd << " --help lists no options";
    if (file.updating()) {
      file.record(cmd, got);
      continue;
    }
    ASSERT_TRUE(file.has(cmd)) << cmd << " is not in " << file.path();
    EXPECT_EQ(got, file.entry(cmd).get<std::vector<std::string>>()) << "weft " << cmd << ": the option names changed";
  }
  if (file.updating()) file.write();
}

}  // namespace
}  // namespace weft
