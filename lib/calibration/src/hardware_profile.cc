#include "weft/calibration/hardware_profile.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "profile_file.h"
#include "weft/core/format.h"

namespace weft {

namespace {

constexpr const char* kFormat = "weft-hardware-profile";

Result<Placement> placement_from_string(const std::string& s) {
  if (s == "intra_node") return Placement::kIntraNode;
  if (s == "inter_node") return Placement::kInterNode;
  return Error{ErrorKind::kBadInput, "expected intra_node or inter_node, got \"" + s + "\""};
}

// Per-byte slope of the fitted line for an entry (seconds per byte of per-rank buffer).
double fitted_slope(const CollectiveEntry& e) {
  if (e.fit.bus_gbps <= 0) return 0;
  return bus_factor(e.kind, e.group_size) / (e.fit.bus_gbps * 1e9);
}

}  // namespace

const char* profile_name(Collective k) {
  switch (k) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kSendRecv: return "p2p";
  }
  return "?";
}

Result<Collective> collective_from_profile_name(const std::string& s) {
  for (Collective k : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                       Collective::kAllToAll, Collective::kSendRecv}) {
    if (s == profile_name(k)) return k;
  }
  return Error{ErrorKind::kBadInput,
               "expected all_reduce, all_gather, reduce_scatter, all_to_all or p2p, got \"" + s + "\""};
}

const char* to_string(Placement p) { return p == Placement::kIntraNode ? "intra_node" : "inter_node"; }

AlphaBeta fit_alpha_beta(Collective kind, int group_size, const std::vector<CollectiveSample>& samples) {
  AlphaBeta out;
  if (samples.empty()) return out;
  const double f = bus_factor(kind, group_size);
  // Weighted least squares of t = a + b x with weights 1/t^2: minimises the relative error, so the
  // small (latency-bound) sizes weigh as much as the large (bandwidth-bound) ones.
  double sw = 0, sx = 0, st = 0, sxx = 0, sxt = 0, mean = 0;
  for (const auto& s : samples) {
    const double x = f * s.bytes, t = s.seconds;
    const double w = t > 0 ? 1.0 / (t * t) : 1.0;
    sw += w, sx += w * x, st += w * t, sxx += w * x * x, sxt += w * x * t;
    mean += t;
  }
  mean /= static_cast<double>(samples.size());
  const double det = sw * sxx - sx * sx;
  double a = mean, b = 0;
  if (samples.size() >= 2 && det > 0) {
    b = (sw * sxt - sx * st) / det;
    a = (st - b * sx) / sw;
  }
  if (b <= 0) {
    out.latency_s = std::max(0.0, mean);
    out.bus_gbps = 0;
    return out;
  }
  if (a < 0) {  // through the origin
    a = 0;
    b = sxx > 0 ? sxt / sxx : 0;
    if (b <= 0) return AlphaBeta{0, 0};
  }
  out.latency_s = a;
  out.bus_gbps = 1.0 / b / 1e9;
  return out;
}

Seconds CollectiveEntry::time(Bytes bytes) const {
  const double s = bytes.value();
  if (s <= 0) return Seconds(0);
  double slope = fitted_slope(*this);
  if (samples.empty()) return Seconds(fit.latency_s + slope * s);
  const auto& lo = samples.front();
  const auto& hi = samples.back();
  if (s >= lo.bytes && s <= hi.bytes) {
    for (size_t i = 0; i + 1 < samples.size(); ++i) {
      const auto& a = samples[i];
      const auto& b = samples[i + 1];
      if (s >= a.bytes && s <= b.bytes) {
        const double u = b.bytes > a.bytes ? (s - a.bytes) / (b.bytes - a.bytes) : 0.0;
        return Seconds(a.seconds + u * (b.seconds - a.seconds));
      }
    }
    return Seconds(lo.seconds);  // one sample, s == its size
  }
  if (slope <= 0 && samples.size() >= 2) {
    const auto& a = s > hi.bytes ? samples[samples.size() - 2] : samples[0];
    const auto& b = s > hi.bytes ? samples.back() : samples[1];
    slope = std::max(0.0, (b.seconds - a.seconds) / (b.bytes - a.bytes));
  }
  if (s > hi.bytes) {
    if (slope <= 0) return Seconds(hi.seconds * s / hi.bytes);
    return Seconds(hi.seconds + (s - hi.bytes) * slope);
  }
  const double down = lo.seconds - (lo.bytes - s) * slope;
  return Seconds(std::min(lo.seconds, std::max(fit.latency_s, down)));
}

