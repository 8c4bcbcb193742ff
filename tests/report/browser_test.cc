// Renders the report of a known plan in headless Chromium (Debian package `chromium`): the page must
// load without script errors, its own check must find every picture, and a PNG screenshot is kept at
// <build>/artifacts/report/report.png for CI. A missing Chromium fails the test (it is not skipped):
// install it with `apt-get install -y chromium`, or point WEFT_CHROMIUM at the executable.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "report_test_util.h"
#include "weft/cost/analytic.h"
#include "weft/report/html.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using namespace report_test;

std::string find_chromium() {
  if (const char* env = std::getenv("WEFT_CHROMIUM"); env && *env) return env;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':'))
    for (const char* name : {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}) {
      const fs::path p = fs::path(dir) / name;
      if (::access(p.c_str(), X_OK) == 0) return p.string();
    }
  return "";
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string quote(const std::string& s) { return "'" + s + "'"; }

// Headless, no sandbox (containers), no GPU, and nothing that reaches the network.
std::string chromium_cmd(const std::string& exe, const fs::path& profile) {
  return "timeout 120 " + quote(exe) +
         " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking"
         " --disable-component-update --disable-sync --disable-dev-shm-usage --hide-scrollbars"
         " --user-data-dir=" + quote(profile.string());
}

// A known plan: a Llama-style model on 16 GPUs, pp=4 with 1F1B, tp4+sp dp1 ZeRO-1, the last stage's
// layers recomputed; a uniform and one alternative plan for the table.
ReportInput known_plan(const CostModel& cm) {
  ReportInput in;
  in.best = plan(llama(16), cluster(2, 8), train(4, 16, 64, Schedule::k1F1B, 1, 4096),
                 LayerStrategy{.tp = 4, .sp = true, .dp = 1, .zero = 1});
  for (auto& l : in.best.stages[3].layers) l.recompute = Recompute::kFull;
  in.alternatives.push_back(plan(llama(16), cluster(2, 8), train(2, 16, 64, Schedule::kInterleaved, 2, 4096),
                                 LayerStrategy{.tp = 8, .sp = true, .dp = 1, .zero = 1}));
  in.uniform = plan(llama(16), cluster(2, 8), train(4, 16, 64, Schedule::k1F1B, 1, 4096),
                    LayerStrategy{.tp = 4, .sp = true, .dp = 1, .zero = 1, .recompute = Recompute::kSelective});
  in.cost = &cm;
  in.title = "known plan: test-llama 16 layers on 16 A100";
  return in;
}

TEST(Browser, ReportRendersInHeadlessChromium) {
  const std::string exe = find_chromium();
  ASSERT_FALSE(exe.empty()) << "Chromium not found on PATH (install the Debian package: apt-get install -y chromium, "
                               "or set WEFT_CHROMIUM)";
  const fs::path dir = fs::path(WEFT_BINARY_DIR) / "artifacts" / "report";
  fs::create_directories(dir);
  const fs::path html = dir / "report.html", png = dir / "report.png", dom = dir / "report.dom.html",
                 log = dir / "chromium.log";
  fs::remove(png);
  fs::remove(dom);
  AnalyticCostModel cm;
  ASSERT_TRUE(write_html_report(html.string(), known_plan(cm)).ok());
  const fs::path profile = fs::temp_directory_path() / ("weft-chromium-" + std::to_string(::getpid()));
  fs::remove_all(profile);
  const std::string url = "file://" + fs::absolute(html).string();

  const std::string dump = chromium_cmd(exe, profile) + " --dump-dom " + quote(url) + " > " + quote(dom.string()) +
                           " 2> " + quote(log.string());
  ASSERT_EQ(std::system(dump.c_str()), 0) << dump << "\n" << slurp(log);
  const std::string d = slurp(dom);
  EXPECT_NE(d.find("data-check=\"ok\""), std::string::npos) << "the page's own check did not pass:\n" << d.substr(0, 400);
  EXPECT_EQ(d.find("data-errors=\""), std::string::npos) << "script errors: " << d.substr(0, 400);
  EXPECT_EQ(slurp(log).find("Uncaught"), std::string::npos) << slurp(log);
  for (const auto& id : report_picture_ids()) EXPECT_NE(d.find("id=\"" + id + "\""), std::string::npos) << id;

  const std::string shot = chromium_cmd(exe, profile) + " --window-size=1280,2300 --screenshot=" +
                           quote(png.string()) + " " + quote(url) + " >> " + quote(log.string()) + " 2>&1";
  ASSERT_EQ(std::system(shot.c_str()), 0) << shot << "\n" << slurp(log);
  fs::remove_all(profile);
  const std::string img = slurp(png);
  ASSERT_GT(img.size(), 24u) << "no screenshot at " << png;
  EXPECT_EQ(img.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  auto be32 = [&](size_t at) {
    return (static_cast<unsigned>(static_cast<unsigned char>(img[at])) << 24) |
           (static_cast<unsigned>(static_cast<unsigned char>(img[at + 1])) << 16) |
           (static_cast<unsigned>(static_cast<unsigned char>(img[at + 2])) << 8) |
           static_cast<unsigned>(static_cast<unsigned char>(img[at + 3]));
  };
  EXPECT_EQ(be32(16), 1280u);  // IHDR width
  EXPECT_EQ(be32(20), 2300u);  // IHDR height
  // A blank page compresses to a few kilobytes; the pictures make it far larger.
  EXPECT_GT(img.size(), 40000u);
  std::printf("report screenshot: %s\n", png.c_str());
  RecordProperty("screenshot", png.string());
}

}  // namespace
}  // namespace weft
