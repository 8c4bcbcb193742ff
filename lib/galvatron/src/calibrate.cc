// Galvatron's profiles -> weft's profile formats -> weft's calibrated cost model.
#include "weft/galvatron/calibrate.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "weft/cost/analytic.h"

namespace weft::galvatron {

namespace {

constexpr double kMiB = 1048576.0;
// Galvatron's bandwidth unit: MB (2^20 bytes) per millisecond.
constexpr double kMbPerMsToBytesPerS = kMiB * 1000.0;
// Message sizes at which a measured bus bandwidth (one figure per group) is turned into samples:
// the large-message range where a bus-bandwidth figure describes the link (64 MiB - 1 GiB).
constexpr double kBandwidthSizesMiB[] = {64.0, 256.0, 1024.0};

CollectiveEntry entry(Collective k, int g, Placement pl, int rpn, std::vector<CollectiveSample> samples) {
  CollectiveEntry e;
  e.kind = k;
  e.group_size = g;
  e.placement = pl;
  e.ranks_per_node = rpn;
  std::sort(samples.begin(), samples.end(), [](auto& a, auto& b) { return a.bytes < b.bytes; });
  e.samples = std::move(samples);
  e.fit = fit_alpha_beta(k, g, e.samples);
  return e;
}

std::vector<CollectiveSample> from_table(const CollectiveTable& t, double scale) {
  std::vector<CollectiveSample> out;
  for (auto [mb, ms] : t.ms_by_mb) out.push_back({mb * kMiB, ms * 1e-3 * scale});
  return out;
}

std::vector<CollectiveSample> from_bandwidth(Collective k, int g, double mb_per_ms) {
  std::vector<CollectiveSample> out;
  const double f = bus_factor(k, g);
  for (double mib : kBandwidthSizesMiB) out.push_back({mib * kMiB, f * mib * kMiB / (mb_per_ms * kMbPerMsToBytesPerS)});
  return out;
}

// Analytic compute time of one layer of group `group` on `t` devices (tp = t) for `b` samples,
// used only as a ratio against t = 1 (the profiles time tp = 1 only).
double analytic_layer_compute(const AnalyticCostModel& a, const ModelSpec& m, const ClusterSpec& c, int group,
                              int t, int b, int seq) {
  ClusterSpec cl = c;
  cl.nodes = 1;
  cl.gpus_per_node = std::max(c.gpus_per_node, t);
  LayerContext ctx;
  ctx.model = &m;
  ctx.cluster = &cl;
  ctx.train.seq = seq;
  ctx.train.global_batch = b;
  ctx.train.micro_batches = 1;
  ctx.stage_size = t;
  int first = 0;
  for (int i = 0; i < group; ++i) first += m.groups[i].count;
  ctx.layer = first;
  LayerStrategy s;
  s.tp = t;
  s.sp = t > 1;
  const LayerCost cost = a.layer(ctx, s);
  return cost.time.compute.value() > 0 ? cost.time.compute.value() : (cost.fwd + cost.bwd).value();
}

// Analytic embedding (first stage) and head (last stage) compute with tp = t for b samples.
std::pair<double, double> analytic_edges(const AnalyticCostModel& a, const ModelSpec& m, const ClusterSpec& c, int t,
                                         int b, int seq) {
  ClusterSpec cl = c;
  cl.nodes = 1;
  cl.gpus_per_node = std::max(c.gpus_per_node, 2 * t);
  StageContext ctx;
  ctx.model = &m;
  ctx.cluster = &cl;
  ctx.train.seq = seq;
  ctx.train.global_batch = b;
  ctx.train.micro_batches = 2;
  ctx.train.global_batch = 2 * b;
  ctx.train.pp = 2;
  ctx.num_stages = 2;
  ctx.stage_size = t;
  LayerStrategy e;
  e.tp = t;
  e.sp = t > 1;
  auto time = [](const LayerCost& x) {
    return x.time.embedding.value() > 0 ? x.time.embedding.value() : (x.fwd + x.bwd).value();
  };
  ctx.stage = 0;
  const double first = time(a.stage_extra(ctx, e));
  ctx.stage = 1;
  const double last = time(a.stage_extra(ctx, e));
  return {first, last};
}

bool tp_fits(const LayerShape& s, int t) {
  const long long ffn = s.moe.enabled() ? s.moe.expert_ffn : s.ffn;
  return s.heads % t == 0 && ffn % t == 0 && (s.kv_heads % t == 0 || t % s.kv_heads == 0);
}

}  // namespace

Result<weft::HardwareProfile> to_hardware_profile(const Profiles& p, const ClusterSpec& cluster) {
  auto r = catch_errors([&]() -> weft::HardwareProfile {
    const auto& hw = p.hardware;
    const int gpn = hw.gpus_per_node, nodes = hw.nodes, world = gpn * nodes;
    weft::HardwareProfile out;
    out.machine.hostname = "galvatron-profiles";
    out.machine.device = "cuda";
    out.machine.device_name = cluster.gpu.name;  // the analytic model looks GPU figures up by name
    out.machine.backend = "nccl";
    out.machine.dtype = p.precision;
    out.machine.world_size = world;
    out.machine.ranks_per_node = gpn;
    out.machine.nodes = nodes;
    out.machine.memory_per_rank_gib = cluster.gpu.memory_gib;

    std::set<std::tuple<int, int, int, int>> have;  // (kind, group, placement, ranks per node)
    auto add = [&](CollectiveEntry e) {
      if (!have.insert({static_cast<int>(e.kind), e.group_size, static_cast<int>(e.placement), e.ranks_per_node}).second)
        return;
      out.collectives.push_back(std::move(e));
    };
    // Timed tables (inside one node): all-reduce, and all-gather / reduce-scatter at half its time
    // (the ring's bus factor (n-1)/n against 2(n-1)/n, Galvatron's own assumption), all-to-all.
    for (const auto& [g, t] : hw.allreduce_ms) {
      if (g < 2 || g > gpn) continue;
      add(entry(Collective::kAllReduce, g, Placement::kIntraNode, g, from_table(t, 1.0)));
      add(entry(Collective::kAllGather, g, Placement::kIntraNode, g, from_table(t, 0.5)));
      add(entry(Collective::kReduceScatter, g, Placement::kIntraNode, g, from_table(t, 0.5)));
    }
    for (const auto& [g, t] : hw.all2all_ms) {
      if (g < 2 || g > gpn) continue;
      add(entry(Collective::kAllToAll, g, Placement::kIntraNode, g, from_table(t, 1.0)));
    }
    // All-reduce bus bandwidth by group and placement. "consec 1": ranks r..r+g-1; "consec 0":
    // ranks strided by world/g over the whole machine.
    for (const auto& [key, bw] : hw.allreduce_busbw) {
      const auto [g, consec] = key;
      if (g < 2 || g > world) continue;
      int rpn;
      if (consec) rpn = std::min(g, gpn);
      else rpn = std::clamp(g * gpn / world, 1, g);
      const Placement pl = rpn == g ? Placement::kIntraNode : Placement::kInterNode;
      for (Collective k : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter})
        add(entry(k, g, pl, rpn, from_bandwidth(k, g, bw)));
    }
    // Pipeline send/recv: the two-stage measurement, inside a node or across nodes.
    auto pp2 = hw.p2p_bw.find(2);
    const double p2p_bw = pp2 != hw.p2p_bw.end() ? pp2->second : hw.p2p_bw.begin()->second;
    if (nodes == 1) add(entry(Collective::kSendRecv, 2, Placement::kIntraNode, 2, from_bandwidth(Collective::kSendRecv, 2, p2p_bw)));
    else add(entry(Collective::kSendRecv, 2, Placement::kInterNode, 1, from_bandwidth(Collective::kSendRecv, 2, p2p_bw)));

    out.overlap.compute_slowdown = hw.overlap_coe;
    out.overlap.comm_slowdown = 1.0;
    out.overlap.group_size = gpn;
    out.skipped = p.notes;
    out.skipped.push_back("compute sharing: not in Galvatron's profiles (one GPU per rank)");
    Status v = validate(out);
    if (!v.ok()) throw InputError("galvatron profiles -> hardware profile: " + v.error().message);
    return out;
  });
  return r;
}

