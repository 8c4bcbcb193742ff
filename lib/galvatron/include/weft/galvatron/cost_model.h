// The Galvatron-compatible cost model (`--cost-model galvatron`): Hetu-Galvatron's time and memory
// formulas at commit cea12ff, quirks included, over its own profile files. Every formula and quirk
// is listed in docs/galvatron.md; the source is reference/galvatron/SEARCH_AND_COST_MODEL.md §2.
//
// Two entry points:
//  - the CostModel interface (layer / stage_extra / step / memory_budget), which the search and
//    weft's estimate() compose. Galvatron's iteration formula needs each stage's embedding time
//    separately; it travels in StageSums::time.embedding. Its Megatron-SP global buffer depends on
//    a whole-plan quantity (the largest tp of the task), so the interface charges it for a fixed
//    task (GalvatronOptions::mode and ::global_buffer_tp) or, in kAuto, for the largest buffer the
//    stage could need (an upper bound).
//  - estimate_plan(): the exact accounting of one plan as Galvatron's engine reports it, with the
//    task (mode, buffer) inferred the way its search would have found the plan. Use this to compare
//    with Galvatron's printed figures.
#pragma once

#include <string>
#include <vector>

#include "weft/cost/cost_model.h"
#include "weft/cost/estimate.h"
#include "weft/galvatron/profiles.h"

namespace weft::galvatron {

// Galvatron's search task kinds (its `tp_sp_mode`): which layer strategies a task may use.
//   tp_only: Megatron tensor parallelism, no Ulysses;  sp_only: Ulysses, no Megatron TP (and no
//   Megatron-SP buffer);  tp_with_sp: either, per layer (never both in one layer).
enum class TpSpMode { kAuto, kTpOnly, kSpOnly, kTpWithSp };
const char* to_string(TpSpMode m);
Result<TpSpMode> tp_sp_mode_from_string(const std::string& s);

struct GalvatronOptions {
  TpSpMode mode = TpSpMode::kAuto;
  // The task's buffer tp (`global_buffer_tp_size`): layers and the embedding may use tp_sp up to it
  // and the Megatron-SP buffer is sized by it. 0 = no limit / derived (see the header comment).
  int global_buffer_tp = 0;
  // "zero2" (Galvatron's shipped default) or "ddp": the data-parallel type of dp>1 layers that are
  // not ZeRO-3. The interface treats the other type as outside Galvatron's space.
  std::string default_dp_type = "zero2";
  bool async_grad_reduce = true;  // Galvatron's default; selects the ZeRO memory ratios for chunks > 1
  // Galvatron's global --sequence_parallel switch (on in its shipped settings): the interface treats
  // Megatron TP layers whose `sp` differs from it as outside Galvatron's space, so searched plans
  // never mix the two (estimate_plan() costs either).
  bool sequence_parallel = true;
  int max_tp_deg = 8;             // the search setting max_tp_deg (bounds the kAuto buffer)
  // false: the interface costs every strategy Galvatron's formulas cover (both data-parallel types,
  // either Megatron-SP setting, ZeRO with dp = 1), as estimate_plan() does; true: only those its
  // search generates under the settings above.
  bool strict_space = true;
};

// One layer (or the embedding / LM head) in Galvatron's terms. sp is the Ulysses degree.
struct GStrategy {
  int pp = 1, tp = 1, sp = 1, dp = 1;
  enum DpType { kDdp, kZero2, kZero3 } dp_type = kDdp;
  bool ckpt = false;
  bool megatron_sp = false;       // Megatron sequence parallelism on the tp group (the global flag)
  int tp_sp() const { return tp > sp ? tp : sp; }
  int sdp() const { return dp * sp; }
};

// weft's strategy -> Galvatron's, or the reason Galvatron has no such strategy.
Result<GStrategy> to_gstrategy(const LayerStrategy& s, int pp);

// Galvatron-native figures (ms, MB), exposed for tests and documentation.
struct LayerTimeMs {
  double fct = 0, bct = 0;        // forward, backward (+ recompute) compute
  double tp_comm = 0;             // Megatron TP all-gathers or Ulysses all-to-alls
  double dp_msg_mb = 0;           // gradient message (MB) and its cost per MB
  double dc = 0;
  double zero3 = 0;               // ZeRO-3 forward all-gather, not overlapped
  double p2p = 0;                 // the pipeline term, already divided by the layer count
  double sync = 0, nosync = 0;    // per micro-batch, with and without gradient synchronisation
};
struct MemoryMb {
  double states = 0, activation = 0;
  double total() const { return states + activation; }
};
struct EmbeddingTimeMs {
  std::vector<double> sync, nosync;  // per stage (0 on middle stages)
};

struct StageFigures {
  double layers_nosync_ms = 0;    // sum of the stage's layers without gradient sync (per micro-batch)
  double layers_sync_ms = 0;      // ... with gradient sync
  double embedding_ms = 0;        // embedding / LM head, without gradient sync
  long long layers_mb = 0;        // sum over layers of ceil(states + activation)
  long long embedding_mb = 0;     // ceil(embedding states + activation + 1024 MB context)
  long long buffer_mb = 0;        // int(Megatron-SP global buffer)
  long long used_mb = 0;          // the three above
  long long galvatron_mb = 0;     // used + the 20 % reserve: the "memory cost" Galvatron prints
  bool fits = true;               // used <= budget - 1 (the DP's memory index bound)
};

struct GalvatronEstimate {
  double iteration_s = 0;
  double samples_per_s = 0;
  TpSpMode mode = TpSpMode::kAuto;  // the task the plan was costed in
  int buffer_tp = 0;                // 0 when there is no buffer (sp_only)
  long long memory_mb = 0;          // memory_constraint * 1024
  long long reserve_mb = 0;         // int(0.2 * memory_mb) above 20 GB, else 0
  long long budget_mb = 0;          // memory_mb - reserve_mb
  std::vector<StageFigures> stages;
  bool fits = true;
};
Json to_json(const GalvatronEstimate& e);

class GalvatronCostModel : public CostModel {
 public:
  // hidden_size: the model YAML's hidden_size (the only shape Galvatron's formulas use).
  GalvatronCostModel(Profiles profiles, long long hidden_size, GalvatronOptions opt = {});
  std::string name() const override { return "galvatron"; }
  std::string source() const override { return "measured"; }

