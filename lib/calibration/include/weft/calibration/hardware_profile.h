// The hardware profile ("weft-hardware-profile" v1, docs/profiles.md): what `weft profile hardware`
// measured on a machine. Per collective kind, group size and placement (inside a node / spanning
// nodes) a table of message size -> time with its fitted latency + bandwidth line, the slow-down of
// compute while communication overlaps it, the slow-down of compute when several ranks of one node
// compute at once, and facts about the machine (device, memory, measured matmul and memory rates).
//
// A plain value type with a JSON pair. Readers return an Error naming the file and the key
// ("hw.json: collectives[3].samples[2].seconds: expected a number, got \"x\"").
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/json.h"
#include "weft/core/units.h"
#include "weft/cost/collectives.h"
#include "weft/spec/cluster.h"

namespace weft {

inline constexpr int kHardwareProfileVersion = 1;

// Profile spelling of a collective: all_reduce, all_gather, reduce_scatter, all_to_all, p2p.
const char* profile_name(Collective k);
Result<Collective> collective_from_profile_name(const std::string& s);

enum class Placement { kIntraNode, kInterNode };  // "intra_node" / "inter_node" (spans nodes)
const char* to_string(Placement p);

// One measured point. `bytes` is the per-rank buffer in the convention of weft/cost/collectives.h
// (nccl-tests): all-reduce the reduced buffer, all-gather the gathered output, reduce-scatter the
// input, all-to-all the send buffer, p2p the message. `seconds` is the mean time of one call: with
// a compute gap before each call (MachineFacts::collective_gap_ms > 0, as training calls them) the
// time each rank spends inside the call, averaged over ranks; back to back, the slowest rank's mean.
struct CollectiveSample {
  double bytes = 0;
  double seconds = 0;
  bool operator==(const CollectiveSample&) const = default;
};

// t(S) = latency + bus_factor(kind, n) * S / bus_bandwidth  (the analytic model's own form).
struct AlphaBeta {
  double latency_s = 0;     // alpha, >= 0
  double bus_gbps = 0;      // bus bandwidth, GB/s (10^9 bytes/s); 0 when not determined
  bool operator==(const AlphaBeta&) const = default;
};

// Least-squares fit of t = alpha + x / B over the samples, x = bus_factor(kind, n) * bytes. A
// negative alpha is clamped to 0 and B refitted through the origin; a non-positive slope (time not
// growing with size) gives bus_gbps 0 and alpha = the mean time. Needs at least one sample.
AlphaBeta fit_alpha_beta(Collective kind, int group_size, const std::vector<CollectiveSample>& samples);

struct CollectiveEntry {
  Collective kind = Collective::kAllReduce;
  int group_size = 2;
  Placement placement = Placement::kIntraNode;
  int ranks_per_node = 2;          // members of one group on one node (== group_size inside a node)
  int concurrent_groups = 1;       // groups of this shape that ran at the same time while measured
  std::vector<CollectiveSample> samples;  // ascending bytes, distinct
  AlphaBeta fit;
  bool operator==(const CollectiveEntry&) const = default;

