// Terminal text of plans and their estimates: the tables `weft plan` and `weft estimate` print
// (docs/search.md §8). Each function returns whole lines, every one ending in '\n', which the
// caller prints as they are. Pure; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "weft/cost/estimate.h"
#include "weft/plan/plan.h"

namespace weft {

// A duration for tables: "123.4 s" from 100 s up, "1.234 s" from 1 s up, "12.3 ms" below.
std::string duration_text(double seconds);
// A plan's pipeline: "pp4 1f1b vp2 m8" (degree, schedule, the virtual stages when more than one,
// micro-batches per step).
std::string pipeline_text(const TrainSettings& t);
// A cluster: "16 x A100 80GB (2 nodes of 8)".
std::string cluster_text(const ClusterSpec& c);

// The best plan beside the best uniform (one strategy for every layer) plan, one row per figure:
// pipeline, layers, embedding / LM head, step time, tokens/s, model TFLOP/s / GPU, MFU, peak memory
// / GPU (the best plan's with the memory budget) and, when the uniform plan's step time is
// positive, the speed-up (uniform step time / best step time). Without a uniform plan its column is
// empty and headed "uniform baseline: none fits". Columns 20 and 29 wide, trailing spaces trimmed.
std::string plan_table(const Plan& best, const Estimate& best_estimate, const std::optional<Plan>& uniform,
                       const std::optional<Estimate>& uniform_estimate);

// The layers of plan p stage by stage (columns stage, layers, strategy, mem GiB; 80 columns): one
// row per run of consecutive layers with equal strategies, the stage number and its predicted
// memory on the stage's first row.
std::string layers_table(const Plan& p);

// Ranked plans, best first (columns rank, pipeline, layers, step, vs best): each plan's predicted
// step time and how much slower it is than top[0], in percent. Empty for no plans.
std::string ranking_table(const std::vector<Plan>& top);

// Estimate e of plan p: step time, tokens/s, model TFLOP/s / GPU, MFU, peak memory against the
// budget ("DOES NOT FIT" when over), then one row per stage (busy time, predicted memory and its
// weights, gradients, optimizer and activation parts; " !" when the stage does not fit), then the
// non-zero parts of the step's time breakdown, two to a line.
std::string estimate_table(const Plan& p, const Estimate& e);

// Notes for the reader: "note: <text>", word-wrapped at 80 columns, continuation lines starting
// under the text (six spaces). Empty for no notes.
std::string notes_text(const std::vector<std::string>& notes);

}  // namespace weft
