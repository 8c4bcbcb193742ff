// The step simulator against schedules worked out by hand and against the textbook pipeline
// formulas (GPipe: Huang et al. 2019; 1F1B and interleaved 1F1B: Narayanan et al. 2021).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <tuple>

#include "pipeline_forms.h"
#include "weft/cost/analytic.h"
#include "weft/cost/schedule.h"

namespace weft {
namespace {

StageTiming timing(double f, double b, double p2p = 0, double grad = 0, double opt = 0, double rc = 0) {
  return StageTiming{.fwd = sec(f),
                     .bwd = sec(b),
                     .recompute = sec(rc),
                     .p2p = sec(p2p),
                     .grad_sync = sec(grad),
                     .optimizer = sec(opt)};
}

ScheduleSpec spec(Schedule s, int pp, int m, int vp = 1, bool overlap = true) {
  return ScheduleSpec{.schedule = s, .pp = pp, .vp = vp, .micro_batches = m, .overlap_grad_sync = overlap};
}

Simulation sim_ok(const ScheduleSpec& sp, const std::vector<StageTiming>& st) {
  auto r = simulate_schedule(sp, st);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? std::move(r).value() : Simulation{};
}

// Equal stages: both GPipe and 1F1B take (m + p - 1)(f + b); the first stage idles (p - 1)(f + b).
TEST(Schedule, EqualStagesMatchTextbookFormula) {
  for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B}) {
    std::vector<StageTiming> st(4, timing(1.0, 2.0));
    Simulation sim = sim_ok(spec(s, 4, 8), st);
    EXPECT_DOUBLE_EQ(sim.makespan_s, (8 + 4 - 1) * 3.0) << to_string(s);
    EXPECT_DOUBLE_EQ(sim.bubble_s[0], (4 - 1) * 3.0) << to_string(s);
    EXPECT_DOUBLE_EQ(sim.busy_s[0], 8 * 3.0);
    // The last stage starts after p - 1 forwards and finishes its last backward p - 1 backwards early.
    EXPECT_DOUBLE_EQ(sim.compute_end_s[3], 33.0 - 3 * 2.0);
  }
}

// pp=2, m=2, stage 0: f=1 b=2, stage 1: f=2 b=4, worked out by hand (times in seconds):
//   1F1B  dev0: F0[0,1] F1[1,2] B0[7,9] B1[13,15]   dev1: F0[1,3] B0[3,7] F1[7,9] B1[9,13]
//   GPipe dev0: F0[0,1] F1[1,2] B0[9,11] B1[13,15]  dev1: F0[1,3] F1[3,5] B0[5,9] B1[9,13]
TEST(Schedule, UnequalStagesByHand) {
  std::vector<StageTiming> st{timing(1, 2), timing(2, 4)};
  using Row = std::tuple<EventKind, int, int, double, double>;  // kind, stage, mb, start, end
  auto rows = [](const Simulation& s) {
    std::vector<Row> r;
    for (const auto& e : s.events) r.emplace_back(e.kind, e.stage, e.micro_batch, e.start_s, e.end_s);
    return r;
  };
  const auto F = EventKind::kForward, B = EventKind::kBackward;
  Simulation a = sim_ok(spec(Schedule::k1F1B, 2, 2), st);
  EXPECT_DOUBLE_EQ(a.makespan_s, 15);
  EXPECT_EQ(rows(a), (std::vector<Row>{{F, 0, 0, 0, 1}, {F, 0, 1, 1, 2}, {B, 0, 0, 7, 9}, {B, 0, 1, 13, 15},
                                       {F, 1, 0, 1, 3}, {B, 1, 0, 3, 7}, {F, 1, 1, 7, 9}, {B, 1, 1, 9, 13}}));
  Simulation g = sim_ok(spec(Schedule::kGpipe, 2, 2), st);
  EXPECT_DOUBLE_EQ(g.makespan_s, 15);
  EXPECT_EQ(rows(g), (std::vector<Row>{{F, 0, 0, 0, 1}, {F, 0, 1, 1, 2}, {B, 0, 0, 9, 11}, {B, 0, 1, 13, 15},
                                       {F, 1, 0, 1, 3}, {F, 1, 1, 3, 5}, {B, 1, 0, 5, 9}, {B, 1, 1, 9, 13}}));
  // The bottleneck formula (m - 1) max_s(f+b) + sum_s(f+b) holds here: 1*6 + 9 = 15.
}

