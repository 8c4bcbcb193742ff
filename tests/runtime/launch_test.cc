// `weft launch` output (weft/runtime/launch.h, docs/runtime.md "Launching"): JSON lines stay JSON
// lines, and an error every rank prints is printed once, by the rank that failed.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "rt_util.h"

namespace weft::rttest {
namespace {

struct Split {
  int status = -1;
  std::string out, err;  // the launcher's stdout and stderr
};

// Runs a shell command line with stdout and stderr kept apart.
Split run_split(const std::string& cmd, const std::string& name) {
  Split r;
  const std::string dir = temp_dir(name), err = dir + "/stderr";
  FILE* f = popen((cmd + " 2>" + err).c_str(), "r");
  if (!f) return r;
  char buf[4096];
  while (fgets(buf, sizeof buf, f)) r.out += buf;
  const int st = pclose(f);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  {
    std::ifstream e(err);
    r.err.assign(std::istreambuf_iterator<char>(e), {});
  }
  std::filesystem::remove_all(dir);
  return r;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    out.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return out;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// ---- JSON lines ----

TEST(LaunchOutput, TrainJsonUnderTheLauncherIsJsonLines) {
  const Split r = run_split(driver() + " launch -n 2 -- " + driver() + " train --steps 3 --format json", "json");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  int steps = 0, summaries = 0;
  for (const std::string& l : lines_of(r.out)) {
    if (l.empty()) continue;
    Json j;
    ASSERT_NO_THROW(j = Json::parse(l)) << "not a JSON line: " << l;
    if (j.contains("summary")) ++summaries;
    else if (j.contains("step")) ++steps;
  }
  EXPECT_EQ(steps, 3) << r.out;
  EXPECT_EQ(summaries, 1) << r.out;
}

TEST(LaunchOutput, OnlyLinesStartingWithABraceLoseThePrefix) {
  const Split r = run_split(driver() + " launch -n 2 -- sh -c 'echo \"{\\\"rank\\\":$RANK}\"; echo text $RANK; "
                                       "echo \"{not json on stderr\" >&2'",
                            "brace");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const std::vector<std::string> out = lines_of(r.out);
  for (int k = 0; k < 2; ++k) {
    EXPECT_NE(std::find(out.begin(), out.end(), "{\"rank\":" + std::to_string(k) + "}"), out.end()) << r.out;
    EXPECT_NE(std::find(out.begin(), out.end(), "[" + std::to_string(k) + "] text " + std::to_string(k)), out.end())
        << r.out;
    EXPECT_NE(r.err.find("[" + std::to_string(k) + "] {not json on stderr"), std::string::npos) << r.err;
  }
}

// ---- errors ----

// Every rank prints the same error; rank 1 exits with it a second later, the others are stopped.
TEST(LaunchOutput, TheSameErrorIsPrintedOnceByTheRankThatFailed) {
  const Split r = run_split(driver() + " launch -n 3 -- sh -c 'echo \"weft: error: --tp: tp=3 does not divide 32 "
                                       "attention heads\" >&2; if [ $RANK = 1 ]; then sleep 1; exit 2; fi; sleep 60'",
                            "same_error");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(count(r.err, "weft: error: --tp: tp=3 does not divide 32 attention heads"), 1u) << r.err;
  const size_t error = r.err.find("[1] weft: error: --tp: tp=3 does not divide 32 attention heads\n");
  const size_t exited = r.err.find("weft launch: rank 1 exited with code 2; stopping the other 2 rank(s)");
  ASSERT_NE(error, std::string::npos) << r.err;
  ASSERT_NE(exited, std::string::npos) << r.err;
  EXPECT_LT(error, exited) << r.err;
  EXPECT_NE(r.err.find("weft launch: ranks 0, 2 reported the same error as rank 1"), std::string::npos) << r.err;
}

// A real one: every rank of `weft train` refuses the same flag before connecting.
TEST(LaunchOutput, TrainsBadFlagIsReportedOnce) {
  const Split r = run_split(driver() + " launch -n 3 -- " + driver() + " train --collective-timeout 0", "train_flag");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(count(r.err, "weft: error: --collective-timeout: must be positive"), 1u) << r.err;
  EXPECT_NE(r.err.find("] weft: error: --collective-timeout: must be positive"), std::string::npos) << r.err;
}

TEST(LaunchOutput, DifferentErrorsAreEachPrinted) {
  const Split r = run_split(driver() + " launch -n 2 -- sh -c 'echo \"weft: error: bad thing on $RANK\" >&2; "
                                       "[ $RANK = 1 ] && sleep 1 || sleep 3; exit $((RANK + 2))'",
                            "differ");
  EXPECT_NE(r.status, 0) << r.err;
  EXPECT_EQ(count(r.err, "[0] weft: error: bad thing on 0\n"), 1u) << r.err;
  EXPECT_EQ(count(r.err, "[1] weft: error: bad thing on 1\n"), 1u) << r.err;
  EXPECT_EQ(r.err.find("reported the same error"), std::string::npos) << r.err;
}

// An error of several lines stays together, and --no-prefix leaves it unprefixed: the launcher's
// line names the rank.
TEST(LaunchOutput, AnErrorOfSeveralLinesStaysTogetherWithoutPrefix) {
  const Split r = run_split(driver() + " launch --no-prefix -n 2 -- sh -c 'printf \"weft: error: plan: first\\n"
                                       "  second line\\n\" >&2; if [ $RANK = 0 ]; then sleep 1; exit 3; fi; sleep 60'",
                            "lines");
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_EQ(count(r.err, "weft: error: plan: first\n  second line\n"), 1u) << r.err;
  EXPECT_EQ(count(r.err, "second line"), 1u) << r.err;
  EXPECT_EQ(r.err.find("[0]"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("weft launch: rank 0 exited with code 3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("weft launch: rank 1 reported the same error as rank 0"), std::string::npos) << r.err;
}

// An error from a rank that does not exit is held only a moment, not until the job ends.
TEST(LaunchOutput, AnErrorOfARankStillRunningIsNotHeldLong) {
  const auto t0 = std::chrono::steady_clock::now();
  FILE* f = popen((driver() + " launch -n 1 -- sh -c 'echo \"weft: error: still here\" >&2; sleep 8' 2>&1").c_str(),
                  "r");
  ASSERT_NE(f, nullptr);
  char buf[4096];
  double seen = -1;
  while (fgets(buf, sizeof buf, f))
    if (seen < 0 && std::string(buf).find("[0] weft: error: still here") != std::string::npos)
      seen = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  pclose(f);
  ASSERT_GE(seen, 0);
  EXPECT_LT(seen, 6) << "printed after " << seen << " s of " << total << " s";
  EXPECT_GE(total, 7);
}

}  // namespace
}  // namespace weft::rttest
