// The HTML report's content without a browser: every picture present, self-contained, the
// timeline drawn from the simulation, the table listing every plan, errors for bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "report_test_util.h"
#include "weft/report/html.h"

namespace weft {
namespace {

using namespace report_test;

bool contains(const std::string& s, const std::string& x) { return s.find(x) != std::string::npos; }
int count(const std::string& s, const std::string& x) {
  int n = 0;
  for (size_t at = s.find(x); at != std::string::npos; at = s.find(x, at + 1)) ++n;
  return n;
}

ReportInput input(const FakeCost& cm) {
  ReportInput in;
  in.best = plan(gpt(8), cluster(1, 8), train(2, 4, 16), LayerStrategy{.tp = 2, .sp = true, .dp = 2, .zero = 1});
  in.best.stages[1].layers[3].recompute = Recompute::kFull;  // layer-wise
  in.alternatives.push_back(plan(gpt(8), cluster(1, 8), train(4, 8, 16), LayerStrategy{.tp = 2}));
  in.uniform = plan(gpt(8), cluster(1, 8), train(1, 2, 16), LayerStrategy{.dp = 8, .zero = 3});
  in.cost = &cm;
  return in;
}

TEST(Html, HasEveryPictureAndIsSelfContained) {
  FakeCost cm;
  auto r = render_html_report(input(cm));
  ASSERT_TRUE(r.ok()) << r.error().message;
  const std::string& h = r.value();
  for (const auto& id : report_picture_ids()) EXPECT_EQ(count(h, "id=\"" + id + "\""), 1) << id;
  EXPECT_EQ(count(h, "<svg "), 4);
  // Nothing is fetched: no src/href attributes, no @import or remote url(); the only URL is the SVG
  // namespace name, which browsers never load.
  EXPECT_FALSE(contains(h, " src=")) << "external resource";
  EXPECT_FALSE(contains(h, " href=")) << "external link";
  EXPECT_FALSE(contains(h, "@import"));
  EXPECT_FALSE(contains(h, "url(http"));
  std::regex url("https?://[^\"' <]*");
  for (auto it = std::sregex_iterator(h.begin(), h.end(), url); it != std::sregex_iterator(); ++it)
    EXPECT_EQ(it->str(), "http://www.w3.org/2000/svg");
  EXPECT_TRUE(contains(h, "<!DOCTYPE html>"));
  EXPECT_TRUE(contains(h, "</html>"));
}

TEST(Html, TimelineShowsEveryMicroBatchOfEveryStage) {
  FakeCost cm;
  ReportInput in = input(cm);
  auto r = render_html_report(in);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const std::string& h = r.value();
  const size_t a = h.find("<svg id=\"timeline\""), b = h.find("</svg>", a);
  const std::string tl = h.substr(a, b - a);
  // pp=2, m=4: per stage and micro-batch a forward, a backward and two p2p sends; the one layer with
  // full recompute (stage 1) adds a recompute block per micro-batch.
  for (int mb = 0; mb < 4; ++mb) EXPECT_EQ(count(tl, "data-mb=\"" + std::to_string(mb) + "\""), 2 * 4 + 1) << mb;
  EXPECT_TRUE(contains(tl, "predicted step"));
  EXPECT_TRUE(contains(tl, "simulated"));
  EXPECT_TRUE(contains(tl, "url(#hatch-timeline)"));  // the bubbles
  EXPECT_TRUE(contains(tl, "stage 1: recompute of micro-batch 3"));
}

TEST(Html, MapAndTableDescribeThePlans) {
  FakeCost cm;
  auto r = render_html_report(input(cm));
  ASSERT_TRUE(r.ok()) << r.error().message;
  const std::string& h = r.value();
  // The strategy map has a cell per layer and row (+ the embedding column): 5 rows x 9 columns.
  const size_t a = h.find("<svg id=\"strategy-map\""), b = h.find("</svg>", a);
  const std::string map = h.substr(a, b - a);
  EXPECT_EQ(count(map, "<title>layer 7: tp2+sp dp2 z1 rc=full</title>"), 5);
  EXPECT_EQ(count(map, "<title>embedding / LM head: tp2+sp dp2 z1</title>"), 5);
  for (const char* row : {">tp<", ">sequence<", ">dp<", ">ZeRO<", ">recompute<"}) EXPECT_TRUE(contains(map, row)) << row;
  EXPECT_TRUE(contains(h, "recompute full"));  // legend entry
  // The table: the plan, one alternative and the uniform baseline.
  const size_t t0 = h.find("<table id=\"alternatives\""), t1 = h.find("</table>", t0);
  const std::string table = h.substr(t0, t1 - t0);
  EXPECT_EQ(count(table, "<tr"), 4);
  EXPECT_TRUE(contains(table, "<th>uniform</th>"));
  EXPECT_TRUE(contains(table, "<th>alternative 1</th>"));
  EXPECT_TRUE(contains(table, "layer-wise: tp2+sp dp2 z1 x7, tp2+sp dp2 z1 rc=full x1"));
  EXPECT_TRUE(contains(table, "dp8 z3 (all layers)"));
  // Memory bars: both stages, against the device's 80 GiB and the fake's 76 GiB budget.
  EXPECT_TRUE(contains(h, "device 80.00 GiB"));
  EXPECT_TRUE(contains(h, "budget 76.00 GiB"));
  EXPECT_TRUE(contains(h, "stage 1 activations: 2.00 GiB"));  // 4 layers x 0.5 GiB
}

TEST(Html, BadInputIsAnError) {
  FakeCost cm;
  ReportInput in = input(cm);
  in.cost = nullptr;
  auto r = render_html_report(in);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error().message, "no cost model"));
  in.cost = &cm;
  in.alternatives[0].stages[0].layers[0].tp = 3;
  auto r2 = render_html_report(in);
  ASSERT_FALSE(r2.ok());
  EXPECT_TRUE(contains(r2.error().message, "alternative 1: stages[0].layers[0]")) << r2.error().message;
  auto none = make_report_input({}, std::nullopt, cm);
  ASSERT_FALSE(none.ok());
  auto w = write_html_report("/nonexistent-dir/x/report.html", input(cm));
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().kind, ErrorKind::kIo);
}