  // Time of one call with per-rank buffer `bytes` (docs/profiles.md "Interpolation"):
  //   inside [smallest, largest] measured size: linear between the two neighbouring samples;
  //   above the largest: the largest sample's time + (bytes - largest) * bus_factor / bus_bandwidth;
  //   below the smallest: the smallest sample's time - (smallest - bytes) * bus_factor / bandwidth,
  //   but never below the fitted latency nor above the smallest sample's time.
  // Zero bytes cost nothing.
  Seconds time(Bytes bytes) const;
};

struct OverlapFacts {
  double compute_slowdown = 1.0;   // compute time with a collective in flight / alone (>= 1)
  double comm_slowdown = 1.0;      // collective time with compute running / alone (>= 1)
  double message_bytes = 0;        // all-reduce buffer used for the measurement
  int group_size = 0;              // ranks of the all-reduce (0: not measured)
  bool operator==(const OverlapFacts&) const = default;
};

// Compute time of one rank when `ranks` ranks of every node compute at once, over its time when it
// computes alone on the whole job. 1.0 on a machine with one accelerator per rank; on a CPU with
// fewer cores than ranks it grows; on virtual nodes of one machine (--gpus-per-node) the other
// virtual nodes' ranks compute at the same time, so even ranks = 1 may be above 1.
struct ComputeSharing {
  int ranks = 1;
  double slowdown = 1.0;
  bool operator==(const ComputeSharing&) const = default;
};

// A measured rank at least this much slower than the median is planned as a straggler: below it
// the difference is within the repeatability of the measurement (docs/profiles.md, "Per-rank speed").
inline constexpr double kMeasuredStraggler = 1.1;

struct MachineFacts {
  std::string hostname;
  std::string device = "cpu";      // "cpu" or "cuda"
  std::string device_name;         // e.g. "AMD EPYC (2 cores)" or "NVIDIA H100 80GB HBM3"
  std::string backend = "gloo";    // c10d backend the collectives ran on
  std::string dtype = "fp32";      // element type of the measured buffers and matmuls
  int world_size = 1;              // ranks of the job that measured
  int ranks_per_node = 1;          // ranks per node (declared with --gpus-per-node on one machine)
  int nodes = 1;
  int threads_per_rank = 1;        // intra-op threads of each rank
  int cores = 0;                   // CPU cores the machine reports (hardware concurrency)
  double memory_per_rank_gib = 0;  // device memory per rank (CPU: physical memory / ranks per node)
  double runtime_overhead_gib = 0; // resident memory of a rank with the runtime loaded and its
                                   // process groups built, before any model
  double matmul_tflops = 0;        // measured square-GEMM rate of one rank alone, dtype above
  double memory_gbps = 0;          // measured streaming rate (read + write) of one rank alone
  double collective_gap_ms = 0;    // compute before each timed collective call (0: back to back)
  // A GPU (device "cuda"): host time per eager operator, launching back-to-back tiny kernels that
  // the GPU finishes faster than the host issues them (0: not measured).
  double launch_overhead_us = 0;
  // Per rank (JSON "rank_slowdown", absent when not measured): the time of the same GEMM workload
  // on that rank over a healthy rank's, the lower median (Malleus's straggler quantification; 1 =
  // healthy, 2 = a straggler at half speed). `weft plan` / `weft estimate` plan a cluster of this
  // many GPUs with the factors of at least kMeasuredStraggler as stragglers (docs/profiles.md).
  std::vector<double> rank_slowdown;
  std::string created;             // UTC time of the measurement, ISO 8601
  bool operator==(const MachineFacts&) const = default;
};

// One GEMM shape timed on one device: C[m, n] = A[m, k] B[k, n] in `dtype` ("bf16", "fp32"), the
// median time of one call; tflops = 2 m n k / seconds / 1e12.
struct GemmSample {
  std::string dtype;
  int64_t m = 0, n = 0, k = 0;
  double seconds = 0;
  double tflops() const { return 2.0 * static_cast<double>(m) * n * k / seconds / 1e12; }
  bool operator==(const GemmSample&) const = default;
};

struct HardwareProfile {
  int format_version = kHardwareProfileVersion;
  MachineFacts machine;
  std::vector<GemmSample> gemm;          // GEMM rate by shape (a GPU profile); empty: not measured
  std::vector<CollectiveEntry> collectives;
  OverlapFacts overlap;
  std::vector<ComputeSharing> sharing;   // ascending ranks; empty: not measured
  std::vector<std::string> skipped;      // what was not measured and why (one line each)
  bool operator==(const HardwareProfile&) const = default;

  // The entry for (kind, group size, placement); when several match, the one whose ranks_per_node
  // is closest to `ranks_per_node` (0: any). nullptr when the profile has none.
  const CollectiveEntry* find(Collective kind, int group_size, Placement placement, int ranks_per_node = 0) const;
  // Slow-down of one rank's compute when `ranks` ranks of each node compute at once: linear between
  // measured counts (and from an implied 1.0 at one rank when that is not measured), the largest
  // measured count's per-rank share beyond it (slowdown * ranks / max); 1.0 when not measured.
  double sharing_slowdown(int ranks) const;
};

// Checks ranges and consistency (positive sizes, ascending samples, placement vs ranks_per_node,
// slow-downs >= 1 ...); messages name the field and the numbers.
Status validate(const HardwareProfile& p);

Json to_json(const HardwareProfile& p);
// `path` names the source in error messages (a file name, or "hardware profile").
Result<HardwareProfile> hardware_profile_from_json(const Json& j, const std::string& path = "hardware profile");
Result<HardwareProfile> read_hardware_profile(const std::string& path);
Status write_hardware_profile(const std::string& path, const HardwareProfile& p);

// A cluster spec whose link figures make the analytic collective model (weft/cost/collectives.h
// with default CollectiveOptions) reproduce the profile's fitted bus bandwidths and latencies
// (docs/profiles.md "From a profile to a cluster"):
//   intra_node.gbps   = the largest intra-node all-reduce group's bus bandwidth / intra_efficiency
//   inter_node.gbps   = (spanning all-reduce bus bandwidth / ranks per node) / inter_efficiency
//   latency_us        = the link latency at which the analytic model's latency (a fixed call cost
//                       plus the hops it charges) equals that fit's latency (>= 0)
//   gpu               = device name, measured matmul rate for every dtype, memory per rank, measured
//                       memory rate
// Fields the profile has no measurement for are taken from `base` when given; without a base an
// unmeasured inter-node link copies the intra-node one. Errors name what is missing.
Result<ClusterSpec> cluster_from_hardware_profile(const HardwareProfile& p, const ClusterSpec* base = nullptr);

}  // namespace weft