const CollectiveEntry* HardwareProfile::find(Collective kind, int group_size, Placement placement,
                                             int ranks_per_node) const {
  const CollectiveEntry* best = nullptr;
  for (const auto& e : collectives) {
    if (e.kind != kind || e.group_size != group_size || e.placement != placement) continue;
    if (!best || (ranks_per_node > 0 &&
                  std::abs(e.ranks_per_node - ranks_per_node) < std::abs(best->ranks_per_node - ranks_per_node))) {
      best = &e;
    }
  }
  return best;
}

double HardwareProfile::sharing_slowdown(int ranks) const {
  ranks = std::max(1, ranks);
  if (sharing.empty()) return 1.0;
  // (1, 1.0) is implied unless measured: on virtual nodes of one machine one rank per node still
  // shares the machine with the other nodes' ranks.
  int r0 = 1;
  double s0 = 1.0;
  for (const auto& p : sharing) {
    if (p.ranks == ranks) return p.slowdown;
    if (p.ranks > ranks) {
      const double u = static_cast<double>(ranks - r0) / static_cast<double>(p.ranks - r0);
      return s0 + u * (p.slowdown - s0);
    }
    r0 = p.ranks;
    s0 = p.slowdown;
  }
  // Beyond the largest measured count: the same per-rank share of the node.
  return s0 * static_cast<double>(ranks) / static_cast<double>(r0);
}