// p2p is blocking busy time, half after each forward and half after each backward:
// pp=2, m=1, f=1 b=2 p2p=1: F0[0,1] send[1,1.5] | F0[1.5,2.5] send[2.5,3] B0[3,5] send[5,5.5] |
// B0[5.5,7.5] send[7.5,8] -> 8 = (m + p - 1)(f + b + p2p).
TEST(Schedule, PointToPointIsBlockingBusyTime) {
  std::vector<StageTiming> st(2, timing(1, 2, 1));
  Simulation s = sim_ok(spec(Schedule::k1F1B, 2, 1), st);
  EXPECT_DOUBLE_EQ(s.makespan_s, 8);
  int p2p = 0;
  for (const auto& e : s.events)
    if (e.kind == EventKind::kP2p) {
      ++p2p;
      EXPECT_DOUBLE_EQ(e.duration(), 0.5);
    }
  EXPECT_EQ(p2p, 4);
  Simulation big = sim_ok(spec(Schedule::k1F1B, 2, 6), st);
  EXPECT_DOUBLE_EQ(big.makespan_s, (6 + 2 - 1) * 4.0);
}

// Overlapped sends (ScheduleSpec::overlap_p2p, the interleaved schedule's default): the same two
// stages, m = 1, f 1, b 2, p2p 0.4 per stage (0.2 per send). Stage 0 F [0,1], its activation
// arrives at 1.2; stage 1 F [1.2,2.2] (its send done at 2.4), B [2.4,4.4], gradient arrives 4.6;
// stage 0 B [4.6,6.6]. Blocking, every send also occupies its device: 6.8. The devices' busy
// time holds no transfer.
TEST(Schedule, OverlappedPointToPointOnlyDelaysTheReceiver) {
  std::vector<StageTiming> st(2, timing(1, 2, 0.4));
  ScheduleSpec sp = spec(Schedule::k1F1B, 2, 1);
  Simulation blocking = sim_ok(sp, st);
  EXPECT_NEAR(blocking.makespan_s, 6.8, 1e-12);
  sp.overlap_p2p = true;
  Simulation overlapped = sim_ok(sp, st);
  EXPECT_NEAR(overlapped.makespan_s, 6.6, 1e-12);
  EXPECT_NEAR(overlapped.busy_s[0], 3, 1e-12);
  EXPECT_NEAR(overlapped.busy_s[1], 3, 1e-12);
  // Without transfers the flag changes nothing; the interleaved schedule turns it on.
  std::vector<StageTiming> none(4, timing(1, 2));
  ScheduleSpec il = spec(Schedule::kInterleaved, 2, 4, 2);
  const double a = sim_ok(il, none).makespan_s;
  il.overlap_p2p = true;
  EXPECT_DOUBLE_EQ(sim_ok(il, none).makespan_s, a);
  TrainSettings t;
  t.pp = 2;
  t.vp = 2;
  t.micro_batches = 4;
  t.schedule = Schedule::kInterleaved;
  EXPECT_TRUE(schedule_spec(t, 4, AnalyticCostModel()).overlap_p2p);
  t.vp = 1;
  t.schedule = Schedule::k1F1B;
  EXPECT_FALSE(schedule_spec(t, 2, AnalyticCostModel()).overlap_p2p);
}

// pp=1, m=2, f=1 b=2, grad sync 3, optimizer 0.5: F0[0,1] B0[1,3] F1[3,4] B1[4,6].
// Overlapped: the sync starts with the last backward (4) and ends at 7; the update runs [7, 7.5].
// Not overlapped: sync [6, 9], update [9, 9.5].
TEST(Schedule, GradSyncOverlapsTheLastBackward) {
  std::vector<StageTiming> st{timing(1, 2, 0, 3, 0.5)};
  Simulation ov = sim_ok(spec(Schedule::k1F1B, 1, 2, 1, true), st);
  EXPECT_DOUBLE_EQ(ov.makespan_s, 7.5);
  Simulation no = sim_ok(spec(Schedule::k1F1B, 1, 2, 1, false), st);
  EXPECT_DOUBLE_EQ(no.makespan_s, 9.5);
  bool saw_sync = false;
  for (const auto& e : ov.events)
    if (e.kind == EventKind::kGradSync) {
      saw_sync = true;
      EXPECT_DOUBLE_EQ(e.start_s, 4);
      EXPECT_DOUBLE_EQ(e.end_s, 7);
    }
  EXPECT_TRUE(saw_sync);
  // A sync shorter than the backward is hidden: only the update is added.
  Simulation hidden = sim_ok(spec(Schedule::k1F1B, 1, 2), {timing(1, 2, 0, 1.5, 0.5)});
  EXPECT_DOUBLE_EQ(hidden.makespan_s, 6.5);
}