  LayerCost layer(const LayerContext& ctx, const LayerStrategy& s) const override;
  LayerCost stage_extra(const StageContext& ctx, const LayerStrategy& emb) const override;
  // 0: Galvatron's inter-layer conversion cost and tie-break epsilons steer only its DP and never
  // enter the time it reports (pipeline_costmodel); see inter_layer_s().
  Seconds transition(const LayerContext& ctx, const LayerStrategy& a, const LayerStrategy& b) const override;
  // 0: Galvatron charges the pipeline send/recv inside every layer (LayerTimeMs::p2p).
  Seconds p2p(const StageContext& ctx, const LayerStrategy& s) const override;
  StepCost step(const TrainSettings& train, const std::vector<StageSums>& stages) const override;
  // memory_constraint * 1024 MB, less the 20 % reserve above 20 GB, less 1 MB (the DP's index bound).
  Bytes memory_budget(const ClusterSpec& c) const override;

  // The exact accounting of plan p as Galvatron reports it. Errors for plans outside Galvatron's
  // cost model (ZeRO-1, context parallel, selective recompute, tp and Ulysses in one layer, ...).
  Result<GalvatronEstimate> estimate_plan(const Plan& p) const;
  // The same as a weft Estimate (stage memory without the reserve, budget after it).
  Result<Estimate> estimate(const Plan& p) const;

  // Galvatron-native pieces.
  LayerTimeMs layer_time(const GStrategy& g, int layer_type, int layers_of_type, const TrainSettings& t) const;
  MemoryMb layer_memory(const GStrategy& g, int layer_type, const TrainSettings& t, int stage) const;
  EmbeddingTimeMs embedding_time(const GStrategy& g, const TrainSettings& t) const;
  std::vector<MemoryMb> embedding_memory(const GStrategy& g, const TrainSettings& t) const;  // per stage
  double global_buffer_mb(const TrainSettings& t, int world, int buffer_tp) const;
  // The smallest buffer tp of any task for this pipeline setting: world/pp/max_dp.
  int min_buffer_tp(const TrainSettings& t, int world) const;
  // pipeline_costmodel: c = per-stage sums without sync (+ embedding), r = layers with sync (ms).
  static double pipeline_ms(const std::vector<double>& c, const std::vector<double>& r, int chunks);
  // Galvatron's inter-layer cost between strategies a then b (seconds, as its DP adds it).
  double inter_layer_s(const GStrategy& a, const GStrategy& b, const TrainSettings& t, int world) const;
  long long reserve_mb(const ClusterSpec& c) const;

  const Profiles& profiles() const { return prof_; }
  long long hidden_size() const { return hidden_; }
  const GalvatronOptions& options() const { return opt_; }

 private:
  bool allowed(const GStrategy& g, const TrainSettings& t, int world, std::string* why) const;
  int interface_buffer_tp(const TrainSettings& t, int world) const;
  Profiles prof_;
  long long hidden_ = 0;
  GalvatronOptions opt_;
};

}  // namespace weft::galvatron
