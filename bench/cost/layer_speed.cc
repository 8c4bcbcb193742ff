// weft_bench_cost_speed: wall time of AnalyticCostModel::layer() and estimate(), the calls the
// search makes (memoised per layer shape, strategy and micro-batch, but thousands of times).
#include <chrono>
#include <cstdio>

#include "weft/cost/analytic.h"
#include "weft/spec/presets.h"

int main() {
  using namespace weft;
  using clock = std::chrono::steady_clock;
  auto m = load_model("llama-2-70b");
  auto c = load_cluster("h100-80gb");
  if (!m.ok() || !c.ok()) return 4;
  ClusterSpec cluster = *c;
  cluster.nodes = 8;
  const AnalyticCostModel cm;
  LayerContext ctx;
  ctx.model = &*m;
  ctx.cluster = &cluster;
  ctx.train.seq = 4096;
  ctx.train.global_batch = 512;
  ctx.train.micro_batches = 64;
  ctx.train.pp = 4;
  ctx.stage_size = 16;
  const int tps[] = {1, 2, 4, 8};
  const Recompute rcs[] = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  const int n = 200000;
  double sink = 0;
  const auto t0 = clock::now();
  for (int i = 0; i < n; ++i) {
    LayerStrategy s;
    s.tp = tps[i % 4];
    s.dp = 16 / s.tp;
    s.sp = s.tp > 1 && (i / 4) % 2;
    s.zero = (i / 8) % 4;
    s.recompute = rcs[(i / 32) % 3];
    ctx.layer = i % m->num_layers();
    ctx.stage = (i / 96) % 4;
    sink += cm.layer(ctx, s).fwd.value();
  }
  const double secs = std::chrono::duration<double>(clock::now() - t0).count();
  std::printf("AnalyticCostModel::layer(): %.2f us per call (%d calls, Llama-2-70B on 64 H100; checksum %.3g)\n",
              secs / n * 1e6, n, sink);
  return 0;
}