// The backward that hides a sync runs slower by the overlap coefficient k: with k = 1.5 the sync
// above hides 2 s of backward ([4, 6]) and delays the update by 0.5 * 2 = 1 s: [8, 8.5]. The
// analytic model's tail gives the same: finish 6 + (k - 1) min(b, G) + max(0, G - b) + update
//   = 6 + 1 + 1 + 0.5.
TEST(Schedule, OverlapSlowdownDelaysTheUpdate) {
  ScheduleSpec sp = spec(Schedule::k1F1B, 1, 2);
  sp.overlap_slowdown = 1.5;
  Simulation s = sim_ok(sp, {timing(1, 2, 0, 3, 0.5)});
  EXPECT_DOUBLE_EQ(s.makespan_s, 8.5);
  sp.overlap_slowdown = 0.9;
  EXPECT_FALSE(simulate_schedule(sp, {timing(1, 2)}).ok());
}

TEST(Schedule, RecomputeIsDrawnBeforeTheBackward) {
  Simulation s = sim_ok(spec(Schedule::k1F1B, 1, 1), {timing(1, 3, 0, 0, 0, 1)});
  ASSERT_EQ(s.events.size(), 3u);
  EXPECT_EQ(s.events[1].kind, EventKind::kRecompute);
  EXPECT_DOUBLE_EQ(s.events[1].start_s, 1);
  EXPECT_DOUBLE_EQ(s.events[1].end_s, 2);
  EXPECT_EQ(s.events[2].kind, EventKind::kBackward);
  EXPECT_DOUBLE_EQ(s.events[2].end_s, 4);
  EXPECT_DOUBLE_EQ(s.makespan_s, 4);
}

// Interleaving divides the bubble by v (Narayanan et al. 2021, eq. for t_pb^int):
// step = m (F + B) + (p - 1)(F + B) / v with F, B the per-device totals over its v chunks.
TEST(Schedule, InterleavedDividesTheBubbleByV) {
  const int pp = 4, vp = 2, m = 8;
  std::vector<StageTiming> st(pp * vp, timing(0.5, 1.0));
  Simulation s = sim_ok(spec(Schedule::kInterleaved, pp, m, vp), st);
  const double F = vp * 0.5, B = vp * 1.0;
  EXPECT_NEAR(s.makespan_s, m * (F + B) + (pp - 1) * (F + B) / vp, 1e-9);
  // The same devices without interleaving: (m + p - 1)(F + B).
  std::vector<StageTiming> plain(pp, timing(F, B));
  EXPECT_NEAR(sim_ok(spec(Schedule::k1F1B, pp, m), plain).makespan_s, (m + pp - 1) * (F + B), 1e-9);
}

