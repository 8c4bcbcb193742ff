// The pruning rules of the plan search, each with its name (as counted in SearchStats::rules), what
// it removes, and why it is safe. The per-layer rules are named predicates in strategy_space.cc,
// asked in a fixed order while the candidates are built (weft/search/strategy_space.h). "Exact" rules never remove a plan that could be optimal (under the
// cost-model assumptions in search.h); "heuristic" rules encode practice and may, in principle, lose
// an optimum of some cost model. Every rule has a test in tests/search/pruning_test.cc.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weft::planner {

// --- Per-layer strategy rules (applied while enumerating candidates) ---------------------------

// heuristic. tp <= GPUs per node (and <= SearchOptions::max_tp). Tensor parallelism puts 4
// collectives per layer on the critical path of every micro-batch; across nodes they would run at
// the inter-node bandwidth (on a DGX A100, 25 instead of 300 GB/s per GPU).
inline constexpr const char* kRuleTpInNode = "tp-inside-node";
// heuristic. For sequences shorter than SearchOptions::long_seq: no context parallelism, and
// tp * ulysses <= GPUs per node. Ring attention hides its K/V exchange only behind the s^2 attention
// work of long sequences; below that, tp/Ulysses/dp inside a node shard activations as well with
// cheaper collectives.
inline constexpr const char* kRuleSeqShardInNode = "sequence-sharding-inside-node";
// heuristic. cp > 1 only when Ulysses already fills the node: ulysses >= min(largest valid Ulysses
// degree for this tp, GPUs per node / tp). Inside a node an all-to-all moves each activation once
// whatever the degree, while a ring moves K/V (cp - 1) times.
inline constexpr const char* kRuleUlyssesFirst = "ulysses-before-cp";
// heuristic. An expert tensor degree of 1 under tp > 1 only with ep a multiple of tp: etp 1 is
// there to let the expert degree take over the tensor ranks (each expert whole on one rank, no
// gather of the routed token copies over tp); with ep below tp the tensor ranks hold copies of the
// same whole experts, as many expert states as tp 1 would. torchtitan takes etp 1 only so
// (ParallelDims._validate: ep % (cp * tp) == 0).
inline constexpr const char* kRuleEtpSpansTp = "etp-one-spans-tp";
// heuristic. With ep > 1 and etp = tp > 1, where the experts split ep * tp ways with etp 1 is also a
// candidate: each rank then holds the same expert state, computes the same routed work on wider
// GEMMs, sends the same all-to-all bytes over a group spanning the same nodes, and skips the gather
// of the k routed copies over tp (and holding them) that etp = tp adds (docs/cost-model.md §3.4).
// Only the all-to-all's latency, over ep * tp peers instead of ep, could favour etp = tp.
inline constexpr const char* kRuleEtpTpGathers = "etp-tp-gathers-copies";
// exact. ZeRO 1-3 shard over dp*ulysses*cp ranks; over a group of one they are DDP. Only zero = 0 is
// kept for such layouts.
inline constexpr const char* kRuleZeroNeedsShards = "zero-needs-shards";
// user restriction: SearchOptions::allow_ulysses / allow_cp / allow_zero3 / max_tp switched off, a
// layer degree outside cp_degrees / ulysses_degrees (--cp, --ulysses).
inline constexpr const char* kRuleOptions = "options";
// user restriction: galvatron::restrict_to_galvatron (weft/galvatron/search.h), a
// SearchOptions::restrictions entry: Galvatron's strategy set (DDP, ZeRO-2 or ZeRO-3; tp or Ulysses,
// not both; no context parallelism; no or full recompute). Its 1F1B schedule and even stages are
// SearchOptions::schedules and uneven_stages, which no rule counts.
inline constexpr const char* kRuleGalvatronSpace = "galvatron-space";
// exact. Within one activation layout (tp, sp, ulysses, cp, dp), a strategy whose per-micro-batch
// time (search objective, docs/search.md) and memory are both no better than another's, at one
// stage position, is dropped there. Layout equality makes transition and p2p costs equal, so the
// replacement never costs more anywhere in a plan.
inline constexpr const char* kRuleParetoLayout = "pareto-per-layout";
// exact. Across layouts: a strategy is dropped at a stage position when another needs no more
// memory and is faster by at least the most its different layout could add in transitions to or
// from any neighbour and in p2p at a stage boundary (twice: both neighbours pay it). Any plan using
// the dropped strategy becomes no slower, and no larger, by swapping in the other.
inline constexpr const char* kRuleParetoAcross = "pareto-across-layouts";
// exact. An embedding / LM-head strategy no better in every stage's time and memory than another is
// dropped.
inline constexpr const char* kRuleParetoEmbedding = "pareto-embedding";

