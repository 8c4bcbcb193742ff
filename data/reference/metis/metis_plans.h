// A reader of Metis's published search log beside it (hetero_cost_model.json; README.md names the
// source and its licence) as weft plans on the same devices (cluster.json, model.json). Header only,
// over the spec, plan and search libraries; the reference test (tests/search/metis_test.cc) and the
// bench that prints the comparison (bench/hetero/metis_compare.cc) both read the log through it.
//
// A Metis plan: the device types in stage order (node_sequence), GPUs per stage (device_group),
// [dp, tp] per stage, the number of micro-batches of the global batch, and the layer partition over
// Metis's ten layers (0 the embedding, 1-8 the transformer blocks, 9 the LM head). weft expresses
// those whose stages have equal GPU counts and at least one block each: pp = the stage count, each
// stage's blocks with its own dp and tp (no sequence parallelism, no ZeRO, no recomputation: what
// Metis's Megatron runs), the embedding and head with the first stage's degrees, the node groups in
// Metis's order, 1F1B, and the data-parallel shares weft would give that structure on these devices
// (balance_shares, every device keeping work as in Metis's plans; Metis balances the data across
// unlike devices too).
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/stats.h"
#include "weft/cost/analytic.h"
#include "weft/cost/estimate.h"
#include "weft/core/json.h"
#include "weft/plan/plan.h"
#include "weft/search/hetero.h"
#include "weft/spec/mixed.h"
#include "weft/spec/presets.h"