// Random unequal stages, every schedule: each (stage, micro-batch) runs one forward and one
// backward, dependencies hold, a device never runs two things at once, and the makespan is at
// least the busiest device and at least one micro-batch's path through all stages.
TEST(Schedule, RandomStagesRespectDependencies) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> U(0.2, 3.0);
  struct Case {
    Schedule s;
    int pp, vp, m;
  };
  for (const Case c : {Case{Schedule::kGpipe, 3, 1, 5}, Case{Schedule::k1F1B, 4, 1, 7}, Case{Schedule::k1F1B, 4, 1, 2},
                       Case{Schedule::kInterleaved, 2, 2, 2}, Case{Schedule::kInterleaved, 4, 3, 8},
                       Case{Schedule::kInterleaved, 3, 2, 9}}) {
    for (int trial = 0; trial < 5; ++trial) {
      std::vector<StageTiming> st;
      for (int s = 0; s < c.pp * c.vp; ++s) st.push_back(timing(U(rng), U(rng), U(rng) / 4, U(rng), U(rng) / 5));
      Simulation sim = sim_ok(spec(c.s, c.pp, c.m, c.vp), st);
      std::map<std::tuple<EventKind, int, int>, ScheduleEvent> ends;  // the op's last block (its send)
      std::map<std::tuple<EventKind, int, int>, int> count;
      std::vector<double> device_end(c.pp, 0);
      std::vector<const ScheduleEvent*> last_on(c.pp, nullptr);
      for (const auto& e : sim.events) {
        if (e.kind == EventKind::kGradSync) continue;
        if (last_on[e.device_group]) {
          EXPECT_GE(e.start_s + 1e-12, last_on[e.device_group]->end_s);
        }
        last_on[e.device_group] = &e;
        EXPECT_EQ(e.device_group, e.stage % c.pp);
        if (e.kind == EventKind::kForward || e.kind == EventKind::kBackward) ++count[{e.kind, e.stage, e.micro_batch}];
      }
      const int n = c.pp * c.vp;
      for (int s = 0; s < n; ++s)
        for (int j = 0; j < c.m; ++j) {
          EXPECT_EQ((count[{EventKind::kForward, s, j}]), 1);
          EXPECT_EQ((count[{EventKind::kBackward, s, j}]), 1);
        }
      // Dependencies: F(s,j) starts after F(s-1,j) and its send; B(s,j) after B(s+1,j) and its send.
      auto op_end = [&](bool fwd, int s, int j) {
        double end = 0;
        for (const auto& e : sim.events)
          if (e.stage == s && e.micro_batch == j &&
              (fwd ? e.kind == EventKind::kForward
                   : e.kind == EventKind::kBackward || e.kind == EventKind::kRecompute))
            end = std::max(end, e.end_s);
        return end + st[s].p2p.value() / 2;
      };
      auto op_start = [&](EventKind k, int s, int j) {
        for (const auto& e : sim.events)
          if (e.kind == k && e.stage == s && e.micro_batch == j) return e.start_s;
        return -1.0;
      };
      double path = 0;
      for (int s = 0; s < n; ++s) path += (st[s].fwd + st[s].bwd + st[s].p2p).value();
      for (int j = 0; j < c.m; ++j)
        for (int s = 0; s < n; ++s) {
          if (s > 0) {
            EXPECT_GE(op_start(EventKind::kForward, s, j) + 1e-9, op_end(true, s - 1, j));
          }
          if (s + 1 < n) {
            const EventKind first = st[s].recompute.value() > 0 ? EventKind::kRecompute : EventKind::kBackward;
            EXPECT_GE(op_start(first, s, j) + 1e-9, op_end(false, s + 1, j));
          }
        }
      for (int g = 0; g < c.pp; ++g) EXPECT_GE(sim.makespan_s + 1e-9, sim.busy_s[g]);
      EXPECT_GE(sim.makespan_s + 1e-9, path);
    }
  }
}

// Random stages, GPipe and 1F1B against closed forms (F, B include the stage's send, p2p / 2):
//  - GPipe is two flow lines of identical jobs: sum (F + B) + (m - 1)(max F + max B);
//  - 1F1B never takes longer than GPipe, and at least the busiest stage's m (F + B);
//  - when the last stage has the largest F and the largest B, both equal the bottleneck formula
//    (m - 1) max (F + B) + sum (F + B) that the analytic cost model uses.
TEST(Schedule, RandomStagesAgainstClosedForms) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> U(0.1, 3.0);
  int last_max_cases = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int pp = 2 + static_cast<int>(rng() % 6), m = 1 + static_cast<int>(rng() % 12);
    std::vector<StageTiming> st;
    for (int s = 0; s < pp; ++s) st.push_back(timing(U(rng), U(rng), U(rng) / 5));
    if (trial % 2) {  // half the trials: move the largest forward and backward to the last stage
      auto at = [&](auto key) {
        int best = 0;
        for (int s = 1; s < pp; ++s)
          if (key(st[s]) > key(st[best])) best = s;
        return best;
      };
      std::swap(st[at([](const StageTiming& t) { return t.fwd.value(); })].fwd, st[pp - 1].fwd);
      std::swap(st[at([](const StageTiming& t) { return t.bwd.value(); })].bwd, st[pp - 1].bwd);
    }
    const testing::StageTotals totals = testing::stage_totals(st);
    const Simulation g = sim_ok(spec(Schedule::kGpipe, pp, m), st);
    const Simulation f = sim_ok(spec(Schedule::k1F1B, pp, m), st);
    EXPECT_NEAR(g.makespan_s, totals.gpipe(m), 1e-9);
    EXPECT_LE(f.makespan_s, g.makespan_s + 1e-9);
    EXPECT_GE(f.makespan_s + 1e-9, m * totals.max_stage);
    const StageTiming& l = st[pp - 1];
    if ((l.fwd + l.p2p * 0.5).value() >= totals.max_fwd && (l.bwd + l.p2p * 0.5).value() >= totals.max_bwd) {
      ++last_max_cases;
      EXPECT_NEAR(f.makespan_s, totals.bottleneck(m), 1e-9) << "trial " << trial;
      EXPECT_NEAR(g.makespan_s, totals.bottleneck(m), 1e-9) << "trial " << trial;
    }
  }
  EXPECT_GT(last_max_cases, 300);
}

