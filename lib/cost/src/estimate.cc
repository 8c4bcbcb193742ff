#include "weft/cost/estimate.h"

#include <algorithm>

#include "weft/core/assert.h"
#include "weft/spec/counts.h"

namespace weft {

StageContext stage_context(const Plan& p, int s) { return stage_context(p, s, p.cluster); }

StageContext stage_context(const Plan& p, int s, const ClusterSpec& cluster) {
  StageContext ctx;
  ctx.model = &p.model;
  ctx.cluster = &cluster;
  ctx.train = p.train;
  ctx.stage = s;
  ctx.num_stages = static_cast<int>(p.stages.size());
  ctx.stage_size = p.devices_per_stage();
  return ctx;
}

std::vector<StageSums> stage_sums(const Plan& p, const CostModel& cm) {
  return stage_sums(p, cm, std::vector<ClusterSpec>(p.stages.size(), p.cluster));
}

std::vector<StageSums> stage_sums(const Plan& p, const CostModel& cm, const std::vector<ClusterSpec>& clusters) {
  WEFT_ASSERT(clusters.size() == p.stages.size(), "stage_sums: one cluster per stage");
  auto stage_context = [&](const Plan& pl, int s) { return weft::stage_context(pl, s, clusters[s]); };
  const int n = static_cast<int>(p.stages.size());
  std::vector<StageSums> out(n);
  // p2p at the boundary after stage s, paid by both neighbours; none where both are on one device
  // group (zb-v's turn).
  std::vector<Seconds> boundary(n > 0 ? n - 1 : 0);
  for (int s = 0; s + 1 < n; ++s)
    if (stage_group(p, s) != stage_group(p, s + 1))
      boundary[s] = cm.p2p(stage_context(p, s), p.stages[s].layers.back());

  for (int s = 0; s < n; ++s) {
    const Stage& st = p.stages[s];
    StageSums& sum = out[s];
    const StageContext sctx = stage_context(p, s);
    LayerContext lctx;
    static_cast<StageContext&>(lctx) = sctx;
    // A layer of a shape and strategy met before in the stage costs the same (the cost model's
    // contract, weft/search/search.h): costed once per stage (a model alternating two shapes
    // costs two layers a stage, not every one).
    std::vector<std::pair<int, LayerCost>> seen;  // (first layer index of the kind, its cost)
    for (int i = 0; i < st.num_layers(); ++i) {
      lctx.layer = st.first_layer + i;
      const LayerShape& shape = p.model.layer(lctx.layer);
      const LayerCost* known = nullptr;
      for (const auto& [l, lc] : seen)
        if (st.layers[l - st.first_layer] == st.layers[i] && p.model.layer(l) == shape) known = &lc;
      if (!known) {
        seen.emplace_back(lctx.layer, cm.layer(lctx, st.layers[i]));
        known = &seen.back().second;
      }
      const LayerCost c = *known;
      sum.fwd += c.fwd;
      sum.bwd += c.bwd;
      sum.wgrad += c.wgrad;
      sum.grad_sync += c.grad_sync;
      sum.optimizer += c.optimizer;
      sum.time += c.time;
      sum.memory += c.memory;
      if (i > 0) {
        const Seconds t = cm.transition(lctx, st.layers[i - 1], st.layers[i]);
        sum.fwd += t * 0.5;
        sum.bwd += t * 0.5;
        sum.time.redistribution += t;
      }
    }
    const LayerCost extra = cm.stage_extra(sctx, p.embedding);
    sum.fwd += extra.fwd;
    sum.bwd += extra.bwd;
    sum.wgrad += extra.wgrad;
    sum.grad_sync += extra.grad_sync;
    sum.optimizer += extra.optimizer;
    sum.time += extra.time;
    sum.memory += extra.memory;
    if (s > 0) sum.p2p += boundary[s - 1];
    if (s + 1 < n) sum.p2p += boundary[s];
    sum.time.p2p += sum.p2p;
  }
  return out;
}

double CostModel::recompute_flops(const LayerShape& s, Recompute r, double batch, double seq) const {
  const LayerFlops f = layer_forward_flops(s, batch, seq);
  switch (r) {
    case Recompute::kNone: return 0;
    case Recompute::kFull: return f.total();
    case Recompute::kSelective: return f.attn_scores;
  }
  return 0;
}

void set_throughput(Estimate& e, const Plan& p, const CostModel& cm, double peak_flops) {
  const double tokens = static_cast<double>(p.train.global_batch) * p.train.seq;
  const double step = e.step_time.value();
  if (step <= 0) return;
  e.tokens_per_s = tokens / step;
  const double flops = model_step_flops(p.model, p.train.global_batch, p.train.seq);
  double recomputed = 0;
  for (const Stage& st : p.stages)
    for (int i = 0; i < st.num_layers(); ++i)
      recomputed += cm.recompute_flops(p.model.layer(st.first_layer + i), st.layers[i].recompute,
                                       p.train.global_batch, p.train.seq);
  e.model_tflops_per_gpu = flops / step / p.world_size() / 1e12;
  e.hardware_tflops_per_gpu = (flops + recomputed) / step / p.world_size() / 1e12;
  e.mfu = peak_flops > 0 ? flops / step / peak_flops : 0;
  e.hfu = peak_flops > 0 ? (flops + recomputed) / step / peak_flops : 0;
}

Estimate estimate(const Plan& p, const CostModel& cm) {
  Estimate e;
  const std::vector<StageSums> sums = stage_sums(p, cm);
  const StepCost sc = cm.step(p.train, sums);
  e.step_time = sc.step_time;
  e.breakdown = sc.time;
  e.memory_budget = cm.memory_budget(p.cluster);

  // A device holds every virtual stage of its group: sum their memory per group.
  const int pp = std::max(1, p.train.pp);
  std::vector<Bytes> group_mem(pp);
  auto group = [&](size_t s) { return stage_group(p, static_cast<int>(s)); };
  for (size_t s = 0; s < sums.size(); ++s) group_mem[group(s)] += sums[s].memory.total();
  e.fits = true;
  for (size_t s = 0; s < sums.size(); ++s) {
    StageEstimate se;
    se.time = s < sc.stage_time.size() ? sc.stage_time[s] : Seconds(0);
    se.memory = sums[s].memory;
    se.fits = group_mem[group(s)] <= e.memory_budget;
    e.fits = e.fits && se.fits;
    e.stages.push_back(se);
  }
  for (Bytes b : group_mem) e.peak_memory = std::max(e.peak_memory, b);

  set_throughput(e, p, cm, p.cluster.gpu.peak(p.train.dtype).value() * p.world_size());
  return e;
}

void annotate(Plan& p, const Estimate& e, const CostModel& cm) {
  p.predicted.step_time_s = e.step_time.value();
  p.predicted.tokens_per_s = e.tokens_per_s;
  p.predicted.mfu = e.mfu;
  p.predicted.hfu = e.hfu;
  p.predicted.peak_memory_gib = to_gib(e.peak_memory);
  p.predicted.cost_model = cm.name();
  p.predicted.source = cm.source();
  for (size_t s = 0; s < p.stages.size() && s < e.stages.size(); ++s) {
    auto& pr = p.stages[s].predicted;
    const auto& m = e.stages[s].memory;
    pr.time_s = e.stages[s].time.value();
    // Per device: the group's total (all its virtual stages); the parts are this stage's own.
    Bytes group;
    for (size_t k = 0; k < e.stages.size(); ++k)
      if (stage_group(p, static_cast<int>(k)) == stage_group(p, static_cast<int>(s))) group += e.stages[k].memory.total();
    pr.memory_gib = to_gib(group);
    pr.weights_gib = to_gib(m.weights);
    pr.grads_gib = to_gib(m.grads);
    pr.optimizer_gib = to_gib(m.optimizer);
    pr.activations_gib = to_gib(m.activations);
    pr.other_gib = to_gib(m.other + m.transient);
  }
}

Json to_json(const Estimate& e) {
  Json j;
  j["step_time_s"] = e.step_time.value();
  j["tokens_per_s"] = e.tokens_per_s;
  j["model_tflops_per_gpu"] = e.model_tflops_per_gpu;
  j["mfu"] = e.mfu;
  j["hardware_tflops_per_gpu"] = e.hardware_tflops_per_gpu;
  j["hfu"] = e.hfu;
  j["peak_memory_gib"] = to_gib(e.peak_memory);
  j["memory_budget_gib"] = to_gib(e.memory_budget);
  j["fits"] = e.fits;
  Json stages = Json::array();
  for (size_t s = 0; s < e.stages.size(); ++s) {
    const auto& st = e.stages[s];
    stages.push_back(Json{{"index", s},
                          {"time_s", st.time.value()},
                          {"memory_gib", to_gib(st.memory.total())},
                          {"memory", to_json(st.memory)},
                          {"fits", st.fits}});
  }
  j["stages"] = std::move(stages);
  j["breakdown"] = to_json(e.breakdown);
  return j;
}

}  // namespace weft
