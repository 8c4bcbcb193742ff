// Hand-made pieces of hardware and model profiles (docs/profiles.md) for the calibration tests, with
// figures simple enough to work expectations out by hand.
#pragma once

#include "weft/calibration/hardware_profile.h"
#include "weft/calibration/model_profile.h"

namespace weft::testing {

// A measured sample of a layer (or the embedding or head) at tensor-parallel degree tp, recompute
// rc, micro-batch mb and sequence length seq: forward f and backward b seconds, act bytes held
// between them; zero 0.
inline PhaseSample phase_sample(int tp, Recompute rc, int mb, int seq, double f, double b, double act) {
  return PhaseSample{.tp = tp,
                     .recompute = rc,
                     .micro_batch = mb,
                     .seq = seq,
                     .forward_s = f,
                     .backward_s = b,
                     .activation_bytes = act};
}

// `kind` over 2 ranks inside a node (one group at a time) measured at 1000 B -> 200 us and
// 5000 B -> 600 us, with its alpha-beta fit. For an all-reduce the line through them is
// t = 100 us + S / (10^7 B/s) (bus factor 2(n-1)/n = 1 for n = 2).
inline CollectiveEntry two_point_table(Collective kind) {
  CollectiveEntry e{.kind = kind,
                    .group_size = 2,
                    .placement = Placement::kIntraNode,
                    .ranks_per_node = 2,
                    .concurrent_groups = 1,
                    .samples = {{1000, 2e-4}, {5000, 6e-4}}};
  e.fit = fit_alpha_beta(e.kind, e.group_size, e.samples);
  return e;
}

// A hardware profile of one CPU node of `world` ranks with round figures (0.05 TFLOP/s GEMMs,
// 8 GB/s streaming, 6 GiB per rank) and the two-point all-reduce table above.
inline HardwareProfile one_node_profile(int world) {
  HardwareProfile p;
  p.machine.hostname = "box";
  p.machine.device = "cpu";
  p.machine.device_name = "test cpu";
  p.machine.world_size = world;
  p.machine.ranks_per_node = world;
  p.machine.nodes = 1;
  p.machine.cores = 2;
  p.machine.memory_per_rank_gib = 6;
  p.machine.runtime_overhead_gib = 0.25;
  p.machine.matmul_tflops = 0.05;
  p.machine.memory_gbps = 8;
  p.machine.collective_gap_ms = 2;
  p.machine.created = "2026-11-22T00:00:00Z";
  p.collectives.push_back(two_point_table(Collective::kAllReduce));
  return p;
}

}  // namespace weft::testing
