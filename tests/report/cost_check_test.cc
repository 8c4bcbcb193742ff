// The simulator against weft's analytic cost model on whole plans. The analytic model combines
// stages in closed form (docs/cost-model.md §7): (m - 1) max T + sum T for GPipe and 1F1B, and
// m max T + (sum T - max T) / v interleaved. That form equals the event layout when the last stage
// has the largest forward and the largest backward (schedule_test.cc: RandomStagesAgainstClosedForms)
// -- the LM head usually puts the bottleneck there -- and approximates it otherwise.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "report_test_util.h"
#include "weft/cost/analytic.h"
#include "weft/cost/estimate.h"
#include "weft/report/schedule.h"
#include "weft/report/trace.h"

namespace weft {
namespace {

using report_test::cluster;
using report_test::gpt;
using report_test::llama;
using report_test::plan;
using report_test::train;

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

// Plans whose last stage has the largest forward and backward: the closed form is the simulated
// step (1e-9); interleaved within 0.1%.
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
                               LayerStrategy{.tp = 8, .sp = true, .dp = 1, .zero = 1}), 1e-3},
      {"gpt16 pp2 vp4", plan(gpt(16), cluster(1, 8), train(2, 8, 32, Schedule::kInterleaved, 4), LayerStrategy{.tp = 4}),
       1e-3},
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

// A heavier first stage: the closed form is an approximation of the event layout.
//  - GPipe is two flow lines, so device 0's last backward ends at
//    sum_s (F_s + B_s) + (m - 1)(max F + max B) (F, B include the stage's send, p2p / 2), and the
//    simulated step exceeds the closed form by exactly (m - 1)(max F + max B - max (F + B)) when
//    the forward and backward bottlenecks are different stages (no gradient sync here: dp = 1).
//  - 1F1B lies between the busiest device's work, m max T, and GPipe's layout of the same stages.
TEST(CostCheck, HeavierFirstStageWithinThePipelineEnvelope) {
  AnalyticCostModel cm;
  for (const std::vector<int>& counts : {std::vector<int>{3, 2, 2, 1}, std::vector<int>{4, 2, 1, 1}}) {
    Plan g = plan(gpt(8), cluster(1, 8), train(4, 8, 16, Schedule::kGpipe), LayerStrategy{.tp = 2}, counts);
    ASSERT_TRUE(validate(g).ok()) << validate(g).error().message;
    const auto st = stage_timings(g, cm);
    const int m = g.train.micro_batches;
    double sum = 0, maxf = 0, maxb = 0, maxt = 0, opt0 = st[0].optimizer.value();
    for (const auto& t : st) {
      const double F = (t.fwd + t.p2p * 0.5).value(), B = (t.bwd + t.p2p * 0.5).value();
      sum += F + B;
      maxf = std::max(maxf, F);
      maxb = std::max(maxb, B);
      maxt = std::max(maxt, F + B);
      EXPECT_EQ(t.grad_sync.value(), 0.0);
    }
    auto sg = simulate_plan(g, cm);
    ASSERT_TRUE(sg.ok());
    const double flow = sum + (m - 1) * (maxf + maxb);
    EXPECT_NEAR(sg->compute_end_s[0], flow, 1e-12 * flow);
    EXPECT_NEAR(sg->makespan_s, flow + opt0, 1e-12 * flow);
    const double predicted_g = estimate(g, cm).step_time.value();
    EXPECT_NEAR(sg->makespan_s - predicted_g, (m - 1) * (maxf + maxb - maxt), 1e-9 * flow);

    Plan f = g;
    f.train.schedule = Schedule::k1F1B;
    auto sf = simulate_plan(f, cm);
    ASSERT_TRUE(sf.ok());
    double busiest = 0;
    for (double e : sf->compute_end_s) busiest = std::max(busiest, e);
    EXPECT_GE(busiest * (1 + 1e-12), m * maxt);
    EXPECT_LE(sf->makespan_s, sg->makespan_s * (1 + 1e-12));
    const double predicted_f = estimate(f, cm).step_time.value();
    std::printf("stages %d/%d/%d/%d: GPipe simulated %+.2f%%, 1F1B simulated %+.2f%% vs the closed form\n",
                counts[0], counts[1], counts[2], counts[3], 100 * (sg->makespan_s - predicted_g) / predicted_g,
                100 * (sf->makespan_s - predicted_f) / predicted_f);
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
