// A deterministic fake cost model for the search tests: simple formulas, memory in whole units of
// the search's memory step (so the DP's discretisation is exact), and a step() that is exactly the
// search objective (docs/search.md), so a search result can be compared with a brute-force optimum
// of estimate().
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "weft/cost/cost_model.h"

namespace weft::testing {

struct FakeParams {
  double unit_mib = 64;      // one memory unit (== SearchOptions::memory_step_mib in the tests)
  int budget_units = 200;    // memory_budget() in units
  double compute = 1.0;      // forward time per sample of a hidden=1024 layer
  double inefficiency = 0.15;// extra compute per doubling of the activation shard
  double tp_comm = 0.05;     // per sample per tp doubling
  double seq_comm = 0.03;    // per sample per Ulysses / cp doubling
  double trans = 0.03;       // re-layout per sample per step of layout difference
  double p2p = 0.02;         // per sample per unit of activation shard
  bool p2p_by_layout = true; // false: p2p is a constant per boundary
  int weight_units = 16;     // fp16 weights of a hidden=1024 layer, in units
  int act_units = 1;         // saved activations per sample (per micro-batch, unsharded)
  int emb_units = 12;        // embedding / LM-head weights for vocab 32000
  int overhead_units = 1;    // every stage
};

class FakeCostModel : public CostModel {
 public:
  explicit FakeCostModel(FakeParams p = {}) : p_(p) {}
  std::string name() const override { return "fake"; }

  // Relative size of a layer: 1 for hidden 1024 with ffn 4 * hidden.
  static double size(const LayerShape& sh) {
    const double h = static_cast<double>(sh.hidden);
    return h / 1024.0 * (0.5 + static_cast<double>(sh.ffn) / (8 * h));
  }
  static double lg(int x) { return std::log2(static_cast<double>(std::max(1, x))); }
  Bytes units(double u) const { return MiB(u * p_.unit_mib); }

  static int in_flight(const StageContext& c) {
    const int m = c.train.micro_batches;
    if (c.train.pp == 1) return 1;
    if (c.train.schedule == Schedule::kGpipe) return m;
    return std::max(1, std::min(m, c.num_stages - c.stage));
  }

  LayerCost layer(const LayerContext& ctx, const LayerStrategy& s) const override {
    const double w = size(ctx.shape());
    const int pmb = ctx.train.pipeline_micro_batch();
    const double samples = static_cast<double>(pmb) / s.dp;
    const int shard = s.tp * s.ulysses * s.cp;
    const double comp = p_.compute * w * samples / shard * (1 + p_.inefficiency * lg(shard));
    double comm = 0;
    if (s.tp > 1) comm += p_.tp_comm * w * samples * (lg(s.tp) + 1) * (s.sp ? 0.9 : 1.0);
    if (s.ulysses > 1) comm += p_.seq_comm * w * samples * lg(s.ulysses);
    if (s.cp > 1) comm += 1.5 * p_.seq_comm * w * samples * lg(s.cp);
    const double rc[] = {0.0, 0.25, 1.0};
    LayerCost c;
    c.fwd = sec(comp + comm);
    c.bwd = sec(2 * comp + comm + rc[static_cast<int>(s.recompute)] * comp + (s.zero == 3 ? 0.1 * w : 0.0) +
                (s.zero == 2 ? 0.02 * w : 0.0));
    c.grad_sync = c.bwd * 0.5;  // always hidden behind the backward
    const int sg = s.shard_group();
    c.optimizer = sec(0.01 * w / (s.zero >= 1 ? sg : 1));
    c.time.compute = sec(3 * comp);
    // Memory in whole units.
    const int wu = static_cast<int>(std::ceil(p_.weight_units * w));
    const int per = (wu + s.tp - 1) / s.tp;
    auto shard_of = [&](int x) { return (x + sg - 1) / sg; };
    c.memory.weights = units(s.zero >= 3 ? shard_of(per) : per);
    c.memory.grads = units(s.zero >= 2 ? shard_of(per) : per);
    c.memory.optimizer = units(s.zero >= 1 ? shard_of(3 * per) : 3 * per);
    const int act_div = (s.sp ? s.tp : 1) * s.ulysses * s.cp;
    const int rcf[] = {4, 3, 1};
    const int a = static_cast<int>(std::ceil(p_.act_units * w * samples * rcf[static_cast<int>(s.recompute)] /
                                             act_div));
    c.memory.activations = units(static_cast<double>(a) * in_flight(ctx));
    return c;
  }