TEST(Schedule, RejectsBadInput) {
  auto r = simulate_schedule(spec(Schedule::k1F1B, 2, 4), {timing(1, 2)});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("stages: 1 stage timings but pp*vp = 2"), std::string::npos) << r.error().message;
  auto r2 = simulate_schedule(spec(Schedule::k1F1B, 1, 0), {timing(1, 2)});
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.error().message.find("micro_batches: must be >= 1, got 0"), std::string::npos);
  auto r3 = simulate_schedule(spec(Schedule::k1F1B, 1, 1), {timing(1, 2, 0, 0, 0, 3)});
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.error().message.find("stages[0].recompute"), std::string::npos);
  auto r4 = simulate_schedule(spec(Schedule::k1F1B, 2, 2, 2), std::vector<StageTiming>(4, timing(1, 2)));
  ASSERT_FALSE(r4.ok());
  EXPECT_NE(r4.error().message.find("interleaved"), std::string::npos);
  auto r5 = simulate_schedule(spec(Schedule::k1F1B, 1, 1), {timing(-1, 2)});
  ASSERT_FALSE(r5.ok());
  EXPECT_NE(r5.error().message.find("stages[0].fwd: negative duration"), std::string::npos);
}

// --- ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR'24) --------------------------------

StageTiming zb_timing(double f, double b, double w, double rc = 0) {
  StageTiming t = timing(f, b + w, 0, 0, 0, rc);  // bwd = B + W
  t.wgrad = sec(w);
  return t;
}

// The op sequence of each device group: "F0 F1 B0 W0 ...", from the recorded events.
std::vector<std::string> ops_by_group(const Simulation& sim) {
  std::vector<std::string> out(sim.spec.pp);
  for (const auto& e : sim.events) {
    const char* k = e.kind == EventKind::kForward ? "F" : e.kind == EventKind::kBackward ? "B"
                    : e.kind == EventKind::kWeightGrad ? "W" : nullptr;
    if (!k) continue;
    std::string& o = out[e.device_group];
    o += (o.empty() ? "" : " ") + std::string(k) + std::to_string(e.micro_batch);
  }
  return out;
}

// Equal stages, T_F = T_B = T_W = 1, no p2p, sync or optimizer: 1F1B takes (m + p - 1) * 3, ZB-H1
// 3m + (p - 1)(T_F + T_B - T_W) = 3m + p - 1 (the paper's table 1 bubble). The order of
// schedule.cc meets the closed form exactly for every m >= p checked, e.g. p = 4, m = 8: 35 -> 27
// (1F1B 33). With T_B = 2, T_W = 0.5: m * 3.5 + (p - 1) * 2.5.
TEST(ScheduleZbH1, EqualStagesMatchClosedForm) {
  for (int p : {2, 4, 8})
    for (int m : {p, 2 * p, 3 * p}) {
      const std::vector<StageTiming> st(p, zb_timing(1, 1, 1));
      EXPECT_DOUBLE_EQ(sim_ok(spec(Schedule::k1F1B, p, m), st).makespan_s, (m + p - 1) * 3.0) << p << " " << m;
      EXPECT_DOUBLE_EQ(sim_ok(spec(Schedule::kZbH1, p, m), st).makespan_s, 3.0 * m + (p - 1)) << p << " " << m;
      const std::vector<StageTiming> uneven(p, zb_timing(1, 2, 0.5));
      EXPECT_DOUBLE_EQ(sim_ok(spec(Schedule::kZbH1, p, m), uneven).makespan_s, 3.5 * m + 2.5 * (p - 1))
          << p << " " << m;
    }
  // Spot values of the same: p = 4, m = 8 and p = 8, m = 8.
  EXPECT_DOUBLE_EQ(sim_ok(spec(Schedule::kZbH1, 4, 8), std::vector<StageTiming>(4, zb_timing(1, 1, 1))).makespan_s, 27);
  EXPECT_DOUBLE_EQ(sim_ok(spec(Schedule::kZbH1, 8, 8), std::vector<StageTiming>(8, zb_timing(1, 1, 1))).makespan_s, 31);
}

