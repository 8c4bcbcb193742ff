// How long re-sharding takes to plan at scale (weft/plan/checkpoint_layout.h): Llama-2-70B on 512
// GPUs (64 nodes of 8 A100-80GB), a checkpoint of tp 8 x pp 8 x dp 8 with ZeRO-1 re-sharded for
// other layouts of the same 512 GPUs. Prints, per target layout: the time to gather the checkpoint
// index by tensor, to list one rank's copies, and to count the bytes that change ranks for all 512
// (what `weft train --adapt` prices a switch with and what an in-place switch computes), and those
// bytes. Torch-free; no files.
#include <chrono>
#include <cstdio>

#include "weft/plan/checkpoint_layout.h"
#include "weft/spec/presets.h"

namespace {

using namespace weft;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

Plan layout(const ModelSpec& m, const ClusterSpec& c, int tp, int pp, int zero) {
  Plan p;
  p.model = m;
  p.cluster = c;
  const int dp = c.total_gpus() / (tp * pp);
  p.train = TrainSettings{.seq = 4096, .global_batch = 1024, .micro_batches = 1024 / dp, .pp = pp};
  LayerStrategy s;
  s.tp = tp;
  s.sp = tp > 1;
  s.dp = dp;
  s.zero = zero;
  p.embedding = s;
  const int L = m.num_layers();
  for (int k = 0; k < pp; ++k) {
    Stage st;
    st.first_layer = k * L / pp;
    st.layers.assign((k + 1) * L / pp - st.first_layer, s);
    p.stages.push_back(st);
  }
  return p;
}

}  // namespace

int main() {
  auto m = load_model("llama-2-70b");
  auto c = load_cluster("a100-80gb");
  if (!m.ok() || !c.ok()) {
    std::fprintf(stderr, "reshard_bench: %s\n", (!m.ok() ? m.error() : c.error()).message.c_str());
    return 1;
  }
  c->nodes = 64;
  const Plan from = layout(*m, *c, 8, 8, 1);
  if (Status s = validate(from); !s.ok()) {
    std::fprintf(stderr, "reshard_bench: %s\n", s.error().message.c_str());
    return 1;
  }
  auto t = Clock::now();
  const CheckpointIndex idx = checkpoint_index(from);
  const double index_ms = ms_since(t);
  size_t pieces = 0;
  for (const auto& r : idx.ranks)
    for (const auto& e : r) pieces += e.pieces.size();
  t = Clock::now();
  const Resharder rs(idx);
  const double gather_ms = ms_since(t);
  std::printf("Llama-2-70B on 512 A100s, checkpoint tp8 pp8 dp8 ZeRO-1: index of 512 files, %zu pieces, built in "
              "%.0f ms, gathered by tensor in %.0f ms\n",
              pieces, index_ms, gather_ms);
  std::printf("  %-28s %14s %10s %16s %12s\n", "to", "rank 0 (ms)", "copies", "all 512 (ms)", "moved GiB");
  struct Target {
    const char* name;
    int tp, pp, zero;
  };
  for (const Target& g : {Target{"tp8 pp8 dp8 ZeRO-1 (same)", 8, 8, 1}, Target{"tp8 pp8 dp8 ZeRO-3", 8, 8, 3},
                          Target{"tp4 pp8 dp16 ZeRO-1", 4, 8, 1}, Target{"tp8 pp16 dp4 ZeRO-1", 8, 16, 1},
                          Target{"tp8 pp4 dp16 ZeRO-2", 8, 4, 2}}) {
    const Plan to = layout(*m, *c, g.tp, g.pp, g.zero);
    if (Status s = validate(to); !s.ok()) {
      std::printf("  %-28s %s\n", g.name, s.error().message.c_str());
      continue;
    }
    t = Clock::now();
    auto f = rs.rank(to, 0, 0);
    const double one_ms = ms_since(t);
    if (!f.ok()) {
      std::printf("  %-28s %s\n", g.name, f.error().message.c_str());
      continue;
    }
    size_t copies = 0;
    for (const EntryFill& e : *f) copies += e.copies.size();
    t = Clock::now();
    auto moved = reshard_bytes_moved(from, to);
    const double all_ms = ms_since(t);
    std::printf("  %-28s %14.1f %10zu %16.0f %12.1f\n", g.name, one_ms, copies, all_ms,
                moved.ok() ? static_cast<double>(*moved) / (1 << 30) : -1.0);
  }
  return 0;
}
