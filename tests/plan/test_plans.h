// Hand-built plans for plan-library tests (no presets needed; the specs are tiny_specs.h's).
#pragma once

#include <string>

#include "tiny_specs.h"
#include "weft/plan/plan.h"

namespace weft::testing {

// A small Llama-like decoder: 8 layers, hidden 1024, 16 heads, 4 kv heads, swiglu 2816, vocab 32000.
inline ModelSpec small_model() { return llama_model("small", 8, swiglu_shape(1024, 16, 4, 2816), 32000); }

// A uniform plan: pp stages of equal size, every layer with `s`.
inline Plan uniform_plan(const LayerStrategy& s, int pp, int m = 8, int batch = 64) {
  Plan p;
  p.model = small_model();
  p.cluster = a100_cluster("test", 1, 8, "G", 3, 8);  // one node of 8 A100s, 3 us / 8 us a hop
  p.train = TrainSettings{.seq = 1024, .global_batch = batch, .micro_batches = m, .pp = pp};
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

// "OK", or the error's message: what a check of a plan says, for EXPECT_EQ.
inline std::string message_of(const Status& s) { return s.ok() ? std::string("OK") : s.error().message; }

}  // namespace weft::testing
