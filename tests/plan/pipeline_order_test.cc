// The order of a pipeline stage's passes under each schedule (weft/plan/pipeline_order.h), which
// the runtime executes and the cost model's simulator lays out.
#include "weft/plan/pipeline_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace weft {
namespace {

using A = PipeAction;

TEST(PipelineSchedule, GpipeRunsAllForwardsThenAllBackwards) {
  const auto a = pipeline_actions(Schedule::kGpipe, 4, 1, 3);
  const std::vector<A> want{{A::kForward, 0}, {A::kForward, 1}, {A::kForward, 2},
                            {A::kBackward, 0}, {A::kBackward, 1}, {A::kBackward, 2}};
  EXPECT_EQ(a, want);
  EXPECT_EQ(in_flight(a), 3);
}

TEST(PipelineSchedule, OneFOneBWarmsUpByStagesLeft) {
  // Stage 0 of 3 with 4 micro-batches: 2 warm-up forwards, then F2 B0 F3 B1, then B2 B3.
  const std::vector<A> want{{A::kForward, 0},  {A::kForward, 1},  {A::kForward, 2},  {A::kBackward, 0},
                            {A::kForward, 3},  {A::kBackward, 1}, {A::kBackward, 2}, {A::kBackward, 3}};
  EXPECT_EQ(pipeline_actions(Schedule::k1F1B, 3, 0, 4), want);
  // The last stage alternates from the start.
  const std::vector<A> last{{A::kForward, 0}, {A::kBackward, 0}, {A::kForward, 1}, {A::kBackward, 1}};
  EXPECT_EQ(pipeline_actions(Schedule::k1F1B, 3, 2, 2), last);
}

TEST(PipelineSchedule, ZeroBubbleH1PostponesWeightGradientsByTheStageIndex) {
  // Stage 0 of 3, 4 micro-batches: 1F1B's order with each B followed at once by its W.
  const std::vector<A> first{{A::kForward, 0},   {A::kForward, 1},    {A::kForward, 2},   {A::kInputGrad, 0},
                             {A::kWeightGrad, 0}, {A::kForward, 3},   {A::kInputGrad, 1}, {A::kWeightGrad, 1},
                             {A::kInputGrad, 2},  {A::kWeightGrad, 2}, {A::kInputGrad, 3}, {A::kWeightGrad, 3}};
  EXPECT_EQ(pipeline_actions(Schedule::kZbH1, 3, 0, 4), first);
  // The last stage (2) lets two W wait, and runs them at the end, where 1F1B's cool-down is.
  const std::vector<A> last{{A::kForward, 0},   {A::kInputGrad, 0}, {A::kForward, 1},    {A::kInputGrad, 1},
                            {A::kForward, 2},   {A::kInputGrad, 2}, {A::kWeightGrad, 0}, {A::kForward, 3},
                            {A::kInputGrad, 3}, {A::kWeightGrad, 1}, {A::kWeightGrad, 2}, {A::kWeightGrad, 3}};
  EXPECT_EQ(pipeline_actions(Schedule::kZbH1, 3, 2, 4), last);
}

TEST(PipelineSchedule, ZeroBubbleH1KeepsOneFOneBsForwardsAndAtMostStageWeightPassesWaiting) {
  for (int pp = 1; pp <= 5; ++pp)
    for (int s = 0; s < pp; ++s)
      for (int m = 1; m <= 9; ++m) {
        const auto a = pipeline_actions(Schedule::kZbH1, pp, s, m);
        ASSERT_EQ(a.size(), static_cast<size_t>(3 * m));
        // Forwards and input-gradient passes in 1F1B's order.
        std::vector<A> fb;
        for (const auto& x : a)
          if (x.kind != A::kWeightGrad) fb.push_back({x.kind == A::kForward ? A::kForward : A::kBackward, x.micro_batch});
        EXPECT_EQ(fb, pipeline_actions(Schedule::k1F1B, pp, s, m)) << "pp " << pp << " stage " << s << " m " << m;
        // Some state of min(pp, m) micro-batches at once: 1F1B's pp - s with their activations, and
        // up to s more whose weight gradients wait.
        EXPECT_EQ(in_flight(a), std::min(pp, m));
        // Each W after its B, in order; at most s of them waiting at any time.
        int b = 0, w = 0, most = 0;
        for (const auto& x : a) {
          if (x.kind == A::kInputGrad) ++b;
          if (x.kind != A::kWeightGrad) continue;
          EXPECT_EQ(x.micro_batch, w++);
          EXPECT_LT(x.micro_batch, b);
        }
        b = w = 0;
        for (const auto& x : a) {
          b += x.kind == A::kInputGrad;
          w += x.kind == A::kWeightGrad;
          if (x.kind == A::kInputGrad || x.kind == A::kWeightGrad) most = std::max(most, b - w - (x.kind == A::kInputGrad ? 1 : 0));
        }
        EXPECT_LE(most, s) << "pp " << pp << " stage " << s << " m " << m;
      }
}

TEST(PipelineSchedule, OneFOneBHoldsAtMostStagesLeftMicroBatches) {
  for (int pp = 1; pp <= 5; ++pp)
    for (int s = 0; s < pp; ++s)
      for (int m = 1; m <= 9; ++m) {
        const auto a = pipeline_actions(Schedule::k1F1B, pp, s, m);
        ASSERT_EQ(a.size(), static_cast<size_t>(2 * m));
        EXPECT_EQ(in_flight(a), std::min(pp - s, m)) << "pp " << pp << " stage " << s << " m " << m;
        // Every micro-batch runs forward before backward, and backwards run in order.
        std::set<int> fwd;
        int next_b = 0;
        for (const auto& x : a) {
          if (x.kind == A::kForward) fwd.insert(x.micro_batch);
          else {
            EXPECT_TRUE(fwd.count(x.micro_batch));
            EXPECT_EQ(x.micro_batch, next_b++);
          }
        }
      }
}

TEST(PipelineSchedule, InterleavedRunsChunksInMegatronsOrder) {
  // Stage 0 of 2, two chunks, 4 micro-batches: (2 - 0 - 1) * 2 + (2 - 1) * 2 = 4 warm-up forwards
  // (chunk 0 of micro-batches 0, 1, then chunk 1 of them), then one forward one backward, the
  // backwards walking the chunks in reverse.
  auto F = [](int k, int c) { return A{A::kForward, k, c}; };
  auto B = [](int k, int c) { return A{A::kBackward, k, c}; };
  const std::vector<A> want{F(0, 0), F(1, 0), F(0, 1), F(1, 1), F(2, 0), B(0, 1), F(3, 0), B(1, 1),
                            F(2, 1), B(0, 0), F(3, 1), B(1, 0), B(2, 1), B(3, 1), B(2, 0), B(3, 0)};
  EXPECT_EQ(pipeline_actions(Schedule::kInterleaved, 2, 0, 4, 2), want);
  for (int pp = 2; pp <= 4; ++pp)
    for (int vp = 2; vp <= 3; ++vp)
      for (int m = pp; m <= 3 * pp; m += pp)
        for (int s = 0; s < pp; ++s) {
          const auto a = pipeline_actions(Schedule::kInterleaved, pp, s, m, vp);
          ASSERT_EQ(a.size(), static_cast<size_t>(2 * m * vp));
          std::set<std::pair<int, int>> fwd, bwd;
          for (const auto& x : a) {
            const std::pair<int, int> key{x.chunk, x.micro_batch};
            if (x.kind == A::kForward) {
              EXPECT_TRUE(fwd.insert(key).second);
            } else {
              EXPECT_TRUE(fwd.count(key)) << "backward before forward";
              EXPECT_TRUE(bwd.insert(key).second);
            }
          }
          EXPECT_EQ(bwd.size(), static_cast<size_t>(m * vp));
        }
}

TEST(PipelineSchedule, BadArgumentsAreInvariantFailures) {
  EXPECT_DEATH(pipeline_actions(Schedule::kInterleaved, 2, 0, 3, 2), "multiple of the stages");
  EXPECT_DEATH(pipeline_actions(Schedule::k1F1B, 2, 0, 4, 2), "bad stage");
  EXPECT_DEATH(pipeline_actions(Schedule::k1F1B, 2, 2, 4), "bad stage 2 of 2");
  EXPECT_DEATH(pipeline_actions(Schedule::k1F1B, 2, 0, 0), "with 0 micro-batches");
}


// Every stage runs its actions in order against the pipeline's dependencies (a forward after the
// previous virtual stage's, a backward after its forward and the next virtual stage's backward, a
// weight-gradient pass after its backward): every schedule runs to the end, each pass of each
// virtual stage and micro-batch once. This is what the runtime's blocking receives need.
bool runs_to_the_end(Schedule s, int p, int m, int vp, std::string* why) {
  const int V = p * vp;
  const bool split = s == Schedule::kZbH1 || s == Schedule::kZbV;
  std::vector<std::vector<PipeAction>> acts(p);
  size_t total = 0;
  for (int g = 0; g < p; ++g) total += (acts[g] = pipeline_actions(s, p, g, m, vp)).size();
  if (total != static_cast<size_t>((split ? 3 : 2) * V * m)) {
    *why = "total " + std::to_string(total);
    return false;
  }
  std::set<std::tuple<int, int, int>> done;  // (0 F / 1 B / 2 W, virtual stage, micro-batch)
  std::vector<size_t> next(p, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int g = 0; g < p; ++g)
      for (; next[g] < acts[g].size(); ++next[g], progress = true) {
        const PipeAction& a = acts[g][next[g]];
        const int vs = virtual_stage(s, p, g, a.chunk), k = a.micro_batch;
        int kind = 0;
        bool ready = true;
        if (a.kind == PipeAction::kForward) {
          ready = vs == 0 || done.count({0, vs - 1, k});
        } else if (a.kind == PipeAction::kWeightGrad) {
          kind = 2;
          ready = done.count({1, vs, k}) > 0;
        } else {
          kind = 1;
          ready = done.count({0, vs, k}) && (vs == V - 1 || done.count({1, vs + 1, k}));
        }
        if (!ready) break;
        if (!done.insert({kind, vs, k}).second) {
          *why = "a pass ran twice";
          return false;
        }
      }
  }
  for (int g = 0; g < p; ++g)
    if (next[g] != acts[g].size()) {
      *why = "stage " + std::to_string(g) + " stalls at action " + std::to_string(next[g]);
      return false;
    }
  return true;
}