// The order of each device group for p = 4, m = 8: group g warms up with 3 - g forwards, and its W
// passes lag their B by g micro-batches (none on group 0), the lagging ones run at the end.
TEST(ScheduleZbH1, OrderPerDeviceGroup) {
  const Simulation sim = sim_ok(spec(Schedule::kZbH1, 4, 8), std::vector<StageTiming>(4, zb_timing(1, 1, 1)));
  EXPECT_EQ(ops_by_group(sim),
            (std::vector<std::string>{
                "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7",
                "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7",
                "F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 B7 W5 W6 W7",
                "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7"}));
  // 1F1B's order is the same without the W.
  const Simulation one = sim_ok(spec(Schedule::k1F1B, 4, 8), std::vector<StageTiming>(4, zb_timing(1, 1, 1)));
  EXPECT_EQ(ops_by_group(one)[3], "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
}

// B is bwd - wgrad after the recompute, and sends the gradient; W sends nothing. pp = 2, m = 1,
// f 1, bwd 3 (recompute 0.5, B 1.5, W 1), p2p 1 per stage (0.5 per send):
//   dev1: F0[1.5,2.5] send[2.5,3] R0[3,3.5] B0[3.5,5] send[5,5.5] W0[5.5,6.5]
//   dev0: F0[0,1] send[1,1.5]  R0[5.5,6] B0[6,7.5] send[7.5,8] W0[8,9]
TEST(ScheduleZbH1, BackwardSplitAndSends) {
  std::vector<StageTiming> st(2, zb_timing(1, 2, 1, 0.5));
  for (auto& t : st) t.p2p = sec(1);
  const Simulation sim = sim_ok(spec(Schedule::kZbH1, 2, 1), st);
  using Row = std::tuple<EventKind, int, double, double>;  // kind, device group, start, end
  std::vector<Row> rows;
  for (const auto& e : sim.events) rows.emplace_back(e.kind, e.device_group, e.start_s, e.end_s);
  const auto F = EventKind::kForward, B = EventKind::kBackward, R = EventKind::kRecompute,
             W = EventKind::kWeightGrad, P = EventKind::kP2p;
  EXPECT_EQ(rows, (std::vector<Row>{{F, 0, 0, 1}, {P, 0, 1, 1.5}, {R, 0, 5.5, 6}, {B, 0, 6, 7.5}, {P, 0, 7.5, 8},
                                    {W, 0, 8, 9}, {F, 1, 1.5, 2.5}, {P, 1, 2.5, 3}, {R, 1, 3, 3.5}, {B, 1, 3.5, 5},
                                    {P, 1, 5, 5.5}, {W, 1, 5.5, 6.5}}));
  EXPECT_DOUBLE_EQ(sim.makespan_s, 9);
  EXPECT_EQ(std::string(to_string(EventKind::kWeightGrad)), "weight grad");
  // m = 4: 1F1B takes (m + p - 1)(F + bwd + p2p) = 5 * 5 = 25; ZB-H1 m (F + bwd + p2p) +
  // (p - 1)(T_F + T_B - T_W) with the sends in T_F and T_B: 20 + (1.5 + 2.5 - 1) = 23.
  EXPECT_DOUBLE_EQ(sim_ok(spec(Schedule::k1F1B, 2, 4), st).makespan_s, 25);
  EXPECT_DOUBLE_EQ(sim_ok(spec(Schedule::kZbH1, 2, 4), st).makespan_s, 23);
}

// The overlapped gradient sync starts with the stage's last W (its gradients are final then), not
// its last B. pp = 1, m = 2, f 1, B 1, W 1, sync 3, update 0.5: F0[0,1] B0[1,2] W0[2,3] F1[3,4]
// B1[4,5] W1[5,6]; sync [5, 8], update [8, 8.5]. 1F1B runs B whole: B1[4,6], sync [4,7], update 7.5.
TEST(ScheduleZbH1, GradSyncStartsAtTheLastW) {
  StageTiming t = zb_timing(1, 1, 1);
  t.grad_sync = sec(3);
  t.optimizer = sec(0.5);
  const Simulation zb = sim_ok(spec(Schedule::kZbH1, 1, 2), {t});
  const Simulation one = sim_ok(spec(Schedule::k1F1B, 1, 2), {t});
  EXPECT_DOUBLE_EQ(zb.makespan_s, 8.5);
  EXPECT_DOUBLE_EQ(one.makespan_s, 7.5);
  int syncs = 0;
  for (const auto& e : zb.events)
    if (e.kind == EventKind::kGradSync) {
      ++syncs;
      EXPECT_DOUBLE_EQ(e.start_s, 5);
      EXPECT_DOUBLE_EQ(e.end_s, 8);
    }
  EXPECT_EQ(syncs, 1);
}

// Other schedules ignore wgrad: the same events with and without it.
TEST(ScheduleZbH1, OtherSchedulesIgnoreWgrad) {
  std::vector<StageTiming> with(4, zb_timing(1, 1, 1, 0.25)), without(4, timing(1, 2, 0, 0, 0, 0.25));
  for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B}) {
    const Simulation a = sim_ok(spec(s, 4, 8), with), b = sim_ok(spec(s, 4, 8), without);
    ASSERT_EQ(a.events.size(), b.events.size()) << to_string(s);
    for (size_t i = 0; i < a.events.size(); ++i) {
      EXPECT_EQ(a.events[i].kind, b.events[i].kind);
      EXPECT_EQ(a.events[i].start_s, b.events[i].start_s);
      EXPECT_EQ(a.events[i].end_s, b.events[i].end_s);
    }
  }
}

