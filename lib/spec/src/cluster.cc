#include "weft/spec/cluster.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "weft/core/enum_names.h"
#include "weft/core/format.h"

namespace weft {

namespace {

constexpr EnumName<DType> kDTypeNames[] = {{DType::kFp32, "fp32"},
                                           {DType::kTf32, "tf32"},
                                           {DType::kBf16, "bf16"},
                                           {DType::kFp16, "fp16"},
                                           {DType::kFp8, "fp8"}};

}  // namespace

const char* to_string(DType d) { return enum_name(kDTypeNames, d); }

Result<DType> dtype_from_string(const std::string& s) { return enum_from_name(kDTypeNames, s, "dtype"); }

double dtype_bytes(DType d) {
  switch (d) {
    case DType::kFp32:
    case DType::kTf32: return 4.0;
    case DType::kBf16:
    case DType::kFp16:
    case DType::kFp8: return 2.0;  // fp8 GEMM inputs are cast per op; stored tensors stay 16-bit
  }
  return 2.0;
}

FlopsPerSecond GpuSpec::peak(DType d) const {
  switch (d) {
    case DType::kFp32: return TFLOPs(tflops_fp32);
    case DType::kTf32: return TFLOPs(tflops_tf32);
    case DType::kBf16: return TFLOPs(tflops_bf16);
    case DType::kFp16: return TFLOPs(tflops_fp16);
    case DType::kFp8: return TFLOPs(tflops_fp8);
  }
  return TFLOPs(tflops_bf16);
}

bool GpuSpec::runs(DType d) const { return peak(d).value() > 0; }

std::string GpuSpec::dtypes() const {
  std::string out;
  for (DType d : {DType::kFp32, DType::kTf32, DType::kBf16, DType::kFp16, DType::kFp8})
    if (runs(d)) out += (out.empty() ? "" : ", ") + std::string(to_string(d));
  return out.empty() ? "none" : out;
}

Status check_dtype(const GpuSpec& gpu, DType d, const std::string& field) {
  if (gpu.runs(d)) return {};
  return Error{ErrorKind::kBadInput, field + ": " + gpu.name + " has no " + to_string(d) + " (it runs " + gpu.dtypes() + ")"};
}

Status validate(const ClusterSpec& c) {
  auto fail = [](const std::string& msg) { return Status(Error{ErrorKind::kBadInput, msg}); };
  if (c.nodes <= 0) return fail("nodes: must be positive, got " + std::to_string(c.nodes));
  if (c.gpus_per_node <= 0) return fail("gpus_per_node: must be positive, got " + std::to_string(c.gpus_per_node));
  if (c.gpu.memory_gib <= 0) return fail("gpu.memory_gib: must be positive, got " + num(c.gpu.memory_gib));
  if (c.gpu.tflops_bf16 <= 0 && c.gpu.tflops_fp16 <= 0 && c.gpu.tflops_fp32 <= 0)
    return fail("gpu.tflops: at least one of bf16, fp16, fp32 must be positive");
  if (c.gpu.hbm_gbps <= 0) return fail("gpu.hbm_gbps: must be positive, got " + num(c.gpu.hbm_gbps));
  if (c.intra.gbps <= 0) return fail("intra_node.gbps: must be positive, got " + num(c.intra.gbps));
  if (c.nodes > 1 && c.inter.gbps <= 0)
    return fail("inter_node.gbps: must be positive for " + std::to_string(c.nodes) + " nodes, got " + num(c.inter.gbps));
  if (c.intra.latency_us < 0 || c.inter.latency_us < 0) return fail("latency_us: must be >= 0");
  return {};
}

Json to_json(const ClusterSpec& c) {
  Json j;
  j["name"] = c.name;
  j["nodes"] = c.nodes;
  j["gpus_per_node"] = c.gpus_per_node;
  j["gpu"] = {{"name", c.gpu.name},
              {"tflops",
               {{"fp32", c.gpu.tflops_fp32},
                {"tf32", c.gpu.tflops_tf32},
                {"bf16", c.gpu.tflops_bf16},
                {"fp16", c.gpu.tflops_fp16},
                {"fp8", c.gpu.tflops_fp8}}},
              {"memory_gib", c.gpu.memory_gib},
              {"hbm_gbps", c.gpu.hbm_gbps}};
  j["intra_node"] = {{"gbps", c.intra.gbps}, {"latency_us", c.intra.latency_us}};
  j["inter_node"] = {{"gbps", c.inter.gbps}, {"latency_us", c.inter.latency_us}};
  return j;
}

Result<ClusterSpec> cluster_from_json(const Json& j, const std::string& path) {
  return catch_errors([&]() -> Result<ClusterSpec> {
    JsonObj o(j, path);
    o.reject_unknown({"name", "nodes", "gpus_per_node", "gpu", "intra_node", "inter_node"});
    ClusterSpec c;
    c.name = o.str_or("name", "custom");
    c.nodes = static_cast<int>(o.integer("nodes"));
    c.gpus_per_node = static_cast<int>(o.integer("gpus_per_node"));
    JsonObj g = o.obj("gpu");
    g.reject_unknown({"name", "tflops", "memory_gib", "hbm_gbps"});
    c.gpu.name = g.str_or("name", "gpu");
    JsonObj t = g.obj("tflops");
    t.reject_unknown({"fp32", "tf32", "bf16", "fp16", "fp8"});
    c.gpu.tflops_fp32 = t.number_or("fp32", 0);
    c.gpu.tflops_tf32 = t.number_or("tf32", 0);
    c.gpu.tflops_bf16 = t.number_or("bf16", 0);
    c.gpu.tflops_fp16 = t.number_or("fp16", 0);
    c.gpu.tflops_fp8 = t.number_or("fp8", 0);
    c.gpu.memory_gib = g.number("memory_gib");
    c.gpu.hbm_gbps = g.number("hbm_gbps");
    auto link = [&](std::string_view key, LinkSpec& l, bool required) {
      if (!o.has(key)) {
        if (required) o.fail(key, "missing required field");
        return;
      }
      JsonObj lo = o.obj(key);
      lo.reject_unknown({"gbps", "latency_us"});
      l.gbps = lo.number("gbps");
      l.latency_us = lo.number_or("latency_us", 0);
    };
    link("intra_node", c.intra, true);
    link("inter_node", c.inter, c.nodes > 1);
    Status st = validate(c);
    if (!st.ok()) return st.error().with_context(path);
    return c;
  });
}

Result<ClusterSpec> apply_overrides(ClusterSpec c, const ClusterOverrides& o) {
  auto bad = [](const std::string& m) { return Error{ErrorKind::kBadInput, m}; };
  if (o.gpus_per_node < 0) return bad("--gpus-per-node: must be positive, got " + std::to_string(o.gpus_per_node));
  if (o.gpus < 0) return bad("--gpus: must be positive, got " + std::to_string(o.gpus));
  if (o.gpus_per_node > 0) {
    const int total = c.total_gpus();
    c.gpus_per_node = o.gpus_per_node;
    if (o.gpus == 0) c.nodes = std::max(1, total / c.gpus_per_node);
  }
  if (o.gpus > 0) {
    if (o.gpus <= c.gpus_per_node) {
      c.gpus_per_node = o.gpus;  // one partial node
      c.nodes = 1;
    } else {
      if (o.gpus % c.gpus_per_node != 0)
        return bad("--gpus: " + std::to_string(o.gpus) + " GPUs do not fill whole nodes of " +
                   std::to_string(c.gpus_per_node) + " GPUs (set --gpus-per-node)");
      c.nodes = o.gpus / c.gpus_per_node;
    }
  }
  if (o.intra_gbps < 0 || o.inter_gbps < 0 || o.memory_gb < 0) return bad("bandwidth and memory overrides must be positive");
  if (o.intra_gbps > 0) c.intra.gbps = o.intra_gbps;
  if (o.inter_gbps > 0) c.inter.gbps = o.inter_gbps;
  if (o.memory_gb > 0) c.gpu.memory_gib = o.memory_gb;
  Status st = validate(c);
  if (!st.ok()) return st.error();
  return c;
}

}  // namespace weft
