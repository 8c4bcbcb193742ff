// Spindle's allocator: the curve, the levels, the continuous bound (exact on perfect scaling), the
// waves held against every rule of the header on a few workloads, the baselines by hand, bad input.
#include "weft/multitask/allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

namespace weft::multitask {
namespace {

const std::vector<int> kPow2{1, 2, 4, 8, 16, 32};

// t(n) = a + b / n on the given counts.
Curve amdahl(double a, double b, const std::vector<int>& counts = kPow2) {
  Curve c;
  for (int n : counts) {
    c.n.push_back(n);
    c.t.push_back(a + b / n);
  }
  return c;
}

// t(n) = w / n on every count 1..max_n.
Curve perfect(double w, int max_n) {
  Curve c;
  for (int n = 1; n <= max_n; ++n) {
    c.n.push_back(n);
    c.t.push_back(w / n);
  }
  return c;
}

Op op(const std::string& name, int layers, Curve c, std::vector<int> deps = {}) {
  Op o;
  o.name = name;
  o.layers = layers;
  o.curve = std::move(c);
  o.deps = std::move(deps);
  return o;
}

// `k` independent operators of unequal work, 6 to 18 layers, whose serial parts (a) and parallel
// parts (b) differ: the tasks Spindle packs side by side, which do not scale alike to N GPUs.
std::vector<Op> unequal_ops(int k) {
  std::vector<Op> ops;
  for (int m = 0; m < k; ++m)
    ops.push_back(op("op" + std::to_string(m), 6 + (5 * m) % 13, amdahl(0.05 * (1 + m % 4), 0.5 + 0.7 * m)));
  return ops;
}

// Two levels: three encoders, then three operators each fed by some of them.
std::vector<Op> two_level_ops() {
  std::vector<Op> ops = unequal_ops(3);
  ops.push_back(op("fuse_a", 8, amdahl(0.1, 2.0), {0}));
  ops.push_back(op("fuse_b", 12, amdahl(0.05, 5.0), {0, 1}));
  ops.push_back(op("fuse_c", 6, amdahl(0.2, 1.0), {2}));
  return ops;
}

bool is_valid_count(const Curve& c, int n) {
  for (int v : c.n)
    if (v == n) return true;
  return false;
}

// Every rule the header and Spindle §3 set on a plan.
void check_plan(const std::vector<Op>& ops, int gpus, const Allocation& a) {
  SCOPED_TRACE("N = " + std::to_string(gpus) + ", " + std::to_string(ops.size()) + " operators");
  const size_t m = ops.size();
  std::vector<int> layers(m, 0), last_wave(m, -1);
  std::vector<double> end_s(m, 0);
  int total_layers = 0;
  for (const Op& o : ops) total_layers += o.layers;
  double clock = 0, sum_times = 0;
  for (size_t w = 0; w < a.waves.size(); ++w) {
    const Wave& wave = a.waves[w];
    EXPECT_NEAR(wave.start_s, clock, 1e-9 * (1 + clock)) << "wave " << w << " starts when the previous ends";
    int used = 0;
    double longest = 0;
    ASSERT_FALSE(wave.pieces.empty()) << "wave " << w;
    for (const Piece& p : wave.pieces) {
      ASSERT_GE(p.op, 0);
      ASSERT_LT(static_cast<size_t>(p.op), m);
      const Op& o = ops[static_cast<size_t>(p.op)];
      used += p.gpus;
      EXPECT_TRUE(is_valid_count(o.curve, p.gpus)) << o.name << " on " << p.gpus;
      EXPECT_LE(p.gpus, gpus) << o.name;
      EXPECT_GE(p.layers, 1) << o.name;
      EXPECT_NEAR(p.time_s, p.layers * o.curve.at(p.gpus), 1e-12 * p.time_s) << o.name;
      longest = std::max(longest, p.time_s);
      // One piece per operator per wave, in strictly increasing waves.
      EXPECT_LT(last_wave[static_cast<size_t>(p.op)], static_cast<int>(w)) << o.name << " in wave " << w;
      last_wave[static_cast<size_t>(p.op)] = static_cast<int>(w);
      layers[static_cast<size_t>(p.op)] += p.layers;
      end_s[static_cast<size_t>(p.op)] = wave.start_s + wave.time_s;
      // Its dependencies' last pieces ended before this wave starts.
      for (int d : o.deps) {
        EXPECT_GE(last_wave[static_cast<size_t>(d)], 0) << o.name << " before its dependency " << d;
        EXPECT_GE(wave.start_s, end_s[static_cast<size_t>(d)] - 1e-9) << o.name << " before its dependency " << d;
      }
    }
    EXPECT_LE(used, gpus) << "wave " << w;
    EXPECT_DOUBLE_EQ(wave.time_s, longest) << "wave " << w;
    clock = wave.start_s + wave.time_s;
    sum_times += wave.time_s;
  }
  for (size_t i = 0; i < m; ++i) EXPECT_EQ(layers[i], ops[i].layers) << ops[i].name;
  EXPECT_NEAR(a.makespan_s, sum_times, 1e-9 * sum_times);
  EXPECT_LE(a.bound_s, a.makespan_s + 1e-9);
  EXPECT_LE(a.waves.size(), static_cast<size_t>(total_layers));
  double level_sum = 0;
  for (double b : a.level_bound_s) level_sum += b;
  EXPECT_DOUBLE_EQ(a.bound_s, level_sum);
}

bool same(const Allocation& x, const Allocation& y) {
  if (x.makespan_s != y.makespan_s || x.bound_s != y.bound_s || x.level_bound_s != y.level_bound_s ||
      x.waves.size() != y.waves.size())
    return false;
  for (size_t w = 0; w < x.waves.size(); ++w) {
    const Wave &a = x.waves[w], &b = y.waves[w];
    if (a.start_s != b.start_s || a.time_s != b.time_s || a.pieces.size() != b.pieces.size()) return false;
    for (size_t k = 0; k < a.pieces.size(); ++k) {
      const Piece &p = a.pieces[k], &q = b.pieces[k];
      if (p.op != q.op || p.gpus != q.gpus || p.layers != q.layers || p.time_s != q.time_s) return false;
    }
  }
  return true;
}

// Each operator alone on all N GPUs, one after another (tasks of one operator each).
double one_by_one(const std::vector<Op>& ops, int gpus) {
  std::vector<TaskOps> tasks;
  for (size_t i = 0; i < ops.size(); ++i) tasks.push_back({ops[i].name, {static_cast<int>(i)}});
  auto t = sequential_time(ops, tasks, gpus);
  EXPECT_TRUE(t.ok()) << t.error().message;
  return t.ok() ? *t : 0;
}

TEST(Allocator, CurveAtValidCountsBetweenBelowAndAbove) {
  Curve c;
  c.n = {2, 4, 8};
  c.t = {6, 4, 3};
  EXPECT_DOUBLE_EQ(c.at(2), 6);
  EXPECT_DOUBLE_EQ(c.at(4), 4);
  EXPECT_DOUBLE_EQ(c.at(8), 3);
  // Between 2 and 4 at 3: 6 + (4 - 6) (1/3 - 1/2) / (1/4 - 1/2) = 6 - 2 (2/3) = 14/3.
  EXPECT_NEAR(c.at(3), 14.0 / 3, 1e-12);
  // Between 4 and 8 at 6: 4 + (3 - 4) (1/6 - 1/4) / (1/8 - 1/4) = 4 - 2/3 = 10/3.
  EXPECT_NEAR(c.at(6), 10.0 / 3, 1e-12);
  // Below the first count: perfect scaling from 6 s on 2 GPUs.
  EXPECT_DOUBLE_EQ(c.at(1), 12);
  EXPECT_DOUBLE_EQ(c.at(0.5), 24);
  // Above the last: flat.
  EXPECT_DOUBLE_EQ(c.at(16), 3);
  EXPECT_DOUBLE_EQ(c.at(9.5), 3);
  // Linear in 1/n reproduces a + b / n exactly between its counts.
  const Curve am = amdahl(1, 8, {1, 2, 4, 8});
  EXPECT_NEAR(am.at(3), 1 + 8.0 / 3, 1e-12);
  EXPECT_NEAR(am.at(5.5), 1 + 8.0 / 5.5, 1e-12);
}

TEST(Allocator, LevelsOfASmallDag) {
  std::vector<Op> ops{op("a", 1, amdahl(0, 1)), op("b", 1, amdahl(0, 1)), op("c", 1, amdahl(0, 1), {0}),
                      op("d", 1, amdahl(0, 1), {1, 2}), op("e", 1, amdahl(0, 1), {0})};
  auto lv = levels(ops);
  ASSERT_TRUE(lv.ok()) << lv.error().message;
  const std::vector<std::vector<int>> want{{0, 1}, {2, 4}, {3}};
  EXPECT_EQ(*lv, want);
  EXPECT_TRUE(levels({}).ok());
  EXPECT_TRUE(levels({})->empty());
}

TEST(Allocator, CycleIsAnErrorNamingAnOperator) {
  // free -> x -> y -> z -> x: the cycle is x, y, z; "free" and "tail" are not on it.
  std::vector<Op> ops{op("free", 1, amdahl(0, 1)), op("x", 1, amdahl(0, 1), {0, 3}), op("y", 1, amdahl(0, 1), {1}),
                      op("z", 1, amdahl(0, 1), {2}), op("tail", 1, amdahl(0, 1), {3})};
  auto lv = levels(ops);
  ASSERT_FALSE(lv.ok());
  EXPECT_EQ(lv.error().kind, ErrorKind::kBadInput);
  const std::string& msg = lv.error().message;
  EXPECT_NE(msg.find("cycle"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'x'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'y'"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("'free'"), std::string::npos) << msg;
  Status s = check_ops(ops, 8);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("cycle"), std::string::npos);
  EXPECT_FALSE(allocate(ops, 8).ok());

  std::vector<Op> self{op("loop", 1, amdahl(0, 1), {0})};
  auto l2 = levels(self);
  ASSERT_FALSE(l2.ok());
  EXPECT_NE(l2.error().message.find("'loop'"), std::string::npos) << l2.error().message;
}

TEST(Allocator, DependencyOutOfRangeIsAnError) {
  std::vector<Op> ops{op("a", 1, amdahl(0, 1)), op("b", 1, amdahl(0, 1), {5}), op("c", 1, amdahl(0, 1))};
  auto lv = levels(ops);
  ASSERT_FALSE(lv.ok());
  const std::string& msg = lv.error().message;
  EXPECT_NE(msg.find("'b'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("3 operators"), std::string::npos) << msg;
  ops[1].deps = {-1};
  EXPECT_FALSE(levels(ops).ok());
  EXPECT_FALSE(check_ops(ops, 4).ok());
}

TEST(Allocator, ContinuousBoundIsExactOnPerfectScaling) {
  for (int n : {4, 8, 16, 32}) {
    SCOPED_TRACE("N = " + std::to_string(n));
    const std::vector<double> w{1, 2, 3, 6};
    const std::vector<int> L{2, 3, 1, 4};
    std::vector<Op> ops;
    double area = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      ops.push_back(op("p" + std::to_string(i), L[i], perfect(w[i], n)));
      area += w[i] * L[i];
    }
    auto b = continuous_bound(ops, {0, 1, 2, 3}, n);
    ASSERT_TRUE(b.ok()) << b.error().message;
    EXPECT_NEAR(b->c_s, area / n, 1e-6 * area / n);
    ASSERT_EQ(b->gpus.size(), 4u);
    double sum = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      sum += b->gpus[i];
      // Each runs exactly C: its share of the area.
      EXPECT_NEAR(b->gpus[i], n * w[i] * L[i] / area, 1e-6 * n);
    }
    EXPECT_NEAR(sum, n, 1e-6 * n);
  }
}

TEST(Allocator, ContinuousBoundFallsWithMoreGpusAndIsAtLeastTheSlowestOnN) {
  const std::vector<Op> ops = unequal_ops(7);
  const std::vector<int> all{0, 1, 2, 3, 4, 5, 6};
  double prev = 0;
  for (int n : {4, 8, 16, 32}) {
    SCOPED_TRACE("N = " + std::to_string(n));
    auto b = continuous_bound(ops, all, n);
    ASSERT_TRUE(b.ok()) << b.error().message;
    if (n > 4) {
      EXPECT_LE(b->c_s, prev * (1 + 1e-12));
    }
    prev = b->c_s;
    double sum = 0, area_lo = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      const Op& o = ops[i];
      EXPECT_GE(b->c_s, o.curve.at(n) * o.layers * (1 - 1e-12)) << o.name;
      sum += b->gpus[i];
      area_lo += o.curve.at(1) * o.layers;  // a + b: the least GPU-seconds per layer of a + b / n
    }
    EXPECT_LE(sum, n * (1 + 1e-9));
    // Nothing beats the least total work spread over all N GPUs.
    EXPECT_GE(b->c_s, area_lo / n * (1 - 1e-9));
  }
  // More operators than GPUs still have a bound (fractions of a GPU, perfect scaling below 1).
  auto crowded = continuous_bound(unequal_ops(10), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 4);
  ASSERT_TRUE(crowded.ok()) << crowded.error().message;
  double sum = 0;
  for (double g : crowded->gpus) sum += g;
  EXPECT_NEAR(sum, 4, 1e-6 * 4);
}

TEST(Allocator, WavesKeepEveryRuleOnIndependentWorkloads) {
  for (int k : {4, 7, 10})
    for (int n : {8, 16, 32}) {
      const std::vector<Op> ops = unequal_ops(k);
      auto a = allocate(ops, n);
      ASSERT_TRUE(a.ok()) << a.error().message;
      check_plan(ops, n, *a);
      ASSERT_EQ(a->level_bound_s.size(), 1u);
      // Better than each operator alone on all N GPUs, one after another (these operators do not
      // scale to N), by running them side by side.
      EXPECT_LT(a->makespan_s, one_by_one(ops, n)) << k << " ops on " << n;
      size_t widest = 0;
      for (const Wave& w : a->waves) widest = std::max(widest, w.pieces.size());
      EXPECT_GE(widest, 2u) << k << " ops on " << n;
      auto again = allocate(ops, n);
      ASSERT_TRUE(again.ok());
      EXPECT_TRUE(same(*a, *again)) << k << " ops on " << n;
      std::cout << "[ info ] " << k << " ops on " << n << " GPUs: makespan/bound " << a->makespan_s / a->bound_s
                << ", one-by-one/bound " << one_by_one(ops, n) / a->bound_s << ", " << a->waves.size()
                << " waves\n";
    }
}

TEST(Allocator, WavesKeepEveryRuleOnTwoLevels) {
  const std::vector<Op> ops = two_level_ops();
  for (int n : {8, 16, 32}) {
    auto a = allocate(ops, n);
    ASSERT_TRUE(a.ok()) << a.error().message;
    check_plan(ops, n, *a);
    ASSERT_EQ(a->level_bound_s.size(), 2u);
    // The second level's operators start only after the whole first level.
    double first_end = 0;
    for (const Wave& w : a->waves)
      for (const Piece& p : w.pieces)
        if (p.op < 3) first_end = std::max(first_end, w.start_s + w.time_s);
    for (const Wave& w : a->waves)
      for (const Piece& p : w.pieces)
        if (p.op >= 3) {
          EXPECT_GE(w.start_s, first_end - 1e-12) << ops[static_cast<size_t>(p.op)].name;
        }
    EXPECT_LE(a->makespan_s, one_by_one(ops, n) * (1 + 1e-12));
    auto again = allocate(ops, n);
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(same(*a, *again));
    ::testing::Test::RecordProperty("ratio_n" + std::to_string(n), std::to_string(a->makespan_s / a->bound_s));
    std::cout << "[ info ] two levels on " << n << " GPUs: makespan/bound " << a->makespan_s / a->bound_s << "\n";
  }
}

TEST(Allocator, EqualPerfectlyScalingOpsPackExactly) {
  // 4 operators of 8 layers, t(n) = 2 / n, on 16 GPUs: each on 4 GPUs for 8 x 0.5 = 4 s, one wave.
  std::vector<Op> ops;
  for (int i = 0; i < 4; ++i) ops.push_back(op("same" + std::to_string(i), 8, perfect(2, 16)));
  auto a = allocate(ops, 16);
  ASSERT_TRUE(a.ok()) << a.error().message;
  check_plan(ops, 16, *a);
  EXPECT_NEAR(a->bound_s, 4, 1e-9);
  EXPECT_LE(a->makespan_s / a->bound_s, 1.0 + 1e-9);
  EXPECT_DOUBLE_EQ(a->makespan_s, 4);
  ASSERT_EQ(a->waves.size(), 1u);
  ASSERT_EQ(a->waves[0].pieces.size(), 4u);
  for (const Piece& p : a->waves[0].pieces) {
    EXPECT_EQ(p.gpus, 4);
    EXPECT_EQ(p.layers, 8);
  }
  std::cout << "[ info ] equal perfect ops: makespan/bound " << a->makespan_s / a->bound_s << "\n";
}

TEST(Allocator, NeverWorseThanOneAfterAnotherOnPerfectScaling) {
  // Unequal operators that scale perfectly to 32 GPUs: one after another on 32 is optimal (it meets
  // the bound), and the plan must be as good, whatever whole layers cost the waves.
  std::vector<Op> ops{op("big", 48, perfect(0.066, 32)), op("mid", 32, perfect(0.05, 32)),
                      op("small", 7, perfect(0.3, 32)), op("tiny", 3, perfect(0.01, 32))};
  auto a = allocate(ops, 32);
  ASSERT_TRUE(a.ok()) << a.error().message;
  check_plan(ops, 32, *a);
  const double area = 0.066 * 48 + 0.05 * 32 + 0.3 * 7 + 0.01 * 3;
  EXPECT_NEAR(a->bound_s, area / 32, 1e-9);
  EXPECT_LE(a->makespan_s, a->bound_s * (1 + 1e-9));
  EXPECT_LE(a->makespan_s, one_by_one(ops, 32) * (1 + 1e-12));
}

// The packed plan run without barriers, as plan_tasks.h run_waves runs it on one level: each piece
// starts when its ranks are free and its operator's previous piece has ended. Also checks the
// ranks: fixed, inside N, disjoint within a wave.
double run_packed(const std::vector<Op>& ops, int gpus, const Allocation& a) {
  std::vector<double> free_at(static_cast<size_t>(gpus), 0.0), op_end(ops.size(), 0.0);
  for (size_t w = 0; w < a.waves.size(); ++w) {
    std::vector<int> owner(static_cast<size_t>(gpus), -1);
    for (const Piece& p : a.waves[w].pieces) {
      EXPECT_GE(p.first_rank, 0) << "wave " << w << ": a packed piece has its ranks";
      EXPECT_LE(p.first_rank + p.gpus, gpus) << "wave " << w;
      if (p.first_rank < 0 || p.first_rank + p.gpus > gpus) return 0;
      double start = op_end[static_cast<size_t>(p.op)];
      for (int r = p.first_rank; r < p.first_rank + p.gpus; ++r) {
        EXPECT_EQ(owner[static_cast<size_t>(r)], -1) << "wave " << w << ": rank " << r << " twice";
        owner[static_cast<size_t>(r)] = p.op;
        start = std::max(start, free_at[static_cast<size_t>(r)]);
      }
      for (int r = p.first_rank; r < p.first_rank + p.gpus; ++r) free_at[static_cast<size_t>(r)] = start + p.time_s;
      op_end[static_cast<size_t>(p.op)] = start + p.time_s;
    }
  }
  return *std::max_element(free_at.begin(), free_at.end());
}

TEST(Allocator, PackedGroupsWrapAnOperatorAroundByHand) {
  // Three operators of 6 layers, one second a layer on one GPU (t(n) = 1 / n on 1 and 2), on 2
  // GPUs: the bound is 18 / 2 = 9 s. Packed within 9 s on two 1-GPU groups: a runs whole on rank 0
  // (0-6 s); b's last 3 layers end rank 0 (6-9 s) and its first 3 start rank 1 (0-3 s); c runs on
  // rank 1 (3-9 s). Both ranks end at the bound.
  const std::vector<Op> ops{op("a", 6, perfect(1, 2)), op("b", 6, perfect(1, 2)), op("c", 6, perfect(1, 2))};
  auto a = allocate(ops, 2, {}, AllocateMode::kPacked);
  ASSERT_TRUE(a.ok()) << a.error().message;
  check_plan(ops, 2, *a);
  EXPECT_NEAR(a->bound_s, 9, 1e-9);
  ASSERT_EQ(a->waves.size(), 2u);
  auto piece = [&](size_t w, size_t k) {
    const Piece& p = a->waves[w].pieces.at(k);
    return std::vector<int>{p.op, p.first_rank, p.gpus, p.layers};
  };
  ASSERT_EQ(a->waves[0].pieces.size(), 2u);
  ASSERT_EQ(a->waves[1].pieces.size(), 2u);
  EXPECT_EQ(piece(0, 0), (std::vector<int>{0, 0, 1, 6}));  // a on rank 0
  EXPECT_EQ(piece(0, 1), (std::vector<int>{1, 1, 1, 3}));  // b's first 3 layers on rank 1
  EXPECT_EQ(piece(1, 0), (std::vector<int>{1, 0, 1, 3}));  // b's last 3 on rank 0, after a
  EXPECT_EQ(piece(1, 1), (std::vector<int>{2, 1, 1, 6}));  // c on rank 1
  EXPECT_NEAR(run_packed(ops, 2, *a), 9, 1e-9);
  // Reversed: each rank's pieces in the other order, b's first 3 layers now opening rank 0.
  auto r = allocate(ops, 2, {}, AllocateMode::kPackedReversed);
  ASSERT_TRUE(r.ok()) << r.error().message;
  check_plan(ops, 2, *r);
  ASSERT_EQ(r->waves.size(), 2u);
  const std::vector<int> first_b{r->waves[0].pieces.at(0).op, r->waves[0].pieces.at(0).first_rank,
                                 r->waves[0].pieces.at(0).layers};
  EXPECT_EQ(first_b, (std::vector<int>{1, 0, 3}));
  EXPECT_NEAR(run_packed(ops, 2, *r), 9, 1e-9);
}

TEST(Allocator, PackedGroupsKeepEveryRuleAndRunNearTheBound) {
  for (AllocateMode mode : {AllocateMode::kPacked, AllocateMode::kPackedReversed})
    for (int k : {4, 7, 10})
      for (int n : {8, 16, 32}) {
        SCOPED_TRACE(std::to_string(k) + " ops on " + std::to_string(n) +
                     (mode == AllocateMode::kPacked ? "" : ", reversed"));
        const std::vector<Op> ops = unequal_ops(k);
        auto a = allocate(ops, n, {}, mode);
        ASSERT_TRUE(a.ok()) << a.error().message;
        check_plan(ops, n, *a);
        auto wave = allocate(ops, n, {}, AllocateMode::kWavefront);
        ASSERT_TRUE(wave.ok());
        const double packed = run_packed(ops, n, *a);
        // Whole layers and whole counts keep it above the bound; no barrier between waves keeps it
        // below the waves one after another.
        EXPECT_GE(packed, a->bound_s * (1 - 1e-9));
        EXPECT_LE(packed, a->makespan_s * (1 + 1e-9));
        EXPECT_LT(packed, wave->makespan_s);
        std::cout << "[ info ] " << k << " ops on " << n << " GPUs" << (mode == AllocateMode::kPacked ? "" : " reversed")
                  << ": packed run/bound " << packed / a->bound_s << ", wavefront waves/bound "
                  << wave->makespan_s / wave->bound_s << "\n";
      }
}

TEST(Allocator, DiscretisationSplitsLayersBetweenNeighbouringCounts) {
  // Two operators that need 3 GPUs each in the continuous bound (t = 3 / n on {1, 2, 4}, 6 GPUs):
  // C = 2 x 4 x 3 / 6 = 4 s at n = 3; T(2) = 1.5, T(4) = 0.75: 1.5 l_lo + 0.75 l_hi closest to 4 with
  // l_lo + l_hi = 4 is l_hi = (4 - 6) / (0.75 - 1.5) = 2.67 -> 3 (3.75 s; 2 gives 4.5 s).
  const Curve c = amdahl(0, 3, {1, 2, 4});
  std::vector<Op> ops{op("u", 4, c), op("v", 4, c)};
  auto b = continuous_bound(ops, {0, 1}, 6);
  ASSERT_TRUE(b.ok());
  EXPECT_NEAR(b->c_s, 4, 1e-9);
  EXPECT_NEAR(b->gpus[0], 3, 1e-6);
  auto a = allocate(ops, 6);
  ASSERT_TRUE(a.ok()) << a.error().message;
  check_plan(ops, 6, *a);
  for (size_t i = 0; i < ops.size(); ++i) {
    int on4 = 0, on2 = 0;
    for (const Wave& w : a->waves)
      for (const Piece& p : w.pieces)
        if (p.op == static_cast<int>(i)) (p.gpus == 4 ? on4 : on2) += p.layers;
    EXPECT_EQ(on4, 3) << ops[i].name;
    EXPECT_EQ(on2, 1) << ops[i].name;
  }
}

TEST(Allocator, NonMonotoneCurveTakesTheSmallestCountThatFits) {
  // 4 s on 1 GPU, 1 s on 2, 3 s on 4 (slower again): alone on 4 GPUs the bound is 1 s on 2 GPUs,
  // the least count whose time fits, and the plan runs it there.
  Curve c;
  c.n = {1, 2, 4};
  c.t = {4, 1, 3};
  std::vector<Op> ops{op("bumpy", 1, c)};
  auto b = continuous_bound(ops, {0}, 4);
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_NEAR(b->c_s, 1, 1e-12);
  EXPECT_NEAR(b->gpus[0], 2, 1e-9);
  auto a = allocate(ops, 4);
  ASSERT_TRUE(a.ok()) << a.error().message;
  check_plan(ops, 4, *a);
  ASSERT_EQ(a->waves.size(), 1u);
  EXPECT_EQ(a->waves[0].pieces[0].gpus, 2);
  EXPECT_DOUBLE_EQ(a->makespan_s, 1);
}

TEST(Allocator, AnOperatorAboveNIsAnError) {
  std::vector<Op> ops{op("big", 2, amdahl(0.1, 4, {16, 32}))};
  auto a = allocate(ops, 8);
  ASSERT_FALSE(a.ok());
  const std::string& msg = a.error().message;
  EXPECT_NE(msg.find("'big'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("8 GPUs"), std::string::npos) << msg;
}

// Three operators for the baselines.
//   op0: t{8, 5, 3} on {1, 2, 4}, 1 layer       (task A)
//   op1: t{6, 4, 3.5} on {2, 4, 8}, 1 layer     (task B)
//   op2: t{2, 1} on {1, 4}, 2 layers            (task A)
std::vector<Op> baseline_ops() {
  Curve c0, c1, c2;
  c0.n = {1, 2, 4};
  c0.t = {8, 5, 3};
  c1.n = {2, 4, 8};
  c1.t = {6, 4, 3.5};
  c2.n = {1, 4};
  c2.t = {2, 1};
  return {op("op0", 1, c0), op("op1", 1, c1), op("op2", 2, c2)};
}

const std::vector<TaskOps> kTasks{{"A", {0, 2}}, {"B", {1}}};

TEST(Baselines, SequentialTimeByHand) {
  // On 6 GPUs: A = op0 on 4 (3) + op2 on 4 (2 x 1) = 5; B = op1 on 4 (4); 9 in all.
  auto t = sequential_time(baseline_ops(), kTasks, 6);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_DOUBLE_EQ(*t, 9);
  // On 8 GPUs op1 takes 8 GPUs (3.5): 8.5.
  auto t8 = sequential_time(baseline_ops(), kTasks, 8);
  ASSERT_TRUE(t8.ok());
  EXPECT_DOUBLE_EQ(*t8, 8.5);
  // On 1 GPU op1 has no valid count.
  auto t1 = sequential_time(baseline_ops(), kTasks, 1);
  ASSERT_FALSE(t1.ok());
  EXPECT_NE(t1.error().message.find("'op1'"), std::string::npos) << t1.error().message;
}

TEST(Baselines, TaskGreedyTimeByHand) {
  // N = 6. A's candidates {1, 2, 4}: T_A(1) = 8 + 2 x 2 = 12, T_A(2) = 5 + 2 x 2 = 9 (op2 still on
  // 1), T_A(4) = 3 + 2 x 1 = 5. B's candidates {2, 4}: T_B(2) = 6, T_B(4) = 4.
  //   start: A on 1 (12), B on 2 (6), 3 GPUs.
  //   step 1: A -> 2 gains (12 - 9) / 1 = 3; B -> 4 gains (6 - 4) / 2 = 1: A on 2, 4 GPUs.
  //   step 2: A -> 4 gains (9 - 5) / 2 = 2 (6 GPUs); B -> 4 gains 1 (6 GPUs): A on 4, 6 GPUs.
  //   step 3: A has no next count; B -> 4 needs 8 > 6. Stop: max(5, 6) = 6.
  auto t = task_greedy_time(baseline_ops(), kTasks, 6);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_DOUBLE_EQ(*t, 6);
  // Where they ran: A on ranks 0-3, B on 4-5, side by side from 0.
  std::vector<TaskRun> runs;
  ASSERT_TRUE(task_greedy_time(baseline_ops(), kTasks, 6, &runs).ok());
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].first_rank, 0);
  EXPECT_EQ(runs[0].gpus, 4);
  EXPECT_DOUBLE_EQ(runs[0].time_s, 5);
  EXPECT_EQ(runs[1].first_rank, 4);
  EXPECT_EQ(runs[1].gpus, 2);
  EXPECT_DOUBLE_EQ(runs[1].time_s, 6);
  EXPECT_EQ(runs[0].start_s, 0);
  EXPECT_EQ(runs[1].start_s, 0);
  // N = 8: after step 2 B -> 4 fits (8 GPUs): max(5, 4) = 5.
  auto t8 = task_greedy_time(baseline_ops(), kTasks, 8);
  ASSERT_TRUE(t8.ok());
  EXPECT_DOUBLE_EQ(*t8, 5);
  // A tie goes to the lower task index: two equal tasks on 3 GPUs, both start on 1; the first moves
  // to 2 (gain 4 - 2.5 = 1.5, the same for both), then the second cannot: max(2.5, 4) = 4.
  Curve c;
  c.n = {1, 2};
  c.t = {4, 2.5};
  std::vector<Op> twins{op("t0", 1, c), op("t1", 1, c)};
  auto tie = task_greedy_time(twins, {{"first", {0}}, {"second", {1}}}, 3);
  ASSERT_TRUE(tie.ok());
  EXPECT_DOUBLE_EQ(*tie, 4);
}

TEST(Baselines, TaskGreedyRunsInRoundsWhenTheTasksDoNotFitAtOnce) {
  // A starts on 1, B on 2: 3 GPUs > 2, so A runs alone first (on 1, then moved to 2: T_A(2) = 5 +
  // 2 x 2 = 9, op2 still on 1), then B on 2 (6): 15.
  std::vector<TaskRun> runs;
  auto t = task_greedy_time(baseline_ops(), kTasks, 2, &runs);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_DOUBLE_EQ(*t, 15);
  // The second round starts when the first ends, from rank 0 again.
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_DOUBLE_EQ(runs[1].start_s, 9);
  EXPECT_EQ(runs[1].first_rank, 0);
  // B's operator needs 2 GPUs: on 1 GPU the task is named.
  auto one = task_greedy_time(baseline_ops(), kTasks, 1);
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.error().message.find("'B'"), std::string::npos) << one.error().message;
  // A task's operator index out of range names the task.
  auto bad = task_greedy_time(baseline_ops(), {{"broken", {7}}}, 8);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("'broken'"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("7"), std::string::npos) << bad.error().message;
}

// check_ops's message for ops with operator "attn" (index 1) broken by `breakit`.
template <class F>
std::string bad_message(F breakit, int gpus = 8) {
  std::vector<Op> ops{op("mlp", 2, amdahl(0.1, 1)), op("attn", 2, amdahl(0.1, 1))};
  breakit(ops[1]);
  Status s = check_ops(ops, gpus);
  EXPECT_FALSE(s.ok());
  if (s.ok()) return "";
  EXPECT_EQ(s.error().kind, ErrorKind::kBadInput);
  auto a = allocate(ops, gpus);
  EXPECT_FALSE(a.ok());
  if (!a.ok()) {
    EXPECT_EQ(a.error().message, s.error().message);
  }
  return s.error().message;
}

TEST(Allocator, BadInputNamesTheOperatorAndTheNumbers) {
  std::string m = bad_message([](Op& o) { o.layers = 0; });
  EXPECT_NE(m.find("'attn'"), std::string::npos) << m;
  EXPECT_NE(m.find("layers 0"), std::string::npos) << m;

  m = bad_message([](Op& o) { o.curve = Curve{}; });
  EXPECT_NE(m.find("'attn'"), std::string::npos) << m;
  EXPECT_NE(m.find("no valid counts"), std::string::npos) << m;

  m = bad_message([](Op& o) { o.curve.n = {1, 4, 2, 8, 16, 32}; });
  EXPECT_NE(m.find("'attn'"), std::string::npos) << m;
  EXPECT_NE(m.find("4 then 2"), std::string::npos) << m;

  m = bad_message([](Op& o) { o.curve.n = {1, 2, 2, 8, 16, 32}; });
  EXPECT_NE(m.find("2 then 2"), std::string::npos) << m;

  m = bad_message([](Op& o) { o.curve.t[2] = -1.5; });
  EXPECT_NE(m.find("'attn'"), std::string::npos) << m;
  EXPECT_NE(m.find("-1.5"), std::string::npos) << m;
  EXPECT_NE(m.find("4 GPUs"), std::string::npos) << m;

  m = bad_message([](Op& o) { o.curve.t[0] = 0; });
  EXPECT_NE(m.find("time 0"), std::string::npos) << m;

  m = bad_message([](Op& o) { o.curve.t.pop_back(); });
  EXPECT_NE(m.find("6 counts but 5 times"), std::string::npos) << m;

  m = bad_message([](Op& o) { o.curve.n[0] = 0; });
  EXPECT_NE(m.find("count 0"), std::string::npos) << m;

  m = bad_message([](Op&) {}, 0);
  EXPECT_NE(m.find("gpus 0"), std::string::npos) << m;

  // The baselines and the bound check the same.
  std::vector<Op> ops{op("attn", 0, amdahl(0.1, 1))};
  auto seq = sequential_time(ops, {{"t", {0}}}, 8);
  ASSERT_FALSE(seq.ok());
  EXPECT_NE(seq.error().message.find("'attn'"), std::string::npos);
  EXPECT_FALSE(task_greedy_time(ops, {{"t", {0}}}, 8).ok());
  EXPECT_FALSE(continuous_bound(ops, {0}, 8).ok());
}

}  // namespace
}  // namespace weft::multitask
