// The Perfetto / Chrome trace of a simulated step: valid trace-event JSON whose compute tracks tile
// the step exactly, and whose span matches the cost model's step time.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <sstream>

#include "report_test_util.h"
#include "weft/cost/estimate.h"
#include "weft/report/summary.h"
#include "weft/report/trace.h"

namespace weft {
namespace {

using namespace report_test;

// Checks the Chrome trace-event format (JSON object format): every event has ph/pid/tid/name;
// complete events have numeric ts and non-negative dur; metadata names each track.
void expect_trace_format(const Json& j) {
  ASSERT_TRUE(j.is_object());
  ASSERT_TRUE(j.contains("traceEvents"));
  ASSERT_TRUE(j["traceEvents"].is_array());
  EXPECT_EQ(j["displayTimeUnit"], "ms");
  for (const auto& e : j["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e["ph"].is_string()) << e.dump();
    ASSERT_TRUE(e.contains("pid") && e["pid"].is_number_integer()) << e.dump();
    ASSERT_TRUE(e.contains("tid") && e["tid"].is_number_integer()) << e.dump();
    ASSERT_TRUE(e.contains("name") && e["name"].is_string()) << e.dump();
    const std::string ph = e["ph"];
    ASSERT_TRUE(ph == "X" || ph == "M" || ph == "i") << ph;
    if (ph == "X") {
      ASSERT_TRUE(e["ts"].is_number() && e["dur"].is_number()) << e.dump();
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      EXPECT_GE(e["ts"].get<double>(), 0.0);
    }
    if (ph == "M") {
      EXPECT_TRUE(e["args"].contains("name") || e["args"].contains("sort_index")) << e.dump();
    }
  }
}

struct Traced {
  Plan plan;
  Simulation sim;
  Json trace;
  double predicted = 0;
};

Traced trace_of(const Plan& p, const CostModel& cm) {
  Traced t;
  t.plan = p;
  auto sim = simulate_plan(p, cm);
  EXPECT_TRUE(sim.ok()) << sim.error().message;
  t.sim = sim.value();
  t.predicted = estimate(p, cm).step_time.value();
  TraceInfo info{"test", t.predicted, p.devices_per_stage()};
  t.trace = chrome_trace(t.sim, stage_timings(p, cm), info);
  return t;
}

TEST(Trace, ValidFormatAndTracksTileTheStep) {
  FakeCost cm;
  Plan p = plan(gpt(8), cluster(1, 8), train(4, 8, 32), LayerStrategy{.tp = 2, .recompute = Recompute::kFull});
  Traced t = trace_of(p, cm);
  expect_trace_format(t.trace);
  // Round trip through text, as Perfetto reads it.
  Json back = Json::parse(t.trace.dump());
  EXPECT_EQ(back, t.trace);

  const double span_us = t.sim.makespan_s * 1e6;
  std::map<int, double> sum_us;       // top-level events per compute track
  std::map<int, double> cursor_us;    // they follow each other without gaps or overlaps
  std::map<std::string, int> kinds;
  for (const auto& e : t.trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const int tid = e["tid"];
    const std::string cat = e["cat"];
    ++kinds[cat];
    if (tid == 0) {
      EXPECT_NEAR(e["dur"].get<double>(), span_us, 1e-6);
      continue;
    }
    if (cat == "detail" || cat == "grad sync") continue;
    EXPECT_EQ(tid % 2, 1) << "compute tracks have odd ids";
    EXPECT_NEAR(e["ts"].get<double>(), cursor_us[tid], 1e-6 * span_us) << e.dump();
    cursor_us[tid] = e["ts"].get<double>() + e["dur"].get<double>();
    sum_us[tid] += e["dur"].get<double>();
  }
  ASSERT_EQ(sum_us.size(), 4u);
  for (auto [tid, s] : sum_us) EXPECT_NEAR(s, span_us, 1e-9 * span_us) << "track " << tid;
  // Every kind of event is there: forward, backward, recompute, p2p, grad sync, optimizer, bubble,
  // and the per-block detail (compute and TP communication).
  for (const char* k : {"forward", "backward", "recompute", "p2p", "grad sync", "optimizer", "bubble", "detail"})
    EXPECT_GT(kinds[k], 0) << k;
  EXPECT_EQ(kinds["forward"], 4 * 8);
  EXPECT_EQ(kinds["backward"], 4 * 8);
}

// pp=2, 4 layers per stage, m=4 under the fake (ms): stage 0 runs F 4.5 (+0.5 embedding) and B 9,
// stage 1 F 4 and B 8; each has one boundary of 0.25 (half after each op); syncs of 2 ms hide behind
// a 9 ms backward; the update takes 0.4. The fake predicts (m-1) max t + sum t + update
//   = 3 * 13.75 + (13.75 + 12.25) + 0.4 = 67.65 ms.
TEST(Trace, SpanIsThePredictedStepTime) {
  FakeCost cm;
  // GPipe with one stage the bottleneck of both passes: forward and backward are two flow lines,
  // sum(f) + (m-1) max f + sum(b) + (m-1) max b, which is the formula above exactly.
  Plan g = plan(gpt(8), cluster(1, 8), train(2, 4, 16, Schedule::kGpipe), LayerStrategy{.tp = 4});
  Traced t = trace_of(g, cm);
  EXPECT_NEAR(t.predicted, 67.65e-3, 1e-12);
  EXPECT_NEAR(t.sim.makespan_s, t.predicted, 1e-12);
  EXPECT_NEAR(t.trace["otherData"]["simulated_step_s"].get<double>(), t.predicted, 1e-12);
  bool marker = false;
  for (const auto& e : t.trace["traceEvents"])
    if (e["ph"] == "i") {
      marker = true;
      EXPECT_NEAR(e["ts"].get<double>(), t.predicted * 1e6, 1e-6);
    }
  EXPECT_TRUE(marker);

  // 1F1B on the same stages, laid out by hand (ops include their 0.125 send):
  //  dev0 F0[0,4.625] F1[,9.25] B0[16.875,26] F2[,30.625] B1[,39.75] F3[,44.375] B2[,53.5] B3[56.625,65.75]
  //  dev1 F0[4.625,8.75] B0[,16.875] F1[,21] B1[,29.125] F2[30.625,34.75] B2[,42.875] F3[44.375,48.5] B3[,56.625]
  // then stage 0's update [65.75, 66.15]: the bottleneck formula is 1.5 ms (2.2%) pessimistic here,
  // as the first stage's warm-up forwards overlap the second stage's work.
  Plan f = plan(gpt(8), cluster(1, 8), train(2, 4, 16), LayerStrategy{.tp = 4});
  Traced u = trace_of(f, cm);
  EXPECT_NEAR(u.sim.makespan_s, 66.15e-3, 1e-12);
  EXPECT_NEAR(u.predicted, 67.65e-3, 1e-12);
}

TEST(Trace, WritesAFile) {
  FakeCost cm;
  Plan p = plan(gpt(8), cluster(1, 8), train(2, 4, 16), LayerStrategy{.tp = 4});
  auto sim = simulate_plan(p, cm);
  ASSERT_TRUE(sim.ok());
  const std::string path = (std::filesystem::temp_directory_path() / "weft_trace_test.json").string();
  ASSERT_TRUE(write_chrome_trace(path, sim.value(), stage_timings(p, cm), TraceInfo{}).ok());
  Json j = read_json_file(path);
  expect_trace_format(j);
  std::filesystem::remove(path);
  auto bad = write_chrome_trace("/nonexistent-dir/x/trace.json", sim.value(), stage_timings(p, cm), TraceInfo{});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().kind, ErrorKind::kIo);
}

TEST(Summary, TextFitsIn80ColumnsAndJsonCarriesTheFigures) {
  FakeCost cm;
  Plan p = plan(gpt(8), cluster(1, 8), train(2, 4, 16), LayerStrategy{.tp = 4});
  auto sim = simulate_plan(p, cm);
  ASSERT_TRUE(sim.ok());
  const std::string text = simulation_text(sim.value(), 67.65e-3, 4);
  std::stringstream lines(text);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    EXPECT_LE(line.size(), 80u) << line;
    ++n;
  }
  EXPECT_EQ(n, 2 + 1 + 1 + 2);  // two step lines, a blank, the header, a line per stage
  EXPECT_NE(text.find("66.15 ms"), std::string::npos) << text;  // the hand-derived step (above)
  EXPECT_NE(text.find("-2.22%"), std::string::npos) << text;
  const Json j = simulation_json(sim.value(), 67.65e-3);
  EXPECT_NEAR(j["simulated_step_s"].get<double>(), 66.15e-3, 1e-12);
  EXPECT_EQ(j["stages"].size(), 2u);
  EXPECT_EQ(j["schedule"], "1f1b");
}

// ZB-H1: the weight-gradient passes are events of their own, "W<micro-batch>" in category
// "weight grad": pp 2, m 4, 4 layers of 1 ms W per stage -> 8 events of 4 ms. The summary lists
// each stage's W time (4 x 4 ms) and ends its table with the last W.
TEST(Trace, ZbH1ShowsWeightGradientEvents) {
  FakeCost cm;
  Plan p = plan(gpt(8), cluster(1, 8), train(2, 4, 16, Schedule::kZbH1), LayerStrategy{.tp = 4});
  auto sim = simulate_plan(p, cm);
  ASSERT_TRUE(sim.ok()) << sim.error().message;
  const Json j = chrome_trace(sim.value(), stage_timings(p, cm), TraceInfo{});
  expect_trace_format(j);
  std::map<std::string, int> w;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X" && e.contains("cat") && e["cat"] == "weight grad") {
      ++w[e["name"].get<std::string>()];
      EXPECT_NEAR(e["dur"].get<double>(), 4000.0, 1e-6);
    }
  EXPECT_EQ(w, (std::map<std::string, int>{{"W0", 2}, {"W1", 2}, {"W2", 2}, {"W3", 2}}));
  const std::string text = simulation_text(sim.value(), 0, 4);
  EXPECT_NE(text.find("last W ends     W time"), std::string::npos) << text;
  std::stringstream lines(text);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 80u) << line;
  EXPECT_NE(text.find("16.00 ms"), std::string::npos) << text;
  const Json js = simulation_json(sim.value(), 0);
  EXPECT_EQ(js["schedule"], "zb-h1");
  EXPECT_NEAR(js["stages"][1]["weight_grad_s"].get<double>(), 16e-3, 1e-12);
  // 1F1B has no W events and no W column.
  Plan one = p;
  one.train.schedule = Schedule::k1F1B;
  auto s1 = simulate_plan(one, cm);
  ASSERT_TRUE(s1.ok());
  EXPECT_FALSE(simulation_json(s1.value(), 0)["stages"][0].contains("weight_grad_s"));
}

