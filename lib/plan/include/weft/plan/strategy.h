// The per-layer parallel strategy and the global pipeline settings: the vocabulary shared by the
// cost model, the search and the runtime.
#pragma once

#include <string>

#include "weft/core/error.h"
#include "weft/core/json.h"

namespace weft {

enum class Recompute { kNone, kSelective, kFull };
// kZbH1: 1F1B with each backward split into its input-gradient part (B) and its weight-gradient
// part (W), the W passes of device group g postponed by g micro-batches into what would be the
// cool-down bubble (ZB-H1 of "Zero Bubble Pipeline Parallelism", Qi et al., ICLR'24): the same
// activation memory as 1F1B on the first device group, about a third of its bubble.
// kZbV: ZB-V (Qi et al. 2024, section 6), two model chunks per device group in a V: group g holds
// virtual stages g and 2 pp - 1 - g, so the first and the last virtual stage share group 0.
enum class Schedule { kGpipe, k1F1B, kInterleaved, kZbH1, kZbV };

// How MoE tokens reach their experts: Megatron-LM's all-to-all token dispatcher (every routed copy
// sent to its expert's rank on its own), or a node-deduplicating one (Megatron-LM's flex
// dispatcher with the DeepEP or HybridEP backend: a token crosses to a remote node once for all its
// experts there and is forwarded over the node's NVLink).
enum class MoeDispatcher { kAllToAll, kDeepEp, kHybridEp };
const char* to_string(MoeDispatcher d);
// "alltoall", "deepep", "hybridep"; the error lists them.
Result<MoeDispatcher> moe_dispatcher_from_string(const std::string& s);

const char* to_string(Recompute r);
const char* to_string(Schedule s);
Result<Recompute> recompute_from_string(const std::string& s);
Result<Schedule> schedule_from_string(const std::string& s);

// How one layer is spread over the devices of its pipeline stage.
//   devices of the stage = tp * ulysses * cp * dp
// tp: Megatron tensor parallel degree; sp: Megatron sequence parallel on the tp group (needs tp>1);
// ulysses: DeepSpeed-Ulysses sequence parallel degree (all-to-all on heads);
// cp: context (ring attention) parallel degree; dp: data parallel degree;
// zero: 0 = DDP, 1 = optimizer states sharded, 2 = + gradients, 3 = + parameters, sharded over
//   dp * ulysses * cp (every rank that holds a full copy of this layer's tp shard);
// ep: expert parallel degree for MoE layers (1 for dense layers); etp: expert tensor degree, each
//   expert's FFN split over etp ranks (0: as tp, Megatron-LM's default). A MoE layer's experts lie
//   on their own grid over the same devices, as Megatron-LM's expert grid (order tp-ep-dp, tp being
//   etp): etp fastest, then ep, then the expert data-parallel degree edp = devices / (etp * ep),
//   which shards the experts' ZeRO state. So ep need not divide dp*cp: with etp 1 it may span tp.
// Rank order inside a stage (fastest first): tp, ulysses, cp, dp (weft/plan/rank_map.h).
struct LayerStrategy {
  int tp = 1;
  bool sp = false;
  int ulysses = 1;
  int cp = 1;
  int dp = 1;
  int zero = 0;
  Recompute recompute = Recompute::kNone;
  int ep = 1;
  int etp = 0;

  int devices() const { return tp * ulysses * cp * dp; }
  int expert_tp() const { return etp > 0 ? etp : tp; }
  // The ranks that hold the same expert shard: they sum its gradients and shard its ZeRO state.
  int expert_shard_group() const { return devices() / (expert_tp() * ep); }
  // Ranks that hold a replica of this layer's tp shard and so share ZeRO shards.
  int shard_group() const { return dp * ulysses * cp; }
  bool operator==(const LayerStrategy&) const = default;
};

// s on a dense layer (or the embedding): no expert degrees (ep 1, etp as tp).
inline LayerStrategy without_experts(LayerStrategy s) {
  s.ep = 1;
  s.etp = 0;
  return s;
}

// A compact human label, e.g. "tp4+sp dp2 z1 rc=sel".
std::string label(const LayerStrategy& s);
Json to_json(const LayerStrategy& s);
LayerStrategy strategy_from_json(const JsonObj& o);  // throws InputError

}  // namespace weft