// Random unequal stages: every W runs once, on its stage's device after its own B, and the step
// is at least the busiest device's work.
TEST(ScheduleZbH1, RandomStagesRunEachWAfterItsB) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> U(0.2, 3.0);
  for (int trial = 0; trial < 20; ++trial) {
    const int pp = 2 + trial % 5, m = 1 + trial % 9;
    std::vector<StageTiming> st;
    for (int s = 0; s < pp; ++s) st.push_back(zb_timing(U(rng), U(rng), U(rng), 0.1));  // B >= 0.1 past the recompute
    const Simulation sim = sim_ok(spec(Schedule::kZbH1, pp, m), st);
    std::map<std::pair<int, int>, double> b_end;
    std::map<std::pair<int, int>, int> w_count;
    for (const auto& e : sim.events) {
      if (e.kind == EventKind::kBackward) b_end[{e.stage, e.micro_batch}] = e.end_s;
      if (e.kind == EventKind::kWeightGrad) {
        const std::pair<int, int> key{e.stage, e.micro_batch};
        ++w_count[key];
        ASSERT_TRUE(b_end.count(key)) << "W before its B";
        EXPECT_GE(e.start_s + 1e-12, b_end[key]);
        EXPECT_NEAR(e.duration(), st[e.stage].wgrad.value(), 1e-12);
      }
    }
    EXPECT_EQ(w_count.size(), static_cast<size_t>(pp * m));
    for (const auto& [k, n] : w_count) EXPECT_EQ(n, 1);
    for (int g = 0; g < pp; ++g) {
      EXPECT_NEAR(sim.busy_s[g], m * (st[g].fwd + st[g].bwd).value(), 1e-9);
      EXPECT_GE(sim.makespan_s + 1e-9, sim.busy_s[g]);
    }
  }
}

// ZB-V (Qi et al., ICLR'24, section 6), torch.distributed.pipelining's ScheduleZBVZeroBubble order:
// pp 4, m 8, 8 virtual stages of equal chunks, F = B = W = 1 per chunk and micro-batch, no p2p,
// sync or update. By hand: micro-batch 0's forward walks down the V, virtual stage s at [s, s + 1]
// on group min(s, 7 - s), so group g starts its first forward at g. From there each group runs
// without a gap (its order keeps 2 pp - 1 - g forwards of chunk 0 ahead, then alternates a forward
// with the B and W of the chunk-micro-batch whose gradient has just come back; with equal passes
// every input is ready when its turn comes), so it is busy for 2 chunks x 8 micro-batches x 3 = 48
// and ends at g + 48: groups 0-3 end at 48, 49, 50, 51, the step is 51 = 6m + pp - 1, and each
// group's only bubble is the g before its first forward. Against the same work as 4 whole stages of
// F = B = W = 2: 1F1B (m + p - 1) x 6 = 66, ZB-H1 6m + (p - 1)(2 + 2 - 2) = 54. The paper's "zero
// bubble when T_F = T_B = T_W" is this: nothing idles between a group's first and last pass.
TEST(ScheduleZbV, EqualChunksRunWithoutGaps) {
  const Simulation sim = sim_ok(spec(Schedule::kZbV, 4, 8, 2), std::vector<StageTiming>(8, zb_timing(1, 1, 1)));
  EXPECT_DOUBLE_EQ(sim.makespan_s, 51);
  EXPECT_EQ(sim.compute_end_s, (std::vector<double>{48, 49, 50, 51}));
  EXPECT_EQ(sim.busy_s, (std::vector<double>{48, 48, 48, 48}));
  EXPECT_EQ(sim.bubble_s, (std::vector<double>{0, 1, 2, 3}));
  const std::vector<StageTiming> whole(4, zb_timing(2, 2, 2));
  EXPECT_DOUBLE_EQ(sim_ok(spec(Schedule::k1F1B, 4, 8), whole).makespan_s, 66);
  EXPECT_DOUBLE_EQ(sim_ok(spec(Schedule::kZbH1, 4, 8), whole).makespan_s, 54);
  // The same 6m + pp - 1 wherever the warm-up fills (m >= 2 pp - 1); below it the last group waits:
  // pp 4, m 4 takes 30 = 6m + 2 (pp - 1).
  for (int p : {2, 3, 4, 6, 8})
    for (int m : {2 * p - 1, 2 * p, 3 * p, 4 * p}) {
      const std::vector<StageTiming> st(2 * p, zb_timing(1, 1, 1));
      EXPECT_DOUBLE_EQ(sim_ok(spec(Schedule::kZbV, p, m, 2), st).makespan_s, 6.0 * m + p - 1) << p << " " << m;
    }
  EXPECT_DOUBLE_EQ(sim_ok(spec(Schedule::kZbV, 4, 4, 2), std::vector<StageTiming>(8, zb_timing(1, 1, 1))).makespan_s,
                   30);
}