// ZB-V: W events as zb-h1's, and each event names its virtual stage and chunk: pp 2, m 4, 4
// stages of 2 layers. Group 0 runs virtual stages 0 (chunk 0) and 3 (chunk 1); 16 W events of 2 ms
// (2 layers of 1 ms W); the summary lists each group's W time (2 stages x 4 x 2 ms).
TEST(Trace, ZbVNamesTheChunks) {
  FakeCost cm;
  Plan p = plan(gpt(8), cluster(1, 8), train(2, 4, 16, Schedule::kZbV, 2), LayerStrategy{.tp = 4});
  auto sim = simulate_plan(p, cm);
  ASSERT_TRUE(sim.ok()) << sim.error().message;
  const Json j = chrome_trace(sim.value(), stage_timings(p, cm), TraceInfo{});
  expect_trace_format(j);
  int w = 0;
  std::map<std::pair<int, int>, int> chunk_of;  // (device group, virtual stage) -> chunk
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X" && e.contains("cat") && e["cat"] == "weight grad") {
      ++w;
      EXPECT_NEAR(e["dur"].get<double>(), 2000.0, 1e-6);
      chunk_of[{e["args"]["device_group"].get<int>(), e["args"]["stage"].get<int>()}] = e["args"]["chunk"].get<int>();
    }
  EXPECT_EQ(w, 16);
  EXPECT_EQ(chunk_of, (std::map<std::pair<int, int>, int>{{{0, 0}, 0}, {{0, 3}, 1}, {{1, 1}, 0}, {{1, 2}, 1}}));
  const Json js = simulation_json(sim.value(), 0);
  EXPECT_EQ(js["schedule"], "zb-v");
  EXPECT_EQ(js["vp"], 2);
  EXPECT_NEAR(js["stages"][0]["weight_grad_s"].get<double>(), 16e-3, 1e-12);
  EXPECT_NE(simulation_text(sim.value(), 0, 4).find("last W ends     W time"), std::string::npos);
}

}  // namespace
}  // namespace weft
