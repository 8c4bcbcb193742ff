// ClusterSpec: nodes of identical GPUs with a two-level network (NVLink-class inside a node,
// InfiniBand/RoCE-class between nodes). A plain value type with a JSON pair (docs/cluster-spec.md).
#pragma once

#include <string>

#include "weft/core/error.h"
#include "weft/core/json.h"
#include "weft/core/units.h"

namespace weft {

enum class DType { kFp32, kTf32, kBf16, kFp16, kFp8 };
const char* to_string(DType d);
Result<DType> dtype_from_string(const std::string& s);
// Bytes per element of activations/weights stored in this compute dtype (fp8 keeps bf16 storage
// for weights and activations outside the GEMMs; see docs/cost-model.md).
double dtype_bytes(DType d);

struct GpuSpec {
  std::string name;
  // Peak dense tensor-core throughput in TFLOP/s (no sparsity), per the vendor datasheet.
  double tflops_fp32 = 0, tflops_tf32 = 0, tflops_bf16 = 0, tflops_fp16 = 0, tflops_fp8 = 0;
  double memory_gib = 0;   // HBM capacity as the driver reports it, GiB
  double hbm_gbps = 0;     // HBM bandwidth, GB/s
  FlopsPerSecond peak(DType d) const;
  // Whether the GPU computes in d: its datasheet gives a positive peak (a V100 has no bf16, an
  // A100 no fp8).
  bool runs(DType d) const;
  // The dtypes it runs, e.g. "fp32, fp16".
  std::string dtypes() const;
  bool operator==(const GpuSpec&) const = default;
};

struct LinkSpec {
  double gbps = 0;         // unidirectional bandwidth per GPU, GB/s (10^9 bytes/s)
  double latency_us = 0;   // per-message latency of one hop, microseconds
  BytesPerSecond bandwidth() const { return GBps(gbps); }
  Seconds latency() const { return us(latency_us); }
  bool operator==(const LinkSpec&) const = default;
};

struct ClusterSpec {
  std::string name;
  int nodes = 1;
  int gpus_per_node = 8;
  GpuSpec gpu;
  LinkSpec intra;          // inside a node (NVLink / NVSwitch / PCIe)
  LinkSpec inter;          // between nodes (per GPU: node NIC bandwidth / GPUs per node)
  int total_gpus() const { return nodes * gpus_per_node; }
  bool operator==(const ClusterSpec&) const = default;
};

Status validate(const ClusterSpec& c);
// kBadInput unless gpu runs d: "<field>: <gpu> has no bf16 (it runs fp32, fp16)". Weft does not cost
// a dtype on a GPU that cannot run it (its peak would be zero).
Status check_dtype(const GpuSpec& gpu, DType d, const std::string& field);
Json to_json(const ClusterSpec& c);
Result<ClusterSpec> cluster_from_json(const Json& j, const std::string& path = "cluster");

// Applies the CLI overrides (--gpus, --gpus-per-node, --intra-node-gbps, --inter-node-gbps,
// --memory-gb). gpus: total GPUs; nodes = gpus / gpus_per_node, or one partial node when gpus is
// smaller than a node. Zero / negative means "not given". Errors name the flag and numbers.
struct ClusterOverrides {
  int gpus = 0;
  int gpus_per_node = 0;
  double intra_gbps = 0;
  double inter_gbps = 0;
  double memory_gb = 0;    // memory per GPU in GB as GPU vendors and Galvatron count it (2^30 bytes); replaces gpu.memory_gib
};
Result<ClusterSpec> apply_overrides(ClusterSpec c, const ClusterOverrides& o);

}  // namespace weft