TEST(PipelineSchedule, EveryScheduleRunsToTheEnd) {
  for (int p = 1; p <= 6; ++p)
    for (int m = 1; m <= 3 * p; ++m) {
      std::string why;
      for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B, Schedule::kZbH1})
        EXPECT_TRUE(runs_to_the_end(s, p, m, 1, &why)) << to_string(s) << " p " << p << " m " << m << ": " << why;
      EXPECT_TRUE(runs_to_the_end(Schedule::kZbV, p, m, 2, &why)) << "zb-v p " << p << " m " << m << ": " << why;
      if (m % p == 0)
        for (int vp = 2; vp <= 3; ++vp)
          EXPECT_TRUE(runs_to_the_end(Schedule::kInterleaved, p, m, vp, &why))
              << "interleaved vp " << vp << " p " << p << " m " << m << ": " << why;
    }
}

// ZB-V's V: group g holds virtual stages g and 2 pp - 1 - g; group 0 the first and the last.
TEST(PipelineSchedule, ZeroBubbleVPlacesTheChunksInAV) {
  EXPECT_EQ(virtual_stage(Schedule::kZbV, 4, 0, 0), 0);
  EXPECT_EQ(virtual_stage(Schedule::kZbV, 4, 0, 1), 7);
  EXPECT_EQ(virtual_stage(Schedule::kZbV, 4, 3, 1), 4);
  EXPECT_EQ(virtual_stage(Schedule::kInterleaved, 4, 3, 1), 7);
  // stage_device_group and stage_chunk invert it, for every schedule with chunks.
  for (Schedule s : {Schedule::kInterleaved, Schedule::kZbV})
    for (int g = 0; g < 4; ++g)
      for (int c = 0; c < 2; ++c) {
        const int vs = virtual_stage(s, 4, g, c);
        EXPECT_EQ(stage_device_group(s, 4, vs), g) << to_string(s) << " " << vs;
        EXPECT_EQ(stage_chunk(s, 4, vs), c) << to_string(s) << " " << vs;
      }
  EXPECT_EQ(stage_device_group(Schedule::kZbV, 4, 4), 3);  // the turn: virtual stages 3 and 4 on group 3
  EXPECT_DEATH(stage_device_group(Schedule::kZbV, 4, 8), "zb-v has 8 virtual stages, asked for 8");
  EXPECT_EQ(stage_device_group(Schedule::k1F1B, 4, 2), 2);
  EXPECT_EQ(stage_chunk(Schedule::k1F1B, 4, 2), 0);
  // The last group of 2 with 4 micro-batches: 1 forward of chunk 0, then (F1, F0) once, then
  // F1 B1 W1 once, then the steady F0 B0 W0 F1 B1 W1 pairs, then the cool-down.
  const auto a = pipeline_actions(Schedule::kZbV, 2, 1, 4, 2);
  ASSERT_GE(a.size(), 5u);
  EXPECT_EQ(a[0], (PipeAction{PipeAction::kForward, 0, 0}));
  EXPECT_EQ(a[1], (PipeAction{PipeAction::kForward, 0, 1}));
  EXPECT_EQ(a[2], (PipeAction{PipeAction::kForward, 1, 0}));
  EXPECT_EQ(a[3], (PipeAction{PipeAction::kForward, 1, 1}));
  EXPECT_EQ(a[4], (PipeAction{PipeAction::kInputGrad, 0, 1}));
}

}  // namespace
}  // namespace weft