Status validate(const HardwareProfile& p) {
  auto fail = [](const std::string& m) { return Status(Error{ErrorKind::kBadInput, m}); };
  if (p.format_version != kHardwareProfileVersion)
    return fail("format_version: expected " + std::to_string(kHardwareProfileVersion) + ", got " +
                std::to_string(p.format_version));
  const MachineFacts& m = p.machine;
  if (m.world_size < 1) return fail("machine.world_size: must be >= 1, got " + std::to_string(m.world_size));
  if (m.ranks_per_node < 1) return fail("machine.ranks_per_node: must be >= 1, got " + std::to_string(m.ranks_per_node));
  if (m.nodes < 1) return fail("machine.nodes: must be >= 1, got " + std::to_string(m.nodes));
  if (m.threads_per_rank < 1)
    return fail("machine.threads_per_rank: must be >= 1, got " + std::to_string(m.threads_per_rank));
  for (auto [key, v] : {std::pair<const char*, double>{"memory_per_rank_gib", m.memory_per_rank_gib},
                        {"runtime_overhead_gib", m.runtime_overhead_gib},
                        {"matmul_tflops", m.matmul_tflops},
                        {"memory_gbps", m.memory_gbps},
                        {"collective_gap_ms", m.collective_gap_ms},
                        {"launch_overhead_us", m.launch_overhead_us}}) {
    if (!(v >= 0) || !std::isfinite(v)) return fail(std::string("machine.") + key + ": must be >= 0, got " + num(v));
  }
  if (!m.rank_slowdown.empty() && static_cast<int>(m.rank_slowdown.size()) != m.world_size)
    return fail("machine.rank_slowdown: " + std::to_string(m.rank_slowdown.size()) + " factors for world_size " +
                std::to_string(m.world_size));
  for (size_t i = 0; i < m.rank_slowdown.size(); ++i)
    if (!(m.rank_slowdown[i] > 0) || !std::isfinite(m.rank_slowdown[i]))
      return fail("machine.rank_slowdown[" + std::to_string(i) + "]: must be a positive factor, got " +
                  num(m.rank_slowdown[i]));
  for (size_t i = 0; i < p.gemm.size(); ++i) {
    const GemmSample& g = p.gemm[i];
    const std::string at = "gemm[" + std::to_string(i) + "]";
    if (g.dtype != "bf16" && g.dtype != "fp32" && g.dtype != "fp16" && g.dtype != "tf32")
      return fail(at + ".dtype: expected bf16, fp16, tf32 or fp32, got \"" + g.dtype + "\"");
    if (g.m < 1 || g.n < 1 || g.k < 1)
      return fail(at + ": m, n and k must be >= 1, got " + std::to_string(g.m) + " x " + std::to_string(g.n) + " x " +
                  std::to_string(g.k));
    if (!(g.seconds > 0) || !std::isfinite(g.seconds)) return fail(at + ".seconds: must be > 0, got " + num(g.seconds));
  }
  for (size_t i = 0; i < p.collectives.size(); ++i) {
    const CollectiveEntry& e = p.collectives[i];
    const std::string at = "collectives[" + std::to_string(i) + "]";
    const int min_size = e.kind == Collective::kSendRecv ? 2 : 2;
    if (e.group_size < min_size)
      return fail(at + ".group_size: must be >= 2, got " + std::to_string(e.group_size));
    if (e.ranks_per_node < 1 || e.ranks_per_node > e.group_size)
      return fail(at + ".ranks_per_node: must be in 1.." + std::to_string(e.group_size) + ", got " +
                  std::to_string(e.ranks_per_node));
    if (e.placement == Placement::kIntraNode && e.ranks_per_node != e.group_size)
      return fail(at + ".ranks_per_node: an intra_node group has all " + std::to_string(e.group_size) +
                  " members on one node, got " + std::to_string(e.ranks_per_node));
    if (e.placement == Placement::kInterNode && e.ranks_per_node == e.group_size)
      return fail(at + ".placement: inter_node but all " + std::to_string(e.group_size) +
                  " members are on one node (ranks_per_node " + std::to_string(e.ranks_per_node) + ")");
    if (e.concurrent_groups < 1)
      return fail(at + ".concurrent_groups: must be >= 1, got " + std::to_string(e.concurrent_groups));
    if (e.samples.empty()) return fail(at + ".samples: needs at least one measured size");
    for (size_t k = 0; k < e.samples.size(); ++k) {
      const auto& s = e.samples[k];
      const std::string sat = at + ".samples[" + std::to_string(k) + "]";
      if (!(s.bytes > 0)) return fail(sat + ".bytes: must be positive, got " + num(s.bytes));
      if (!(s.seconds > 0) || !std::isfinite(s.seconds))
        return fail(sat + ".seconds: must be positive, got " + num(s.seconds));
      if (k > 0 && !(s.bytes > e.samples[k - 1].bytes))
        return fail(sat + ".bytes: sizes must ascend, got " + num(s.bytes) + " after " + num(e.samples[k - 1].bytes));
    }
    if (!(e.fit.latency_s >= 0)) return fail(at + ".fit.latency_us: must be >= 0, got " + num(e.fit.latency_s * 1e6));
    if (!(e.fit.bus_gbps >= 0)) return fail(at + ".fit.bus_gbps: must be >= 0, got " + num(e.fit.bus_gbps));
  }
  if (!(p.overlap.compute_slowdown >= 1.0))
    return fail("overlap.compute_slowdown: must be >= 1, got " + num(p.overlap.compute_slowdown));
  if (!(p.overlap.comm_slowdown >= 1.0))
    return fail("overlap.comm_slowdown: must be >= 1, got " + num(p.overlap.comm_slowdown));
  for (size_t i = 0; i < p.sharing.size(); ++i) {
    const auto& s = p.sharing[i];
    const std::string at = "compute_sharing[" + std::to_string(i) + "]";
    if (s.ranks < 1) return fail(at + ".ranks: must be >= 1, got " + std::to_string(s.ranks));
    if (i > 0 && s.ranks <= p.sharing[i - 1].ranks)
      return fail(at + ".ranks: counts must ascend, got " + std::to_string(s.ranks) + " after " +
                  std::to_string(p.sharing[i - 1].ranks));
    if (!(s.slowdown > 0) || !std::isfinite(s.slowdown))
      return fail(at + ".slowdown: must be positive, got " + num(s.slowdown));
  }
  return {};
}

