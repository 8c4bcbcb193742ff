// Readers for Galvatron's profile files (reference/galvatron/SEARCH_AND_COST_MODEL.md §3) and a
// loader that picks them from a folder by model name, precision, node count and GPUs per node, the
// way Galvatron names them. Every reader throws nothing: errors come back as an Error that names the
// file and the key ("memory_profiling_bf16_llama2-7b_all.json: layertype_0_sp.2048.parameter_size:
// missing required field").
//
// Units are Galvatron's own: times in milliseconds, memory in MB of 2^20 bytes, bandwidths in MB per
// millisecond (bus bandwidth as nccl-tests reports it).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/json.h"

namespace weft::galvatron {

// A measured per-sample forward time as a function of the micro-batch size, for one sequence length.
struct TimeCurve {
  std::map<int, double> ms_per_sample;  // batch size -> forward ms per sample
  int first_batch = 0;                  // the batch of the first key in the file (Galvatron's static mode)
  // Galvatron's static mode: the value of the first matching key in file order.
  double first() const { return ms_per_sample.at(first_batch); }
  // Piecewise-linear in the batch size, clamped at the measured ends.
  double at(double batch) const;
};

// computation_profiling_{precision}_{model}_all.json
struct ComputationProfile {
  std::string path;
  int seq = 0;
  std::vector<TimeCurve> layer_types;  // "layertype_{i}_bsz{b}_seq{s}": forward ms per sample per layer
  TimeCurve other;                     // "layertype_other_bsz{b}_seq{s}": embedding + LM head + loss
};

// Per-layer measured memory of one layer type at one sequence length (memory_profiling_*.json).
struct LayerMemory {
  double parameter_mb = 0;             // fp32 parameter bytes of one layer / 2^20
  std::map<int, double> act_per_sample_mb;  // tp (or Ulysses) degree -> activation MB per sample
  double checkpoint_mb = 0;            // activation MB per sample kept with full recompute
  double act(int tp_sp, const std::string& path) const;  // throws InputError naming path and degree
};

// Embedding / LM head memory by tp degree (model states) and tp_sp degree (activation).
struct OtherMemory {
  std::map<int, double> model_states_mb;
  std::map<int, double> activation_mb;  // per sample
  double states(int tp, const std::string& path) const;
  double act(int tp_sp, const std::string& path) const;
};

// memory_profiling_{precision}_{model}_all.json
struct MemoryProfile {
  std::string path;
  int seq = 0;
  bool sequence_parallel_keys = true;  // the "_sp" keys (profiled with Megatron-SP) were used
  std::vector<LayerMemory> layer_types;
  OtherMemory pp_off, pp_first, pp_last;
};

// A measured collective time table by message size, with Galvatron's least-squares line over it.
struct CollectiveTable {
  std::map<double, double> ms_by_mb;   // message MB -> ms
  double slope = 0, intercept = 0;     // ms = slope * MB + intercept
  // An exact table entry if there is one, else the fitted line.
  double time_ms(double mb) const;
};

// allreduce_bandwidth_*, p2p_bandwidth_*, overlap_coefficient.json, sp_time_*.
struct HardwareTables {
  std::string allreduce_path, p2p_path, overlap_path, sp_time_path;
  int nodes = 1, gpus_per_node = 8;
  // (group size, consecutive ranks) -> bus bandwidth MB/ms. "allreduce_size_{g}_consec_{0|1}".
  std::map<std::pair<int, bool>, double> allreduce_busbw;
  std::map<int, double> p2p_bw;        // pipeline degree -> MB/ms. "pp_size_{k}"
  double overlap_coe = 1.0;            // "overlap_coe", clamped to >= 1
  std::map<int, CollectiveTable> allreduce_ms, all2all_ms;  // group size -> table
  bool has_sp_time = false;
  // Bus bandwidth for a group, or 0 when the file has no such entry.
  double busbw(int group, bool consecutive) const;
};

// Everything one planning run reads, as loaded from a profile folder.
struct Profiles {
  std::string dir;
  std::string model_name;              // model_size of the YAML
  std::string precision;               // "bf16", "fp16" or "fp32"
  ComputationProfile compute;
  MemoryProfile memory;
  HardwareTables hardware;
  std::vector<std::string> notes;      // fall-backs the loader took (e.g. a one-node sp_time table)
  bool mixed_precision() const { return precision != "fp32"; }
};

// Individual readers. `seq` picks the sequence length inside files keyed by it (0: the only one).
Result<ComputationProfile> read_computation_profile(const std::string& path, int seq);
Result<ComputationProfile> computation_profile_from_json(const Json& j, const std::string& path, int seq);
Result<MemoryProfile> read_memory_profile(const std::string& path, int seq);
Result<MemoryProfile> memory_profile_from_json(const Json& j, const std::string& path, int seq);
Result<HardwareTables> read_hardware_tables(const std::string& allreduce_path, const std::string& p2p_path,
                                              const std::string& overlap_path, const std::string& sp_time_path);

struct ProfileQuery {
  std::string model_name;              // e.g. "llama2-7b"
  std::string precision = "bf16";
  int nodes = 1;
  int gpus_per_node = 8;
  int seq = 0;                         // 0: the only sequence length the computation profile holds
};

// File names Galvatron writes (and so looks for).
std::string computation_profile_name(const std::string& precision, const std::string& model);
std::string memory_profile_name(const std::string& precision, const std::string& model);
std::string allreduce_profile_name(int nodes, int gpus_per_node);
std::string p2p_profile_name(int nodes, int gpus_per_node);
std::string sp_time_profile_name(int nodes, int gpus_per_node);

// Loads every profile for q from dir (also looked for in dir/configs and dir/hardware_configs, where
// Galvatron keeps them). Missing files are errors naming the file and the folder, except the sp_time
// table: without one for q's node count the one-node table of the same GPUs per node is used (the
// tensor- and sequence-parallel groups it times live inside one node) and a note says so.
Result<Profiles> load_profiles(const std::string& dir, const ProfileQuery& q);

}  // namespace weft::galvatron