// The V and the local turn. pp 2, m 1, F = B = W = 1, p2p 1 per stage (0.5 a send), sends
// overlapped (as schedule_spec sets for zb-v): group 1 holds virtual stages 1 and 2, and its
// forward of stage 1 hands to stage 2 on the same devices, sending nothing:
//   dev0: F(0)[0,1] (sent 1.5)  F(3)[4,5] (5.5)  B(3)[5.5,6.5] (7)  W(3)[6.5,7.5]  B(0)[10.5,11.5]  W(0)[11.5,12.5]
//   dev1: F(1)[1.5,2.5]  F(2)[2.5,3.5] (sent 4)  B(2)[7,8]  W(2)[8,9]  B(1)[9,10] (sent 10.5)  W(1)[10,11]
TEST(ScheduleZbV, TheTurnIsLocal) {
  std::vector<StageTiming> st(4, zb_timing(1, 1, 1));
  for (auto& t : st) t.p2p = sec(1);
  ScheduleSpec sp = spec(Schedule::kZbV, 2, 1, 2);
  sp.overlap_p2p = true;
  const Simulation sim = sim_ok(sp, st);
  using Row = std::tuple<EventKind, int, double, double>;  // kind, virtual stage, start, end
  std::vector<Row> dev1;
  for (const auto& e : sim.events)
    if (e.device_group == 1) dev1.emplace_back(e.kind, e.stage, e.start_s, e.end_s);
  const auto F = EventKind::kForward, B = EventKind::kBackward, W = EventKind::kWeightGrad, P = EventKind::kP2p;
  EXPECT_EQ(dev1, (std::vector<Row>{{F, 1, 1.5, 2.5}, {F, 2, 2.5, 3.5}, {P, 2, 3.5, 4}, {B, 2, 7, 8}, {W, 2, 8, 9},
                                    {B, 1, 9, 10}, {P, 1, 10, 10.5}, {W, 1, 10, 11}}));
  EXPECT_DOUBLE_EQ(sim.makespan_s, 12.5);
  EXPECT_EQ(sim.compute_end_s, (std::vector<double>{12.5, 11}));
}

// zb-v needs its two chunks per device group: vp 1 or 3 is refused naming the field.
TEST(ScheduleZbV, RejectsOtherChunkCounts) {
  for (int vp : {1, 3}) {
    auto r = simulate_schedule(spec(Schedule::kZbV, 2, 4, vp), std::vector<StageTiming>(2 * vp, zb_timing(1, 1, 1)));
    ASSERT_FALSE(r.ok()) << vp;
    EXPECT_NE(r.error().message.find("schedule.vp: zb-v runs exactly 2 model chunks per device group, got " +
                                     std::to_string(vp)),
              std::string::npos)
        << r.error().message;
  }
}

TEST(ScheduleZbH1, RejectsWgradBeyondTheBackward) {
  auto r = simulate_schedule(spec(Schedule::kZbH1, 1, 1), {zb_timing(1, 0.5, 2, 0.5)});
  ASSERT_TRUE(r.ok());  // bwd 2.5 = recompute 0.5 + 2 W: B is empty but valid
  StageTiming t = timing(1, 2, 0, 0, 0, 0.5);
  t.wgrad = sec(1.75);
  auto bad = simulate_schedule(spec(Schedule::kZbH1, 1, 1), {t});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("stages[0].wgrad: 1.750000 s exceeds the backward less its recompute (2.000000 - "
                                     "0.500000 s)"),
            std::string::npos)
      << bad.error().message;
  t.wgrad = sec(-1);
  auto neg = simulate_schedule(spec(Schedule::kZbH1, 1, 1), {t});
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.error().message.find("stages[0].wgrad: negative duration"), std::string::npos);
}

}  // namespace
}  // namespace weft