Json to_json(const HardwareProfile& p) {
  const MachineFacts& m = p.machine;
  Json j;
  j["format"] = kFormat;
  j["format_version"] = p.format_version;
  j["machine"] = Json{{"hostname", m.hostname},
                      {"device", m.device},
                      {"device_name", m.device_name},
                      {"backend", m.backend},
                      {"dtype", m.dtype},
                      {"world_size", m.world_size},
                      {"ranks_per_node", m.ranks_per_node},
                      {"nodes", m.nodes},
                      {"threads_per_rank", m.threads_per_rank},
                      {"cores", m.cores},
                      {"memory_per_rank_gib", m.memory_per_rank_gib},
                      {"runtime_overhead_gib", m.runtime_overhead_gib},
                      {"matmul_tflops", m.matmul_tflops},
                      {"memory_gbps", m.memory_gbps},
                      {"collective_gap_ms", m.collective_gap_ms},
                      {"created", m.created}};
  if (!m.rank_slowdown.empty()) j["machine"]["rank_slowdown"] = m.rank_slowdown;
  if (m.launch_overhead_us > 0) j["machine"]["launch_overhead_us"] = m.launch_overhead_us;
  if (!p.gemm.empty()) {
    Json gs = Json::array();
    for (const auto& g : p.gemm)
      gs.push_back(Json{{"dtype", g.dtype}, {"m", g.m}, {"n", g.n}, {"k", g.k}, {"seconds", g.seconds},
                        {"tflops", g.tflops()}});
    j["gemm"] = gs;
  }
  Json cs = Json::array();
  for (const auto& e : p.collectives) {
    Json samples = Json::array();
    for (const auto& s : e.samples) samples.push_back(Json{{"bytes", s.bytes}, {"seconds", s.seconds}});
    cs.push_back(Json{{"kind", profile_name(e.kind)},
                      {"group_size", e.group_size},
                      {"placement", to_string(e.placement)},
                      {"ranks_per_node", e.ranks_per_node},
                      {"concurrent_groups", e.concurrent_groups},
                      {"fit", Json{{"latency_us", e.fit.latency_s * 1e6}, {"bus_gbps", e.fit.bus_gbps}}},
                      {"samples", samples}});
  }
  j["collectives"] = cs;
  j["overlap"] = Json{{"compute_slowdown", p.overlap.compute_slowdown},
                      {"comm_slowdown", p.overlap.comm_slowdown},
                      {"message_bytes", p.overlap.message_bytes},
                      {"group_size", p.overlap.group_size}};
  Json sh = Json::array();
  for (const auto& s : p.sharing) sh.push_back(Json{{"ranks", s.ranks}, {"slowdown", s.slowdown}});
  j["compute_sharing"] = sh;
  j["skipped"] = p.skipped;
  // Derived, for people and for tools that want a cluster spec; the reader recomputes it.
  auto c = cluster_from_hardware_profile(p);
  if (c.ok()) j["cluster"] = to_json(c.value());
  return j;
}