namespace weft::metis {

struct Row {
  int rank = 0;                      // Metis's rank (1 = its choice)
  double cost_ms = 0;                // Metis's estimate of one iteration
  std::vector<std::string> order;    // device types in stage order ("t4", "a100")
  std::vector<int> gpus;             // GPUs per stage
  std::vector<std::pair<int, int>> dp_tp;  // per stage
  int micro_batches = 0;
  std::vector<int> partition;        // stage s runs Metis layers [partition[s], partition[s+1])
};

struct Log {
  std::vector<Row> rows;             // in Metis's rank order
  int global_batch = 0, seq = 0;
};

inline Log load_log(const std::string& path) {
  const Json j = read_json_file(path);
  Log log;
  log.global_batch = j.at("arguments").at("gbs").get<int>();
  log.seq = j.at("arguments").at("sequence_length").get<int>();
  for (const Json& r : j.at("plans")) {
    Row row;
    row.rank = r.at("rank").get<int>();
    row.cost_ms = r.at("cost_ms").get<double>();
    row.order = r.at("node_sequence").get<std::vector<std::string>>();
    row.gpus = r.at("device_group").get<std::vector<int>>();
    for (const Json& s : r.at("strategies")) row.dp_tp.emplace_back(s.at(0).get<int>(), s.at(1).get<int>());
    row.micro_batches = r.at("micro_batches").get<int>();
    row.partition = r.at("layer_partition").get<std::vector<int>>();
    log.rows.push_back(std::move(row));
  }
  return log;
}

// The same plan twice in the log (Metis lists a plan once per re-partitioning attempt): the
// description without rank and cost.
inline std::string key(const Row& r) {
  std::string k;
  for (const auto& o : r.order) k += o + ",";
  k += "|";
  for (int g : r.gpus) k += std::to_string(g) + ",";
  k += "|";
  for (const auto& [d, t] : r.dp_tp) k += std::to_string(d) + "x" + std::to_string(t) + ",";
  k += "|" + std::to_string(r.micro_batches) + "|";
  for (int b : r.partition) k += std::to_string(b) + ",";
  return k;
}

// The weft plan for row r on `devices` (its groups named after Metis's device types), or why weft
// cannot express it.
inline Result<Plan> to_plan(const Row& r, const ModelSpec& model, const MixedCluster& devices, int seq,
                            int global_batch, DType dtype, const CostModel& cm) {
  const int pp = static_cast<int>(r.gpus.size());
  if (pp == 0 || r.dp_tp.size() != r.gpus.size() || r.partition.size() != r.gpus.size() + 1)
    return Error{ErrorKind::kBadInput, "malformed row " + std::to_string(r.rank)};
  for (int g : r.gpus)
    if (g != r.gpus[0]) return Error{ErrorKind::kBadInput, "stages of different sizes"};
  const int blocks = model.num_layers();  // Metis's layers 1..blocks
  Plan p;
  p.model = model;
  p.cluster = devices.as_uniform();
  p.train.seq = seq;
  p.train.global_batch = global_batch;
  p.train.micro_batches = r.micro_batches;
  p.train.pp = pp;
  p.train.schedule = Schedule::k1F1B;
  p.train.dtype = dtype;
  for (int s = 0; s < pp; ++s) {
    const int first = std::max(r.partition[s], 1) - 1;
    const int end = std::min(r.partition[s + 1], blocks + 1) - 1;
    if (end <= first) return Error{ErrorKind::kBadInput, "a stage without transformer blocks"};
    Stage st;
    st.first_layer = first;
    LayerStrategy ls;
    ls.dp = r.dp_tp[s].first;
    ls.tp = r.dp_tp[s].second;
    st.layers.assign(end - first, ls);
    p.stages.push_back(st);
  }
  p.embedding.dp = r.dp_tp[0].first;
  p.embedding.tp = r.dp_tp[0].second;
  Status st = validate(p);
  if (!st.ok()) return st.error();
  std::vector<int> order;
  for (const std::string& o : r.order) {
    int g = -1;
    for (size_t i = 0; i < devices.groups.size(); ++i)
      if (devices.groups[i].name == o) g = static_cast<int>(i);
    if (g < 0) return Error{ErrorKind::kBadInput, "no device group named " + o};
    order.push_back(g);
  }
  return balance_shares(place(std::move(p), devices, order), cm, /*suspend=*/false);
}

// The whole model under tensor parallelism tp on one node of `gpu`'s devices, one micro-batch of
// `bs` samples: what Metis's per-device-type profiles measure.
inline Plan one_node_plan(const ModelSpec& model, ClusterSpec gpu, int tp, int bs, int seq, DType dtype) {
  gpu.nodes = 1;
  gpu.gpus_per_node = tp;
  Plan p;
  p.model = model;
  p.cluster = gpu;
  p.train.seq = seq;
  p.train.global_batch = bs;
  p.train.dtype = dtype;
  LayerStrategy s;
  s.tp = tp;
  Stage st;
  st.layers.assign(model.num_layers(), s);
  p.stages.push_back(st);
  p.embedding = s;
  return p;
}

// weft's analytic time of one transformer block, forward and backward of one micro-batch of `bs`
// samples under tensor parallelism `tp` on one node of `gpu`'s devices, in milliseconds.
inline double block_ms(const ModelSpec& model, const ClusterSpec& gpu, int tp, int bs, int seq, DType dtype,
                       const AnalyticOptions& opt) {
  const Plan p = one_node_plan(model, gpu, tp, bs, seq, dtype);
  const AnalyticCostModel cm(opt);
  LayerContext lc;
  static_cast<StageContext&>(lc) = stage_context(p, 0);
  lc.layer = 0;
  const LayerCost c = cm.layer(lc, p.stages[0].layers[0]);
  return (c.fwd + c.bwd).value() * 1e3;
}

// Metis's measured A100 block time (profile_data_samples/DeviceType.A100_tp<tp>_bs<bs>.json, its
// layer 1), in milliseconds.
inline double profiled_block_ms(const std::string& dir, int tp, int bs) {
  const Json j = read_json_file(dir + "/profile_data_samples/DeviceType.A100_tp" + std::to_string(tp) + "_bs" +
                                std::to_string(bs) + ".json");
  return j.at("execution_time").at("layer_compute_total_ms").at(1).get<double>();
}

// The compute time scale (AnalyticOptions::compute_time_scale: in-training kernel time over the
// kernel model's) that Metis's measured A100 profiles imply for the software they were measured
// with: the geometric mean over the tensor-parallel-free profiles (batch 1, 2, 4) of measured /
// weft's block time at scale 1. Metis has no public T4 profile; the same software on the T4 is
// assumed to lose the same factor.
inline double fitted_time_scale(const std::string& dir, const ModelSpec& model, const ClusterSpec& a100, int seq,
                                DType dtype) {
  AnalyticOptions o;
  o.compute_time_scale = 1.0;
  double log_sum = 0;
  int n = 0;
  for (int bs : {1, 2, 4}) {
    log_sum += std::log(profiled_block_ms(dir, 1, bs) / block_ms(model, a100, 1, bs, seq, dtype, o));
    ++n;
  }
  return std::exp(log_sum / n);
}

// weft's optimizer step for the whole model under tensor parallelism tp on one node of `gpu`'s
// devices (every block and the embedding and head, no data parallelism), in milliseconds: what
// Metis's profile times as optimizer_time_ms.
inline double optimizer_ms(const ModelSpec& model, const ClusterSpec& gpu, int tp, int seq, DType dtype,
                           const AnalyticOptions& opt) {
  const Plan p = one_node_plan(model, gpu, tp, 1, seq, dtype);
  const LayerStrategy& s = p.embedding;
  const AnalyticCostModel cm(opt);
  LayerContext lc;
  static_cast<StageContext&>(lc) = stage_context(p, 0);
  double t = cm.stage_extra(lc, s).optimizer.value();
  for (int l = 0; l < model.num_layers(); ++l) {
    lc.layer = l;
    t += cm.layer(lc, s).optimizer.value();
  }
  return t * 1e3;
}

// Metis's measured optimizer step (profile_data_samples/DeviceType.A100_tp<tp>_bs1.json,
// optimizer_time_ms), in milliseconds.
inline double profiled_optimizer_ms(const std::string& dir, int tp) {
  const Json j = read_json_file(dir + "/profile_data_samples/DeviceType.A100_tp" + std::to_string(tp) + "_bs1.json");
  return j.at("execution_time").at("optimizer_time_ms").get<double>();
}

// The optimizer time scale (AnalyticOptions::optimizer_time_scale) Metis's profiles imply: the
// geometric mean over tp 1, 2, 4 of measured / weft's optimizer step at scale 1. Its software ran
// the blocks at about a sixth of the kernel model's speed but the optimizer near the HBM rate, so
// the compute scale must not slow the optimizer too.
inline double fitted_optimizer_scale(const std::string& dir, const ModelSpec& model, const ClusterSpec& a100, int seq,
                                     DType dtype) {
  AnalyticOptions o;
  o.compute_time_scale = 1.0;
  double log_sum = 0;
  for (int tp : {1, 2, 4}) log_sum += std::log(profiled_optimizer_ms(dir, tp) / optimizer_ms(model, a100, tp, seq, dtype, o));
  return std::exp(log_sum / 3);
}

// Everything the comparison reads: the model, the devices (groups "t4" and "a100"), the log, and
// the analytic model's options with the compute and optimizer time scales fitted to Metis's A100
// profiles.
struct Setup {
  ModelSpec model;
  MixedCluster devices;
  Log log;
  AnalyticOptions options;
  DType dtype = DType::kFp16;  // the T4 has no bf16
};

inline Result<Setup> load_setup(const std::string& dir) {
  Setup s;
  auto model = load_model(dir + "/model.json");
  if (!model.ok()) return model.error();
  auto dev = load_mixed_cluster(dir + "/cluster.json");
  if (!dev.ok()) return dev.error();
  s.model = *model;
  s.devices = *dev;
  return catch_errors([&]() -> Result<Setup> {
    s.log = load_log(dir + "/hetero_cost_model.json");
    const ClusterSpec* a100 = nullptr;
    for (const ClusterSpec& g : s.devices.groups)
      if (g.name == "a100") a100 = &g;
    if (!a100) return Error{ErrorKind::kBadInput, "cluster.json: no group named a100"};
    s.options.compute_time_scale = fitted_time_scale(dir, s.model, *a100, s.log.seq, s.dtype);
    s.options.optimizer_time_scale = fitted_optimizer_scale(dir, s.model, *a100, s.log.seq, s.dtype);
    return s;
  });
}

// A what-if towards Metis's own figures, never the default: the T4 made `t4_ratio` times slower
// than an A100 per block (its fp16 peak scaled; Metis's T4 profile is private, and the plans it
// ranks high imply about 4.7x against weft's 11x from the two GPUs' sustained matmul rates), and
// the LM head and embedding costed at `vocab_scale` of the vocabulary (Metis's profile times its
// head at 0.41 ms, 1/72 of a block, where a 48,000 x 4,096 head is about one block of GEMM work:
// 0.015 gives weft's head about Metis's time). 0 leaves either as it is.
inline void towards_metis_figures(Setup& s, double t4_ratio, double vocab_scale) {
  if (t4_ratio > 0)
    for (int it = 0; it < 4; ++it) {  // the block time is nearly, not exactly, inverse to the peak
      const double t4 = block_ms(s.model, s.devices.groups[0], 1, 1, s.log.seq, s.dtype, s.options);
      const double a100 = block_ms(s.model, s.devices.groups[1], 1, 1, s.log.seq, s.dtype, s.options);
      s.devices.groups[0].gpu.tflops_fp16 *= (t4 / a100) / t4_ratio;
    }
  if (vocab_scale > 0) s.model.vocab = std::max(1, static_cast<int>(s.model.vocab * vocab_scale));
}

// weft's own search on Metis's devices, batch and sequence (what weft's runtime runs).
inline Result<HeteroResult> weft_search(const Setup& s, const CostModel& cm) {
  SearchOptions o;
  o.seq = s.log.seq;
  o.global_batch = s.log.global_batch;
  o.dtype = s.dtype;
  if (Status st = restrict_to_runtime(o); !st.ok()) return st.error();
  return hetero_search(s.model, s.devices, cm, o);
}

// One Metis plan as weft costs it.
struct Costed {
  Row row;
  Plan plan;
  HeteroEstimate estimate;
  double weft_ms() const { return estimate.total.step_time.value() * 1e3; }
};

struct Comparison {
  std::vector<Costed> costed;  // the plans weft expresses, each once, in Metis's order
  int duplicates = 0;          // rows repeating an earlier row's plan
  int unequal_stages = 0;      // rows whose stages have different GPU counts
  int empty_stages = 0;        // rows with a stage of no transformer block
  double spearman = 0;         // Metis's cost against weft's, over `costed`
};

inline Comparison compare(const Setup& s, const CostModel& cm) {
  Comparison c;
  std::map<std::string, int> seen;
  std::vector<double> a, b;
  for (const Row& r : s.log.rows) {
    if (seen.count(key(r))) {
      ++c.duplicates;
      continue;
    }
    seen[key(r)] = 1;
    auto p = to_plan(r, s.model, s.devices, s.log.seq, s.log.global_batch, s.dtype, cm);
    if (!p.ok()) {
      if (p.error().message == "stages of different sizes") ++c.unequal_stages;
      else if (p.error().message == "a stage without transformer blocks") ++c.empty_stages;
      else throw InputError("Metis rank " + std::to_string(r.rank) + ": " + p.error().message);
      continue;
    }
    Costed k{r, *p, hetero_estimate(*p, cm)};
    a.push_back(r.cost_ms);
    b.push_back(k.weft_ms());
    c.costed.push_back(std::move(k));
  }
  if (a.size() > 2) c.spearman = spearman(a, b);
  return c;
}

}  // namespace weft::metis
