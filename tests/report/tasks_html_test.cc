// The multi-task Gantt page (weft/report/tasks_html.h): pieces drawn at their ranks, and the errors.
#include <gtest/gtest.h>

#include "weft/report/tasks_html.h"

namespace weft {
namespace {

TasksReportInput two_waves() {
  TasksReportInput in;
  in.title = "two tasks";
  in.gpus = 4;
  TasksPicturePiece a{"a", "enc_a", 2, 4, 1.0, 0};
  TasksPicturePiece b{"b", "enc_b", 2, 1, 0.5, 2};
  TasksPicturePiece c{"a", "backbone", 4, 2, 2.0, 0};
  in.waves = {{0.0, 1.0, {a, b}}, {1.0, 2.0, {c}}};
  return in;
}

TEST(TasksHtml, PiecesAtTheirRanks) {
  TasksReportInput in = two_waves();
  // enc_b listed first but placed on ranks 2-3: its rectangle is drawn from GPU 2.
  std::swap(in.waves[0].pieces[0], in.waves[0].pieces[1]);
  Result<std::string> h = render_tasks_html(in);
  ASSERT_TRUE(h.ok()) << h.error().message;
  EXPECT_NE(h->find("b / enc_b: 1 layers on 2 GPUs (from GPU 2)"), std::string::npos);
  EXPECT_NE(h->find("a / enc_a: 4 layers on 2 GPUs (from GPU 0)"), std::string::npos);
  EXPECT_NE(h->find("a / backbone: 2 layers on 4 GPUs (from GPU 0)"), std::string::npos);
  // Without ranks, pieces stack in order.
  for (auto& w : in.waves)
    for (auto& p : w.pieces) p.first_rank = -1;
  h = render_tasks_html(in);
  ASSERT_TRUE(h.ok());
  EXPECT_NE(h->find("b / enc_b: 1 layers on 2 GPUs (from GPU 0)"), std::string::npos);
  EXPECT_NE(h->find("a / enc_a: 4 layers on 2 GPUs (from GPU 2)"), std::string::npos);
}

TEST(TasksHtml, PiecesDrawnWhereTheStepRunsThem) {
  // enc_a's forward 0-1/3 s and backward 2-8/3 s; enc_b's 0-1/6 and 0.5-0.83; the backbone's
  // 1/3-1 and 1-7/3: the chart spans the step, 8/3 s, not the waves one after another (3 s).
  TasksReportInput in = two_waves();
  auto timed = [](TasksPicturePiece& p, double fwd, double bwd) {
    p.forward_s = fwd, p.forward_len_s = p.time_s / 3, p.backward_s = bwd, p.backward_len_s = p.time_s * 2 / 3;
  };
  timed(in.waves[0].pieces[0], 0, 2);
  timed(in.waves[0].pieces[1], 0, 0.5);
  timed(in.waves[1].pieces[0], 1.0 / 3, 1);
  Result<std::string> h = render_tasks_html(in);
  ASSERT_TRUE(h.ok()) << h.error().message;
  EXPECT_NE(h->find("a / enc_a: 4 layers on 2 GPUs (from GPU 0), wave 1, forward"), std::string::npos);
  EXPECT_NE(h->find("a / backbone: 2 layers on 4 GPUs (from GPU 0), wave 2, backward"), std::string::npos);
  EXPECT_NE(h->find("without barriers between waves"), std::string::npos);
  EXPECT_EQ(h->find("(from GPU 0), 1"), std::string::npos) << "no piece drawn at its wave's start";
  // A piece without its times: every piece drawn at its wave's start.
  in.waves[1].pieces[0].forward_s = -1;
  h = render_tasks_html(in);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->find("without barriers between waves"), std::string::npos);
  EXPECT_NE(h->find("a / backbone: 2 layers on 4 GPUs (from GPU 0), 2"), std::string::npos);
}

TEST(TasksHtml, PiecesBeyondTheGpusAreNamed) {
  TasksReportInput in = two_waves();
  in.waves[0].pieces[1].first_rank = 3;
  Result<std::string> h = render_tasks_html(in);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.error().message.find("wave 1: b/enc_b on ranks 3 to 4 of 4 GPUs"), std::string::npos)
      << h.error().message;
  in = two_waves();
  in.waves[1].pieces.push_back({"b", "backbone", 1, 1, 1.0, 0});
  h = render_tasks_html(in);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.error().message.find("wave 2 uses 5 of 4 GPUs"), std::string::npos) << h.error().message;
}

}  // namespace
}  // namespace weft