// --- Configuration rules (pipeline degree, schedule, micro-batches) ----------------------------

// heuristic. With pp > 1, m >= pp micro-batches: with fewer, every schedule leaves pp - m stages
// idle in each slot (bubble > 50 % at m < pp / 2), and 1F1B is defined for m >= pp.
inline constexpr const char* kRuleFillPipeline = "fill-the-pipeline";
// exact. pp = 1 has no pipeline: GPipe, 1F1B and interleaving coincide; only 1F1B is searched.
inline constexpr const char* kRuleNoPipeline = "one-schedule-without-pipeline";
// exact under the cost model's own figures. GPipe is dropped at a (pp, m) where 1F1B is also searched
// and the cost model says GPipe is no faster (step() on equal stage sums) and holds no less memory
// at any stage (layer() of a probe strategy) -- the bubble is the same, GPipe keeps all m
// micro-batches' activations (docs/cost-model.md §5.2, micro-batches in flight).
inline constexpr const char* kRuleGpipeDominated = "gpipe-dominated";
// heuristic. Interleaving depth 2 <= vp <= SearchOptions::max_vp with (pp*vp) dividing the layer
// count (Megatron's constraint); each extra chunk adds 2 p2p per micro-batch for a bubble shrinking
// only as 1/vp.
inline constexpr const char* kRuleInterleaveDepth = "interleave-depth";
// exact. A configuration where some layer group has no valid candidate (e.g. no dp divides the
// micro-batch) is skipped.
inline constexpr const char* kRuleNoCandidates = "no-valid-strategy";
// exact. A configuration where even the least-memory strategy of every layer cannot fit the budget
// is skipped (it still counts for the "closest" plan).
inline constexpr const char* kRuleMemory = "memory-lower-bound";
// exact for the search objective. A configuration whose lower bound on the objective (convex hull
// of per-layer time against memory, docs/search.md) is no better than the worst configuration kept
// for re-ranking is skipped.
inline constexpr const char* kRuleObjectiveBound = "objective-lower-bound";

// Counts of what each rule removed, in first-use order.
class RuleLog {
 public:
  void add(std::string_view rule, long long n = 1);
  long long count(std::string_view rule) const;
  long long total() const;
  // (rule, count) pairs, in first-use order.
  const std::vector<std::pair<std::string, long long>>& counts() const { return counts_; }

 private:
  std::vector<std::pair<std::string, long long>> counts_;
};

// Pareto filter over points (time, memory): the indices of the points not dominated by another
// (<= in both, < in one). Among exact duplicates the first is kept. Order of the result: ascending
// index.
std::vector<int> pareto_indices(const std::vector<double>& time, const std::vector<double>& memory);

// Lower convex hull of points (memory, time), as a function phi(x) = the least time reachable by a
// convex combination of points whose memory is <= x (+infinity below the smallest memory).
// Non-increasing and convex; a lower bound on the per-layer time of any assignment whose average
// memory per layer is x.
class TimeMemoryHull {
 public:
  TimeMemoryHull() = default;
  TimeMemoryHull(const std::vector<double>& memory, const std::vector<double>& time);
  double operator()(double memory) const;
  bool empty() const { return pts_.empty(); }

 private:
  std::vector<std::pair<double, double>> pts_;  // hull vertices, memory ascending, time descending
};

}  // namespace weft::planner