  LayerCost stage_extra(const StageContext& ctx, const LayerStrategy& e) const override {
    const double v = static_cast<double>(ctx.model->vocab) / 32000.0;
    const int pmb = ctx.train.pipeline_micro_batch();
    const double samples = static_cast<double>(pmb) / e.dp;
    LayerCost c;
    c.memory.other = units(p_.overhead_units);
    c.fwd = sec(0.001);
    if (ctx.first() || ctx.last()) {
      const double t = (ctx.last() ? 0.4 : 0.2) * v * samples / (e.tp * e.ulysses) + (e.tp > 1 ? 0.02 * samples : 0);
      c.fwd += sec(t);
      c.bwd = sec(2 * t + (e.zero == 3 ? 0.05 : 0.0));
      c.grad_sync = c.bwd * 0.5;
      const int sg = e.shard_group();
      c.optimizer = sec(0.005 * v / (e.zero >= 1 ? sg : 1));
      const int wu = static_cast<int>(std::ceil(p_.emb_units * v));
      const int per = (wu + e.tp - 1) / e.tp;
      auto shard_of = [&](int x) { return (x + sg - 1) / sg; };
      c.memory.weights = units(e.zero >= 3 ? shard_of(per) : per);
      c.memory.grads = units(e.zero >= 2 ? shard_of(per) : per);
      c.memory.optimizer = units(e.zero >= 1 ? shard_of(3 * per) : 3 * per);
      if (ctx.last()) c.memory.activations = units(std::ceil(2 * v * samples / (e.tp * e.ulysses)));
    }
    return c;
  }

  Seconds transition(const LayerContext& ctx, const LayerStrategy& a, const LayerStrategy& b) const override {
    if (a.tp == b.tp && a.sp == b.sp && a.ulysses == b.ulysses && a.cp == b.cp && a.dp == b.dp) return sec(0);
    const double w = size(ctx.shape());
    const double samples = static_cast<double>(ctx.train.pipeline_micro_batch()) / std::min(a.dp, b.dp);
    const double d = std::abs(lg(a.tp) - lg(b.tp)) + (a.sp != b.sp) + std::abs(lg(a.ulysses) - lg(b.ulysses)) +
                     std::abs(lg(a.cp) - lg(b.cp)) + 0.5;
    return sec(p_.trans * w * samples * d);
  }

  Seconds p2p(const StageContext& ctx, const LayerStrategy& s) const override {
    if (!p_.p2p_by_layout) return sec(p_.p2p);
    const double samples = static_cast<double>(ctx.train.pipeline_micro_batch()) / s.dp;
    return sec(p_.p2p * samples / ((s.sp ? s.tp : 1) * s.ulysses * s.cp));
  }

  // The search objective, docs/search.md: per stage x = fwd + bwd + p2p + (exposed grad + opt) / m;
  // 1F1B / GPipe: sum x + (m - 1) max x; interleaved: per device group C, (m - 1/vp) max C + sum C / vp.
  StepCost step(const TrainSettings& t, const std::vector<StageSums>& st) const override {
    StepCost out;
    const int m = t.micro_batches;
    std::vector<double> x(st.size());
    for (size_t s = 0; s < st.size(); ++s) {
      const double exposed = std::max(0.0, st[s].grad_sync.value() - st[s].bwd.value());
      x[s] = st[s].fwd.value() + st[s].bwd.value() + st[s].p2p.value() + (exposed + st[s].optimizer.value()) / m;
      out.stage_time.push_back(sec(x[s] * m));
    }
    std::vector<double> group(t.pp, 0.0);
    for (size_t s = 0; s < st.size(); ++s) group[stage_group(t, static_cast<int>(s))] += x[s];
    double mx = 0, sum = 0;
    for (double c : group) mx = std::max(mx, c), sum += c;
    out.step_time = sec((m - 1.0 / t.vp) * mx + sum / t.vp);
    return out;
  }

  // budget_units on the tests' 80 GiB device, in proportion on others.
  Bytes memory_budget(const ClusterSpec& c) const override {
    return units(p_.budget_units) * (c.gpu.memory_gib / 80.0);
  }

  const FakeParams& params() const { return p_; }

 private:
  FakeParams p_;
};

}  // namespace weft::testing
