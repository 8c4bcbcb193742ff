// The simulator against weft's analytic cost model on whole plans. The analytic step time is the
// simulator's makespan (docs/cost-model.md §7), so the two agree on every plan; the closed forms
// checked here are derived independently: (m - 1) max T + sum T for GPipe and 1F1B when the last
// stage has the largest forward and backward (schedule_test.cc: RandomStagesAgainstClosedForms),
// and GPipe's two flow lines when it has not.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "pipeline_forms.h"
#include "report_test_util.h"
#include "weft/cost/analytic.h"
#include "weft/cost/estimate.h"
#include "weft/cost/schedule.h"
#include "weft/report/trace.h"

namespace weft {
namespace {

using namespace report_test;

struct Case {
  const char* name;
  Plan p;
  double tolerance;  // |simulated - predicted| / predicted
};

double relative_gap(const Plan& p, const CostModel& cm, double* simulated = nullptr) {
  auto s = simulate_plan(p, cm);
  EXPECT_TRUE(s.ok()) << s.error().message;
  const double pred = estimate(p, cm).step_time.value();
  if (simulated) *simulated = s->makespan_s;
  return (s->makespan_s - pred) / pred;
}

// Plans whose last stage has the largest forward and backward, and interleaved plans: the
// predicted step is the simulated one.
TEST(CostCheck, SimulatedStepEqualsPredictedStep) {
  AnalyticCostModel cm;
  const LayerStrategy tp4sp{.tp = 4, .sp = true, .dp = 1, .zero = 1};
  std::vector<Case> cases{
      {"llama16 pp4 1f1b", plan(llama(16), cluster(2, 8), train(4, 16, 64, Schedule::k1F1B, 1, 4096), tp4sp), 1e-9},
      {"llama16 pp4 gpipe", plan(llama(16), cluster(2, 8), train(4, 16, 64, Schedule::kGpipe, 1, 4096), tp4sp), 1e-9},
      {"llama16 pp1 dp8 zero2", plan(llama(16), cluster(1, 8), train(1, 4, 32, Schedule::k1F1B, 1, 4096),
                                     LayerStrategy{.dp = 8, .zero = 2}), 1e-9},
      {"gpt8 pp4 m32", plan(gpt(8), cluster(1, 8), train(4, 32, 64), LayerStrategy{.tp = 2}), 1e-9},
      {"gpt8 pp4 uneven 1/2/2/3", plan(gpt(8), cluster(1, 8), train(4, 8, 16), LayerStrategy{.tp = 2}, {1, 2, 2, 3}),
       1e-9},
      {"llama32 pp8 m64 dp2", plan(llama(32), cluster(8, 8), train(8, 64, 512, Schedule::k1F1B, 1, 4096),
                                   LayerStrategy{.tp = 4, .sp = true, .dp = 2, .zero = 1}), 1e-9},
      {"llama16 pp2 vp2", plan(llama(16), cluster(2, 8), train(2, 16, 64, Schedule::kInterleaved, 2, 4096),
                               LayerStrategy{.tp = 8, .sp = true, .dp = 1, .zero = 1}), 1e-9},
      {"gpt16 pp2 vp4", plan(gpt(16), cluster(1, 8), train(2, 8, 32, Schedule::kInterleaved, 4), LayerStrategy{.tp = 4}),
       1e-9},
  };
  for (const auto& c : cases) {
    ASSERT_TRUE(validate(c.p).ok()) << c.name << ": " << validate(c.p).error().message;
    if (c.p.train.vp == 1 && c.p.train.pp > 1) {
      // The regime this case is about: the last stage has the largest forward and backward.
      const auto st = stage_timings(c.p, cm);
      const auto& l = st.back();
      for (const auto& t : st) {
        ASSERT_LE((t.fwd + t.p2p * 0.5).value(), (l.fwd + l.p2p * 0.5).value() * (1 + 1e-12)) << c.name;
        ASSERT_LE((t.bwd + t.p2p * 0.5).value(), (l.bwd + l.p2p * 0.5).value() * (1 + 1e-12)) << c.name;
      }
    }
    double sim = 0;
    const double gap = relative_gap(c.p, cm, &sim);
    EXPECT_LE(std::fabs(gap), c.tolerance) << c.name << ": simulated " << sim << " s, gap " << gap;
  }
}

// A heavier first stage, where (m - 1) max T + sum T is not the event layout:
//  - GPipe is two flow lines, so device 0's last backward ends at
//    sum_s (F_s + B_s) + (m - 1)(max F + max B) (F, B include the stage's send, p2p / 2), more than
//    the closed form when the forward and backward bottlenecks are different stages; the predicted
//    step is that plus the update (no gradient sync here: dp = 1).
//  - 1F1B lies between the busiest device's work, m max T, and GPipe's layout of the same stages.
TEST(CostCheck, HeavierFirstStagePredictedAsLaidOut) {
  AnalyticCostModel cm;
  for (const std::vector<int>& counts : {std::vector<int>{3, 2, 2, 1}, std::vector<int>{4, 2, 1, 1}}) {
    Plan g = plan(gpt(8), cluster(1, 8), train(4, 8, 16, Schedule::kGpipe), LayerStrategy{.tp = 2}, counts);
    ASSERT_TRUE(validate(g).ok()) << validate(g).error().message;
    const auto st = stage_timings(g, cm);
    const int m = g.train.micro_batches;
    const testing::StageTotals totals = testing::stage_totals(st);
    const double opt0 = st[0].optimizer.value();
    for (const auto& t : st) EXPECT_EQ(t.grad_sync.value(), 0.0);
    auto sg = simulate_plan(g, cm);
    ASSERT_TRUE(sg.ok());
    const double flow = totals.gpipe(m);
    EXPECT_NEAR(sg->compute_end_s[0], flow, 1e-12 * flow);
    EXPECT_NEAR(sg->makespan_s, flow + opt0, 1e-12 * flow);
    const double predicted_g = estimate(g, cm).step_time.value();
    EXPECT_NEAR(predicted_g, flow + opt0, 1e-12 * flow);
    // The stages are uneven enough for the old closed form to be off.
    EXPECT_GT(totals.max_fwd + totals.max_bwd - totals.max_stage, 1e-3 * totals.max_stage);

    Plan f = g;
    f.train.schedule = Schedule::k1F1B;
    auto sf = simulate_plan(f, cm);
    ASSERT_TRUE(sf.ok());
    const double predicted_f = estimate(f, cm).step_time.value();
    EXPECT_NEAR(predicted_f, sf->makespan_s, 1e-12 * predicted_f);
    EXPECT_GE(predicted_f * (1 + 1e-12), m * totals.max_stage);
    EXPECT_LE(predicted_f, predicted_g * (1 + 1e-12));
    std::printf("stages %d/%d/%d/%d: GPipe %.6f s, 1F1B %.6f s; (m - 1) max T + sum T = %.6f s\n", counts[0],
                counts[1], counts[2], counts[3], predicted_g, predicted_f, totals.bottleneck(m) + opt0);
  }
}

// The trace of a plan under the analytic model spans its predicted step time: the "step" event and
// every compute track's events (blocks + bubbles) add up to it.
TEST(CostCheck, TraceSpansThePredictedStep) {
  AnalyticCostModel cm;
  Plan p = plan(llama(16), cluster(2, 8), train(4, 16, 64, Schedule::k1F1B, 1, 4096),
                LayerStrategy{.tp = 4, .sp = true, .dp = 1, .zero = 1, .recompute = Recompute::kSelective});
  auto sim = simulate_plan(p, cm);
  ASSERT_TRUE(sim.ok());
  const double predicted = estimate(p, cm).step_time.value();
  const Json t = chrome_trace(sim.value(), stage_timings(p, cm), TraceInfo{"llama", predicted, 4});
  std::map<int, double> track_us;
  double step_us = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e["tid"] == 0) step_us = e["dur"];
    if (e["cat"] == "detail" || e["cat"] == "grad sync" || e["tid"] == 0) continue;
    track_us[e["tid"]] += e["dur"].get<double>();
  }
  EXPECT_NEAR(step_us, predicted * 1e6, 1e-9 * predicted * 1e6);
  ASSERT_EQ(track_us.size(), 4u);
  for (auto [tid, us] : track_us) EXPECT_NEAR(us, predicted * 1e6, 1e-9 * predicted * 1e6) << "track " << tid;
}

}  // namespace
}  // namespace weft