Result<HardwareProfile> hardware_profile_from_json(const Json& j, const std::string& path) {
  return parse_profile<HardwareProfile>(path, [&]() -> Result<HardwareProfile> {
    JsonObj o(j, "");
    o.reject_unknown({"format", "format_version", "machine", "gemm", "collectives", "overlap", "compute_sharing",
                      "skipped", "cluster"});
    const std::string fmt = o.str("format");
    if (fmt != kFormat) o.fail("format", "expected \"" + std::string(kFormat) + "\", got \"" + fmt + "\"");
    HardwareProfile p;
    p.format_version = static_cast<int>(o.integer("format_version"));
    if (p.format_version != kHardwareProfileVersion)
      o.fail("format_version", "this weft reads version " + std::to_string(kHardwareProfileVersion) + ", got " +
                                   std::to_string(p.format_version));
    {
      JsonObj mo = o.obj("machine");
      mo.reject_unknown({"hostname", "device", "device_name", "backend", "dtype", "world_size", "ranks_per_node", "nodes",
                         "threads_per_rank", "cores", "memory_per_rank_gib", "runtime_overhead_gib", "matmul_tflops",
                         "memory_gbps", "collective_gap_ms", "launch_overhead_us", "created", "rank_slowdown"});
      MachineFacts& m = p.machine;
      m.hostname = mo.str_or("hostname", "");
      m.device = mo.str("device");
      m.device_name = mo.str_or("device_name", "");
      m.backend = mo.str_or("backend", "");
      m.dtype = mo.str_or("dtype", "fp32");
      m.world_size = static_cast<int>(mo.integer("world_size"));
      m.ranks_per_node = static_cast<int>(mo.integer("ranks_per_node"));
      m.nodes = static_cast<int>(mo.integer("nodes"));
      m.threads_per_rank = static_cast<int>(mo.integer_or("threads_per_rank", 1));
      m.cores = static_cast<int>(mo.integer_or("cores", 0));
      m.memory_per_rank_gib = mo.number("memory_per_rank_gib");
      m.runtime_overhead_gib = mo.number_or("runtime_overhead_gib", 0);
      m.matmul_tflops = mo.number_or("matmul_tflops", 0);
      m.memory_gbps = mo.number_or("memory_gbps", 0);
      m.collective_gap_ms = mo.number_or("collective_gap_ms", 0);
      m.launch_overhead_us = mo.number_or("launch_overhead_us", 0);
      m.created = mo.str_or("created", "");
      if (mo.has("rank_slowdown")) m.rank_slowdown = mo.array_of_number("rank_slowdown");
    }
    if (o.has("gemm"))
      for (const JsonObj& go : o.array_of_obj("gemm")) {
        go.reject_unknown({"dtype", "m", "n", "k", "seconds", "tflops"});  // tflops: derived, for people
        p.gemm.push_back({go.str("dtype"), go.integer("m"), go.integer("n"), go.integer("k"), go.number("seconds")});
      }
    for (const JsonObj& co : o.array_of_obj("collectives")) {
      co.reject_unknown({"kind", "group_size", "placement", "ranks_per_node", "concurrent_groups", "fit", "samples"});
      CollectiveEntry e;
      auto k = collective_from_profile_name(co.str("kind"));
      if (!k.ok()) co.fail("kind", k.error().message);
      e.kind = k.value();
      e.group_size = static_cast<int>(co.integer("group_size"));
      auto pl = placement_from_string(co.str("placement"));
      if (!pl.ok()) co.fail("placement", pl.error().message);
      e.placement = pl.value();
      e.ranks_per_node = static_cast<int>(co.integer("ranks_per_node"));
      e.concurrent_groups = static_cast<int>(co.integer_or("concurrent_groups", 1));
      for (const JsonObj& so : co.array_of_obj("samples")) {
        so.reject_unknown({"bytes", "seconds"});
        e.samples.push_back({so.number("bytes"), so.number("seconds")});
      }
      if (co.has("fit")) {
        JsonObj fo = co.obj("fit");
        fo.reject_unknown({"latency_us", "bus_gbps"});
        e.fit.latency_s = fo.number("latency_us") * 1e-6;
        e.fit.bus_gbps = fo.number("bus_gbps");
      } else {
        e.fit = fit_alpha_beta(e.kind, e.group_size, e.samples);
      }
      p.collectives.push_back(std::move(e));
    }
    if (o.has("overlap")) {
      JsonObj ov = o.obj("overlap");
      ov.reject_unknown({"compute_slowdown", "comm_slowdown", "message_bytes", "group_size"});
      p.overlap.compute_slowdown = ov.number("compute_slowdown");
      p.overlap.comm_slowdown = ov.number_or("comm_slowdown", 1.0);
      p.overlap.message_bytes = ov.number_or("message_bytes", 0);
      p.overlap.group_size = static_cast<int>(ov.integer_or("group_size", 0));
    }
    if (o.has("compute_sharing")) {
      for (const JsonObj& so : o.array_of_obj("compute_sharing")) {
        so.reject_unknown({"ranks", "slowdown"});
        p.sharing.push_back({static_cast<int>(so.integer("ranks")), so.number("slowdown")});
      }
    }
    if (o.has("skipped")) p.skipped = o.array_of_str("skipped");
    return p;
  });
}

Result<HardwareProfile> read_hardware_profile(const std::string& path) {
  return read_profile_file<HardwareProfile>(path, hardware_profile_from_json);
}

Status write_hardware_profile(const std::string& path, const HardwareProfile& p) {
  return write_validated_profile(path, p);
}