Result<ModelProfile> to_model_profile(const Profiles& p, const ModelSpec& model, const ClusterSpec& cluster) {
  return catch_errors([&]() -> ModelProfile {
    require(model.groups.size() <= p.compute.layer_types.size(),
            p.compute.path + ": " + std::to_string(p.compute.layer_types.size()) + " layer types for a model with " +
                std::to_string(model.groups.size()) + " layer groups");
    AnalyticOptions ao;
    ao.framework_overhead = false;  // GPU time only: used for ratios between tp degrees
    const AnalyticCostModel analytic(ao);
    const int seq = p.compute.seq;
    const double ms = 1e-3;

    ModelProfile out;
    out.model = model;
    out.device = "cuda";
    out.device_name = cluster.gpu.name;
    out.hostname = "galvatron-profiles";
    out.threads = 1;
    // Galvatron's runtime overlaps gradient reduction with backward (its overlap coefficient is
    // measured for that).
    out.runtime.grad_sync_overlaps_backward = true;
    out.runtime.dtype = p.precision;

    for (size_t gi = 0; gi < model.groups.size(); ++gi) {
      const LayerShape& shape = model.groups[gi].shape;
      const TimeCurve& curve = p.compute.layer_types[gi];
      const LayerMemory& mem = p.memory.layer_types[gi];
      LayerProfile lp;
      lp.group = model.groups[gi].name;
      lp.shape = shape;
      for (const auto& [t, act] : mem.act_per_sample_mb) {
        if (!tp_fits(shape, t)) continue;
        for (const auto& [b, per_sample] : curve.ms_per_sample) {
          const double base = analytic_layer_compute(analytic, model, cluster, static_cast<int>(gi), 1, b, seq);
          const double ratio =
              t == 1 || base <= 0 ? 1.0
                                  : analytic_layer_compute(analytic, model, cluster, static_cast<int>(gi), t, b, seq) / base;
          const double fwd = per_sample * b * ms * (t == 1 ? 1.0 : ratio);
          PhaseSample s;
          s.tp = t;
          s.micro_batch = b;
          s.seq = seq;
          s.forward_s = fwd;
          s.backward_s = 2 * fwd;  // Galvatron's bct_fct_coe: backward = 2 x forward
          s.activation_bytes = act * b * kMiB;
          lp.samples.push_back(s);
          PhaseSample f = s;
          f.recompute = Recompute::kFull;
          f.backward_s = 3 * fwd;  // + the recomputed forward
          f.activation_bytes = mem.checkpoint_mb * b * kMiB / t;  // the layer input, sequence-split
          lp.samples.push_back(f);
        }
      }
      out.layers.push_back(std::move(lp));
    }

    // Embedding and LM head: Galvatron times them together ("other"); split by weft's analytic
    // ratio of embedding to head+loss time; activations from the first / last stage measurements.
    const TimeCurve& other = p.compute.other;
    for (const auto& [t, act_first] : p.memory.pp_first.activation_mb) {
      if (model.vocab % t != 0) continue;
      auto last_it = p.memory.pp_last.activation_mb.find(t);
      if (last_it == p.memory.pp_last.activation_mb.end()) continue;
      for (const auto& [b, per_sample] : other.ms_per_sample) {
        const auto [e1, h1] = analytic_edges(analytic, model, cluster, 1, b, seq);
        const auto [et, ht] = analytic_edges(analytic, model, cluster, t, b, seq);
        const double scale = (e1 + h1) > 0 && t > 1 ? (et + ht) / (e1 + h1) : 1.0;
        const double share = (et + ht) > 0 ? std::clamp(et / (et + ht), 0.01, 0.99) : 0.1;
        const double total = per_sample * b * ms * scale;
        PhaseSample e;
        e.tp = t;
        e.micro_batch = b;
        e.seq = seq;
        e.forward_s = total * share;
        e.backward_s = 2 * e.forward_s;
        e.activation_bytes = act_first * b * kMiB;
        out.embedding.push_back(e);
        PhaseSample h = e;
        h.forward_s = total * (1 - share);
        h.backward_s = 2 * h.forward_s;
        h.activation_bytes = last_it->second * b * kMiB;
        out.head.push_back(h);
      }
    }
    out.skipped.push_back("backward times: 2 x the measured forward (Galvatron profiles forward only)");
    out.skipped.push_back("tp > 1 compute: the tp = 1 measurement scaled by weft's analytic tp speed-up");
    out.skipped.push_back("selective recompute: not in Galvatron's profiles");
    Status v = validate(out);
    if (!v.ok()) throw InputError("galvatron profiles -> model profile: " + v.error().message);
    return out;
  });
}

Result<CalibratedFromGalvatron> make_calibrated_model(const Profiles& p, const ModelSpec& model,
                                                      const ClusterSpec& cluster, AnalyticOptions base) {
  auto hw = to_hardware_profile(p, cluster);
  if (!hw.ok()) return hw.error();
  auto mp = to_model_profile(p, model, cluster);
  if (!mp.ok()) return mp.error();
  auto cl = cluster_from_hardware_profile(*hw, &cluster);
  if (!cl.ok()) return cl.error().with_context("galvatron profiles");
  CalibratedFromGalvatron out;
  out.cluster = *cl;
  out.cluster.name = cluster.name;
  out.cluster.gpu.memory_gib = cluster.gpu.memory_gib;
  out.model = std::make_unique<CalibratedCostModel>(*hw, *mp, model, out.cluster, base);
  return out;
}

}  // namespace weft::galvatron
