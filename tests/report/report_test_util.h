// Hand-built models, clusters and plans for the report tests, and a cost model with fixed costs.
#pragma once

#include <numeric>
#include <vector>

#include "tiny_specs.h"
#include "weft/cost/cost_model.h"
#include "weft/plan/plan.h"

namespace weft::report_test {

// A GPT-style decoder: hidden 1024, 16 heads (MHA), FFN 4096, GELU, biases, learned positions up to
// 2048.
inline ModelSpec gpt(int layers = 8) {
  return testing::decoder_model("test-gpt", layers, testing::gpt_shape(1024, 16), 32000, 2048);
}

// A Llama-style decoder: GQA 32/8 heads, SwiGLU FFN 11008, RMSNorm, RoPE, untied, no biases.
inline ModelSpec llama(int layers = 8) {
  return testing::llama_model("test-llama", layers, testing::swiglu_shape(4096, 32, 8, 11008), 32000);
}

// nodes x gpus A100-80GB-like GPUs (datasheet: 312 dense BF16 TFLOP/s, 2039 GB/s HBM), NVLink
// 300 GB/s per direction (2 us a hop), 25 GB/s InfiniBand per GPU (5 us a hop).
inline ClusterSpec cluster(int nodes = 1, int gpus = 8) {
  return testing::a100_cluster("test-a100", nodes, gpus, "A100-80GB", 2, 5);
}

// A plan with `layer` on every layer, stages of `counts` layers (even split when empty).
inline Plan plan(const ModelSpec& m, const ClusterSpec& c, TrainSettings t, const LayerStrategy& layer,
                 std::vector<int> counts = {}) {
  Plan p;
  p.model = m;
  p.cluster = c;
  p.train = t;
  p.embedding = LayerStrategy{.tp = layer.tp, .sp = layer.sp, .ulysses = layer.ulysses, .cp = layer.cp,
                              .dp = layer.dp, .zero = layer.zero};
  const int n = t.pp * t.vp, L = m.num_layers();
  if (counts.empty())
    for (int s = 0; s < n; ++s) counts.push_back(L / n + (s >= n - L % n ? 1 : 0));
  int first = 0;
  for (int k : counts) {
    Stage st;
    st.first_layer = first;
    st.layers.assign(k, layer);
    first += k;
    p.stages.push_back(st);
  }
  return p;
}

inline TrainSettings train(int pp, int m, int global_batch, Schedule s = Schedule::k1F1B, int vp = 1, int seq = 2048) {
  return TrainSettings{.seq = seq, .global_batch = global_batch, .micro_batches = m, .pp = pp, .vp = vp, .schedule = s};
}

// Fixed costs: a layer takes 1 ms forward and 2 ms backward (+1 ms recompute when full; 1 ms of
// the backward is its weight gradient, which zb-h1 runs as W), syncs its
// gradients in 0.5 ms and updates in 0.1 ms; it holds 1 GiB weights, 1 GiB grads, 2 GiB optimizer
// states and 0.5 GiB activations. The first stage adds 0.5 + 1 ms of embedding and 2 GiB "other".
// A boundary costs 0.25 ms per micro-batch. step() is the bottleneck formula
// (m - 1) max_s t_s + sum_s t_s (t_s = fwd + bwd + p2p) + the largest per-stage update.
class FakeCost : public CostModel {
 public:
  std::string name() const override { return "fake"; }
  LayerCost layer(const LayerContext&, const LayerStrategy& s) const override {
    LayerCost c;
    const double rc = s.recompute == Recompute::kFull ? 1e-3 : 0;
    c.fwd = ms(1);
    c.bwd = ms(2) + sec(rc);
    c.wgrad = ms(1);
    c.grad_sync = ms(0.5);
    c.optimizer = ms(0.1);
    c.time.compute = ms(2.4);
    c.time.tp_comm = ms(0.6);
    c.time.recompute = sec(rc);
    c.memory.weights = GiB(1);
    c.memory.grads = GiB(1);
    c.memory.optimizer = GiB(2);
    c.memory.activations = GiB(0.5);
    return c;
  }
  LayerCost stage_extra(const StageContext& ctx, const LayerStrategy&) const override {
    LayerCost c;
    if (ctx.first()) {
      c.fwd = ms(0.5);
      c.bwd = ms(1);
      c.time.embedding = ms(1.5);
      c.memory.other = GiB(2);
    }
    return c;
  }
  Seconds transition(const LayerContext&, const LayerStrategy& a, const LayerStrategy& b) const override {
    return a == b ? Seconds(0) : ms(0.2);
  }
  Seconds p2p(const StageContext&, const LayerStrategy&) const override { return ms(0.25); }
  StepCost step(const TrainSettings& t, const std::vector<StageSums>& st) const override {
    StepCost sc;
    double mx = 0, sum = 0, opt = 0;
    for (const auto& s : st) {
      const double ts = (s.fwd + s.bwd + s.p2p).value();
      mx = std::max(mx, ts);
      sum += ts;
      opt = std::max(opt, s.optimizer.value());
      sc.stage_time.push_back(sec(ts * t.micro_batches));
    }
    sc.step_time = sec((t.micro_batches - 1) * mx + sum + opt);
    sc.time.compute = sec(mx * t.micro_batches);
    sc.time.bubble = sec(sum - mx);
    sc.time.optimizer = sec(opt);
    return sc;
  }
  Bytes memory_budget(const ClusterSpec& c) const override { return GiB(c.gpu.memory_gib - 4); }
};

}  // namespace weft::report_test
