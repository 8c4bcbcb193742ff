// `weft profile hardware` and `weft profile model`: measure the machine and the runtime's own layers
// and write the profiles weft's calibrated cost model reads (weft/calibration, docs/profiles.md).
// Torch-free header: the CLI includes it without torch's include paths.
#pragma once

#include <string>
#include <vector>

#include "weft/core/error.h"

namespace weft::profiler {

struct HardwareOptions {
  std::string out;               // hardware profile to write (rank 0 writes it)
  std::string cluster_out;       // also write the derived cluster spec here (optional)
  // Ranks per node. 0: LOCAL_WORLD_SIZE (the ranks launched on this machine), or the world when it
  // is not set. On one machine a smaller value declares virtual nodes, so that groups spanning
  // "nodes" exist and are measured (over the same transport: see docs/profiles.md).
  int gpus_per_node = 0;
  double min_bytes = 4096;       // smallest message, bytes per rank
  double max_bytes = 16 << 20;   // largest message (skipped where memory is short)
  double time_per_point_s = 0.15;// target measuring time per message size
  // Compute (milliseconds of GEMMs) each rank runs before every timed call, as training computes
  // between collectives: the call then includes waking the communication thread and waiting for
  // the group's later members, which back-to-back calls hide. The sample is the mean over ranks.
  // 0: back to back, the slowest rank's mean.
  double gap_ms = 2;
  int threads = 1;               // intra-op threads per rank (as `weft train --threads`)
  double timeout_s = 120;        // collective timeout
  std::string progress = "auto"; // auto (a bar on a terminal) | on | off
  // Test hook, as `weft train --slow`: "RANK:FACTOR" counts that rank's per-rank speed workload
  // FACTOR times as long, so the profile names it a straggler. "": none.
  std::string slow;
  // cpu: the above. cuda: one process measures GPU 0 alone: GEMM rate by shape in bf16 and fp32,
  // memory bandwidth, kernel launch overhead and the runtime's device memory overhead (collectives
  // between GPUs are not measured: an error with more than one rank). Needs a CUDA build.
  std::string device = "cpu";
};

// Runs one rank of the measurement (under `weft launch -n N`, torchrun, srun or mpirun). Every rank
// must call it with the same options. Errors: kBadInput (options, environment), kIo (writing the
// file), kRuntime (a collective failed or timed out).
Status profile_hardware(const HardwareOptions& o);

struct ModelOptions {
  std::string model;             // preset, weft model JSON or HF config.json
  std::string out;               // model profile to write
  std::vector<int> tp = {1};     // tensor-parallel degrees (the shard one rank holds)
  std::vector<int> seq = {64, 128};
  std::vector<int> micro_batch = {1, 2, 4};
  std::vector<std::string> recompute = {"none", "selective", "full"};
  int threads = 1;
  std::string device = "cpu";    // cpu | cuda (device 0; needs a CUDA build of PyTorch)
  std::string dtype = "fp32";    // fp32 | bf16 (parameters and activations; bf16 needs cuda)
  double time_per_point_s = 0.3; // target measuring time per (size, phase)
  int min_iters = 3;             // timed repetitions at least (after one warm-up)
  // Fraction of the memory available when a point starts that it may use; points needing more are
  // skipped and recorded.
  double memory_fraction = 0.7;
  std::string progress = "auto";
};

// Measures in this process alone (no process group). Errors name the flag and the numbers.
Status profile_model(const ModelOptions& o);

}  // namespace weft::profiler