TEST(Html, MakeReportInputFromSearchResultFields) {
  FakeCost cm;
  ReportInput in = input(cm);
  std::vector<Plan> top{in.best, in.alternatives[0]};
  auto r = make_report_input(top, in.uniform, cm);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->best, in.best);
  ASSERT_EQ(r->alternatives.size(), 1u);
  EXPECT_EQ(r->alternatives[0], in.alternatives[0]);
  EXPECT_TRUE(r->uniform.has_value());
  EXPECT_EQ(r->cost, &cm);
}

// A zb-h1 plan draws its weight-gradient passes in their own colour, named in the legend.
TEST(Html, ZbH1TimelineShowsWeightGradients) {
  FakeCost cm;
  ReportInput in = input(cm);
  in.best.train.schedule = Schedule::kZbH1;
  auto r = render_html_report(in);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const std::string& h = r.value();
  EXPECT_TRUE(contains(h, "weight gradient (W)"));
  const size_t a = h.find("<svg id=\"timeline\""), b = h.find("</svg>", a);
  const std::string tl = h.substr(a, b - a);
  EXPECT_TRUE(contains(tl, "stage 0: weight grad of micro-batch 3"));
  EXPECT_EQ(count(tl, "#edc948"), 2 * 4);  // one W per stage and micro-batch
  // Under 1F1B neither appears.
  auto plain = render_html_report(input(cm));
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(contains(plain.value(), "weight gradient (W)"));
  EXPECT_FALSE(contains(plain.value(), "#edc948"));
}

// A zb-v plan (gpt 8 layers, pp 2, vp 2, m 4): the timeline draws its W passes as zb-h1's and notes
// the V; a block of virtual stage 3 is drawn on device group 0 (its chunk 1), and the memory chart
// adds stages 0 and 3 on that group.
TEST(Html, ZbVTimelineShowsTheV) {
  FakeCost cm;
  ReportInput in = input(cm);
  in.best = plan(gpt(8), cluster(1, 8), train(2, 4, 16, Schedule::kZbV, 2), LayerStrategy{.tp = 2, .sp = true, .dp = 2});
  ASSERT_TRUE(validate(in.best).ok()) << validate(in.best).error().message;
  auto r = render_html_report(in);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const std::string& h = r.value();
  EXPECT_TRUE(contains(h, "weight gradient (W)"));
  EXPECT_TRUE(contains(h, "ZB-V: each device holds two model chunks in a V"));
  const size_t a = h.find("<svg id=\"timeline\""), b = h.find("</svg>", a);
  const std::string tl = h.substr(a, b - a);
  EXPECT_TRUE(contains(tl, "stage 0 (virtual stage 3): weight grad of micro-batch 2"));
  EXPECT_TRUE(contains(tl, "stage 1 (virtual stage 2): forward of micro-batch 0"));
  EXPECT_FALSE(contains(tl, "stage 1 (virtual stage 3)"));
  EXPECT_EQ(count(tl, "#edc948"), 4 * 4);  // one W per virtual stage and micro-batch
}

}  // namespace
}  // namespace weft
