// The Optimus page (weft/report/optimus_html.h) without a browser: a rectangle per event in each
// chart, the encoder's work outside the bubbles in its darker shade, errors naming the chart.
#include <gtest/gtest.h>

#include "weft/report/optimus_html.h"

namespace weft {
namespace {

int count(const std::string& s, const std::string& x) {
  int n = 0;
  for (size_t at = s.find(x); at != std::string::npos; at = s.find(x, at + 1)) ++n;
  return n;
}

OptimusChart chart() {
  OptimusChart c;
  c.title = "fine";
  c.groups = 2;
  c.llm_start_s = 0.5;
  c.llm_end_s = 9.5;
  c.events = {{0, 0.5, 1.5, "llm-forward", 0, false},   {1, 1.5, 2.5, "llm-forward", 0, false},
              {1, 2.5, 4.5, "llm-backward", 0, false},  {1, 0.5, 1.0, "encoder-fwd", 1, true},
              {0, 0.0, 0.5, "encoder-fwd", 0, false},   {0, 6.5, 7.5, "encoder-bwd", 0, true},
              {1, 9.5, 10.5, "encoder-bwd", 1, false}, {1, 10.5, 10.6, "encoder-optimizer", -1, false}};
  return c;
}

TEST(OptimusHtml, OneRectanglePerEvent) {
  OptimusReportInput in;
  in.title = "vit-3b-gpt-11b on 8 x H100";
  in.notes = {"step 10.6 s"};
  in.charts = {chart(), chart()};
  in.charts[1].title = "coarse";
  const Result<std::string> r = render_optimus_html(in);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const std::string& h = *r;
  EXPECT_EQ(count(h, "<svg "), 2);
  EXPECT_EQ(count(h, "<rect"), 16);
  EXPECT_EQ(count(h, "encoder forward, outside the bubbles"), 2);
  EXPECT_EQ(count(h, "encoder backward, outside the bubbles"), 2);
  EXPECT_NE(h.find("step 10.6 s"), std::string::npos);
  EXPECT_NE(h.find("micro-batch 1"), std::string::npos);
}

TEST(OptimusHtml, BadEventsNameTheChart) {
  OptimusReportInput in;
  in.charts = {chart()};
  in.charts[0].events[2].group = 2;
  Result<std::string> r = render_optimus_html(in);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("chart fine: an event on group 2 of 2"), std::string::npos) << r.error().message;
  in.charts = {chart()};
  in.charts[0].events[0].kind = "llm-mystery";
  r = render_optimus_html(in);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("unknown event kind \"llm-mystery\""), std::string::npos);
}

}  // namespace
}  // namespace weft
