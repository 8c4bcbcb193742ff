// Hand-built specs and plans for plan-library tests (no presets needed).
#pragma once

#include "weft/plan/plan.h"

namespace weft::testing {

// A small Llama-like decoder: 8 layers, hidden 1024, 16 heads, 4 kv heads, swiglu 2816, vocab 32000.
inline ModelSpec small_model() {
  ModelSpec m;
  m.name = "small";
  m.vocab = 32000;
  m.hidden = 1024;
  m.norm = NormKind::kRmsNorm;
  m.position = PositionKind::kRope;
  LayerGroup g;
  g.name = "decoder";
  g.count = 8;
  g.shape = LayerShape{LayerKind::kDecoder, 1024, 16, 4, 64, 2816, FfnKind::kSwiglu, false, {}};
  m.groups.push_back(g);
  return m;
}

inline ClusterSpec small_cluster(int nodes = 1, int gpus = 8) {
  ClusterSpec c;
  c.name = "test";
  c.nodes = nodes;
  c.gpus_per_node = gpus;
  c.gpu = GpuSpec{"G", 19.5, 156, 312, 312, 0, 80, 2039};
  c.intra = LinkSpec{300, 3};
  c.inter = LinkSpec{25, 8};
  return c;
}

// A uniform plan: pp stages of equal size, every layer with `s`.
inline Plan uniform_plan(const LayerStrategy& s, int pp, int m = 8, int batch = 64) {
  Plan p;
  p.model = small_model();
  p.cluster = small_cluster();
  p.train.seq = 1024;
  p.train.global_batch = batch;
  p.train.micro_batches = m;
  p.train.pp = pp;
  p.embedding = s;
  p.embedding.recompute = Recompute::kNone;
  const int L = p.model.num_layers();
  for (int k = 0; k < pp; ++k) {
    Stage st;
    st.first_layer = k * L / pp;
    st.layers.assign((k + 1) * L / pp - st.first_layer, s);
    p.stages.push_back(st);
  }
  return p;
}

}  // namespace weft::testing
