// The batch planner (docs/varlen.md): for one global batch of documents, the micro-batches, the
// sequence-parallel groups of each (a multiset of power-of-two sizes that uses every GPU) and the
// group each document runs on, minimising the step time under every GPU's memory. Also the two
// baselines a step is compared with: one group size for every document (`static`, the smallest
// that fits the longest document of the run) and the best single size for the batch (`adaptive`).
#pragma once

#include <cstdint>
#include <vector>

#include "weft/core/error.h"
#include "weft/varlen/seq_cost.h"

namespace weft::varlen {

struct Group {
  int size = 0;                // GPUs
  std::vector<int> docs;       // indices into the batch, longest first
  std::int64_t tokens = 0;
  double time = 0;             // seconds: overhead + the documents' times
};

struct MicroBatch {
  std::vector<Group> groups;   // largest first; the sizes sum to the GPU count
  double time = 0;             // the slowest group's
};

struct StepPlan {
  std::vector<MicroBatch> micro_batches;
  double time = 0;             // the micro-batches' times summed, plus the cost's step overhead
};

struct PlannerOptions {
  int min_group = 1;               // smallest group size (FlexSP: 2)
  int max_group = 0;               // largest (0: every GPU)
  int extra_micro_batches = 4;     // micro-batch counts tried beyond the least that fits
  // Group sizes mixed in one micro-batch; 0: as many (2 to 4) as keep the multisets of sizes to
  // about `multiset_budget` (3 up to 32 GPUs, 2 at 64).
  int max_distinct_sizes = 0;
  int multiset_budget = 256;
  int improve_rounds = 64;         // local-search moves after the greedy assignment
  int estimate_head = 48;          // longest documents placed one by one when ranking multisets
  int assigned_multisets = 8;      // best-ranked multisets assigned in full (large: every one)
  // A micro-batch small enough that an exact search over every grouping costs at most this many
  // steps (about 3^docs / 2 x sizes x GPUs) is solved exactly; 0: never.
  double exact_budget = 4e6;
};

// The smallest allowed group size that holds a document of `tokens` (0 if none does).
int min_group_size(const SeqCost& cost, std::int64_t tokens, const PlannerOptions& o);

// weft's plan of one global batch. Errors: an empty batch, a length that is not positive, a
// document no group holds (which, with the memory it would need).
Result<StepPlan> plan_step(const std::vector<std::int64_t>& lengths, const SeqCost& cost, const PlannerOptions& o = {});

// Every group of size `degree` (the best number of micro-batches and assignment for it).
Result<StepPlan> plan_uniform(const std::vector<std::int64_t>& lengths, const SeqCost& cost, int degree,
                              const PlannerOptions& o = {});
// The best single size for this batch.
Result<StepPlan> plan_adaptive(const std::vector<std::int64_t>& lengths, const SeqCost& cost,
                               const PlannerOptions& o = {});

// One batch planned three ways: weft's plan (with its planning time), every group of
// `static_size` GPUs, and the best single size (the comparison `weft varlen` prints).
struct Comparison {
  StepPlan weft, stat, adaptive;
  double plan_ms = 0;  // plan_step's wall time
};
Result<Comparison> compare_step(const std::vector<std::int64_t>& lengths, const SeqCost& cost, int static_size,
                                const PlannerOptions& o = {});

// One micro-batch: the documents `docs` of `lengths` (which must fit in one) on the best multiset
// of group sizes; `sizes` restricts the sizes (empty: every allowed size). time = +inf when they
// do not fit.
MicroBatch plan_micro_batch(const std::vector<std::int64_t>& lengths, const std::vector<int>& docs, const SeqCost& cost,
                            const PlannerOptions& o, const std::vector<int>& sizes = {});

// The time of a micro-batch whose groups and documents are given (the groups' times filled in);
// +inf if a group holds more tokens than its memory or a document below its group's minimum.
double micro_batch_time(const std::vector<std::int64_t>& lengths, MicroBatch& mb, const SeqCost& cost);

}  // namespace weft::varlen