Result<ClusterSpec> cluster_from_hardware_profile(const HardwareProfile& p, const ClusterSpec* base) {
  const CollectiveOptions dflt;
  ClusterSpec c;
  if (base) c = *base;
  const MachineFacts& m = p.machine;
  c.name = "measured" + (m.hostname.empty() ? std::string() : "-" + m.hostname);
  c.nodes = m.nodes;
  c.gpus_per_node = m.ranks_per_node;
  if (!m.device_name.empty()) c.gpu.name = m.device_name;
  else if (!base) c.gpu.name = m.device;
  if (m.matmul_tflops > 0) {
    c.gpu.tflops_fp32 = c.gpu.tflops_tf32 = c.gpu.tflops_bf16 = c.gpu.tflops_fp16 = m.matmul_tflops;
    if (!base) c.gpu.tflops_fp8 = 0;
  }
  if (m.memory_per_rank_gib > 0) c.gpu.memory_gib = m.memory_per_rank_gib;
  if (m.memory_gbps > 0) c.gpu.hbm_gbps = m.memory_gbps;

  // The widest measured all-reduce of each placement. A table whose time did not grow with the
  // size (no fitted bandwidth) is read as latency = its fastest sample and bandwidth = the
  // largest size over the time it took beyond that.
  std::vector<CollectiveEntry> usable;
  usable.reserve(p.collectives.size());
  for (const auto& e : p.collectives) {
    if (e.kind != Collective::kAllReduce || e.samples.empty()) continue;
    CollectiveEntry u = e;
    if (u.fit.bus_gbps <= 0) {
      double fastest = u.samples.front().seconds;
      for (const auto& s : u.samples) fastest = std::min(fastest, s.seconds);
      const auto& big = u.samples.back();
      const double extra = big.seconds - fastest > 0 ? big.seconds - fastest : big.seconds;
      u.fit.latency_s = big.seconds - fastest > 0 ? fastest : 0.0;
      u.fit.bus_gbps = bus_factor(u.kind, u.group_size) * big.bytes / extra / 1e9;
    }
    usable.push_back(std::move(u));
  }
  auto widest = [&](Placement pl) {
    const CollectiveEntry* best = nullptr;
    for (const auto& e : usable) {
      if (e.placement != pl || e.fit.bus_gbps <= 0) continue;
      if (!best || e.group_size > best->group_size) best = &e;
    }
    return best;
  };
  const CollectiveEntry* intra = widest(Placement::kIntraNode);
  const CollectiveEntry* inter = widest(Placement::kInterNode);
  bool have_intra = base != nullptr;
  // The analytic model's latency is affine in a link's latency_us (a fixed call cost plus hops);
  // solve for the latency_us that gives the fitted alpha, whatever the hop count it charges.
  auto solve_latency = [&](const CollectiveEntry& e, LinkSpec ClusterSpec::*link) {
    CommGroup g;
    g.size = e.group_size;
    g.ranks_per_node = e.ranks_per_node;
    const Bytes one(1);
    ClusterSpec probe = c;
    (probe.*link).latency_us = 0;
    const double f0 = collective_time(e.kind, one, g, probe, dflt).value();
    (probe.*link).latency_us = 1;
    const double per_us = collective_time(e.kind, one, g, probe, dflt).value() - f0;
    const double target = e.fit.latency_s + bus_factor(e.kind, e.group_size) * 1.0 / (e.fit.bus_gbps * 1e9);
    (c.*link).latency_us = per_us > 0 ? std::max(0.0, (target - f0) / per_us) : 0.0;
  };
  if (intra) {
    c.intra.gbps = intra->fit.bus_gbps / dflt.intra_efficiency;
    solve_latency(*intra, &ClusterSpec::intra);
    have_intra = true;
  }
  if (!have_intra)
    return Error{ErrorKind::kBadInput,
                 "hardware profile: no intra_node all_reduce table, and no base cluster to take the intra-node link "
                 "from"};
  if (inter) {
    const double per_rank = inter->fit.bus_gbps / std::max(1, inter->ranks_per_node);
    c.inter.gbps = per_rank / dflt.inter_efficiency;
    solve_latency(*inter, &ClusterSpec::inter);
  } else if (!base) {
    c.inter.gbps = c.intra.gbps * dflt.intra_efficiency / dflt.inter_efficiency;
    c.inter.latency_us = c.intra.latency_us;
  }
  if (c.gpu.memory_gib <= 0 || c.gpu.peak(DType::kFp32).value() <= 0 || c.gpu.hbm_gbps <= 0) {
    if (!base)
      return Error{ErrorKind::kBadInput,
                   "hardware profile: machine.memory_per_rank_gib, matmul_tflops and memory_gbps must be measured "
                   "(positive) to make a cluster without a base cluster; got " +
                       num(m.memory_per_rank_gib) + ", " + num(m.matmul_tflops) + ", " + num(m.memory_gbps)};
  }
  Status st = validate(c);
  if (!st.ok()) return st.error().with_context("cluster from hardware profile");
  return c;
}

}  // namespace weft
