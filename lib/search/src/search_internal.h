// What the parts of the plan search share (search.cc runs them; docs/search.md):
//   tables.cc        per configuration, the cost tables of every candidate at every stage position,
//                    the embedding, p2p and transition tables, and the lower bound;
//   dp_options.cc    the options the layer DP sees, after the Pareto rules;
//   stage_search.cc  the layer DP and stage partition of one configuration, and the plan it makes;
//   interleaved_search.cc  the same for an interleaved schedule;
//   uniform_search.cc the uniform (one strategy everywhere) plans of one configuration;
//   closest.cc       when nothing fits, the plan that needs the least memory and how much it needs.
// Every function takes what it reads and writes as arguments: the problem (read only), the
// configuration's tables, the candidate cache and the counts. Not installed.
#pragma once

#include <algorithm>
#include <deque>
#include <limits>
#include <optional>
#include <vector>

#include "weft/plan/geometry.h"
#include "weft/search/layer_dp.h"
#include "weft/search/pruning.h"
#include "weft/search/search.h"
#include "weft/search/strategy_space.h"

namespace weft::planner {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// The layers of one group: [first, first + count).
struct GroupRange {
  int first = 0, count = 0;
};

// One search's inputs, checked, and what follows from them. Read only once made (search.cc).
struct Problem {
  Problem(const ModelSpec& m, const ClusterSpec& c, const CostModel& cost, const SearchOptions& o)
      : model(m), cluster(c), cm(cost), opt(o) {}
  const ModelSpec& model;
  const ClusterSpec& cluster;
  const CostModel& cm;
  const SearchOptions& opt;
  std::vector<GroupRange> ranges;  // per layer group
  std::vector<int> group_of;       // per layer
  // Per layer group: the first group of the same shape (itself when none comes before). Groups of
  // one shape have the same candidates and, by the cost model's contract (a layer's cost depends
  // on its shape, strategy and stage, not its index), the same costs: costed once, for the first
  // (a model alternating two shapes, GPT-OSS's banded and full layers, has one group a layer).
  std::vector<int> same_as;
  int L = 0, world = 0;
  double budget = 0;  // memory budget per device, bytes
  double step = 0;    // bytes per memory step of the layer DP
  int M = 0;          // memory steps in the budget

  // The budget column of `avail` bytes (-1 when negative), and the steps `bytes` take (M + 1 when
  // more than the budget).
  int col(double avail) const;
  int steps(double bytes) const;
};

// What one search counts: the rules that fired and its statistics.
struct Tally {
  RuleLog log;
  SearchStats stats;
};

// The candidates of each (layer group, stage size, samples per micro-batch) and of the embedding
// per (stage size, samples per micro-batch), built once per search (SearchOptions::layer_space /
// embedding_space when set). References stay valid while the cache lives.
class CandidateCache {
 public:
  const std::vector<LayerStrategy>& layer(const Problem& pb, int g, int S, int pmb, RuleLog& log);
  const std::vector<LayerStrategy>& embedding(const Problem& pb, int S, int pmb, RuleLog& log);

 private:
  struct LayerKey {
    int g, S, pmb;
    std::vector<LayerStrategy> v;
  };
  struct EmbKey {
    int S, pmb;
    std::vector<LayerStrategy> v;
  };
  std::deque<LayerKey> layers_;  // deque: references stay valid
  std::deque<EmbKey> embeddings_;
};

struct GroupCands {
  const std::vector<LayerStrategy>* cands = nullptr;  // null: the group has no layers
  std::vector<int> layout;                            // layout index of each candidate
};

// Everything the search knows about one configuration.
struct Work {
  PipelineConfig cfg;
  TrainSettings train;
  int S = 0, P = 0, pmb = 0;
  std::vector<GroupCands> groups;
  std::vector<LayoutKey> layouts;
  // u[pos][g][c], mem[pos][g][c]: objective time and memory bytes of candidate c of group g.
  std::vector<std::vector<std::vector<double>>> u, mem;
  // All embedding candidates with their extras (-1 = not costed yet), and the Pareto-filtered ones.
  const std::vector<LayerStrategy>* all_embs = nullptr;
  std::vector<std::vector<double>> eu_all, emem_all;  // [e][pos]
  std::vector<LayerStrategy> embs;
  std::vector<std::vector<double>> eu, emem;  // [e][pos]
  std::vector<std::vector<double>> p2p;       // [boundary s][layout], s = 0 .. P-2
  std::vector<std::vector<float>> t_within, t_into;  // [g] K*K: transitions inside group g / from g-1 into g
  double lb = 0;         // lower bound on J of the layer-wise search (its embedding candidates)
  double lb_time = 0;    // lower bound on J of any plan, memory ignored (for the uniform plans)
  bool memory_infeasible = false;
  bool valid = false;
  bool complete = false;  // every position costed, tables built (complete())
  std::vector<char> filled;  // per position: costs known (fill_position())
};

// Keeps the `cap` plans with the smallest search objective j.
class Pool {
 public:
  struct Kept {
    double j = kInf;
    Plan plan;
  };
  explicit Pool(int cap) : cap_(cap) {}
  bool full() const { return static_cast<int>(items_.size()) >= cap_; }
  // The j an entry must beat to be kept: +inf while there is room (-inf for a pool of size 0).
  double worst() const {
    if (cap_ <= 0) return -kInf;
    return full() ? items_.back().j : kInf;
  }
  void add(double j, Plan p);
  std::vector<Kept>& items() { return items_; }

 private:
  int cap_;
  std::vector<Kept> items_;
};

// --- tables.cc -------------------------------------------------------------------------------------

// The search objective of one layer (or a stage's extra work) per micro-batch: forward and
// backward, plus the per-step work spread over the m micro-batches -- the optimizer step and the
// part of the gradient reduction that its own backward cannot hide.
double objective_time(const LayerCost& c, int m);
// J for per-stage (non-interleaved) costs, or per device group costs with vp virtual stages. A
// zb-h1 configuration is ranked as 1F1B (its bubble (pp - 1)(F + B - W) is at most 1F1B's
// (pp - 1)(F + B + W)), a zb-v one as interleaved with vp = 2 (its bubble, at most (pp - 1) chunk
// forwards with equal passes, is at most that one's); estimate() re-ranks the kept plans with the
// simulated schedule.
double objective(const std::vector<double>& group_cost, int m, int vp);
// How many times a device group's per-micro-batch work the lower bounds on J count: m + (pp - 1) / vp
// (zb-h1 and zb-v too: their J is 1F1B's and interleaved vp = 2's).
double pipeline_weight(const PipelineConfig& c);
StageContext stage_context(const Problem& pb, const Work& w, int pos);

// Candidates, costs at the probe positions, embedding candidates of configuration w.cfg. False if
// some group (or the embedding) has no candidate.
bool prepare(const Problem& pb, CandidateCache& cache, Tally& t, Work& w);
// Costs (or interpolates) every candidate at stage position pos, once.
void fill_position(const Problem& pb, Tally& t, Work& w, int pos);
// The p2p time after stage s for layout k, costed once (0 for the interleaved and zb-v schedules).
double p2p_at(const Problem& pb, Work& w, int s, int k);
// Costs every position, filters the embedding candidates, and builds the p2p and transition tables.
void complete(const Problem& pb, Tally& t, Work& w);
// Sets w.lb, w.lb_time and w.memory_infeasible from the probe positions.
void lower_bound(const Problem& pb, Work& w);

// --- dp_options.cc ---------------------------------------------------------------------------------

using DpOptions = std::vector<std::vector<std::vector<DpOption>>>;  // [pos][g]
// The layer DP's options of every group at every position, after the Pareto rules.
DpOptions dp_options(const Problem& pb, Tally& t, Work& w);

// --- stage_search.cc, interleaved_search.cc ---------------------------------------------------------

// The best layer-wise plan of a completed configuration, kept in `pool` if it beats its worst.
void search_config(const Problem& pb, Tally& t, Work& w, Pool& pool);
// Interleaved 1F1B: even chunks; each device group's chunks share its memory, so one DP runs over a
// group's chunks in order (no transition across a chunk boundary, the chunk's p2p added there).
void search_interleaved(const Problem& pb, const Work& w, const DpOptions& opts, Pool& pool);
// The transition table into `layer` from the layer before it (K*K).
const float* transitions_into(const Problem& pb, const Work& w, int layer);
// The plan of configuration w with embedding candidate e, stage sizes and per-stage candidate indices.
Plan make_plan(const Problem& pb, const Work& w, int e, const std::vector<int>& sizes,
               const std::vector<std::vector<int>>& idx);

// --- uniform_search.cc -----------------------------------------------------------------------------

// The uniform plans of configuration w (even stages, the embedding following the layer strategy),
// kept in `pool` if they beat its worst.
void uniform_config(const Problem& pb, Tally& t, Work& w, Pool& pool);

// --- closest.cc ------------------------------------------------------------------------------------

// The plan of a completed configuration that needs the least memory; *measure: its largest device
// memory (bytes).
std::optional<Plan> closest_plan(const Problem& pb, const Work& w, double* measure);
// The device memory (GiB) at which the cost model's budget reaches `peak` bytes (0 if none does).
double memory_needed(const Problem& pb, double peak);

}  // namespace weft::planner
