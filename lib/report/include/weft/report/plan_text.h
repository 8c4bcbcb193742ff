// Terminal text of plans and their estimates: the tables `weft plan` and `weft estimate` print
// (docs/search.md §8). Each function returns whole lines, every one ending in '\n', which the
// caller prints as they are. Pure; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "weft/cost/estimate.h"
#include "weft/cost/memory.h"
#include "weft/plan/plan.h"

namespace weft {

// "41.2 %", or "41.2 % (HFU 54.9 %)" when recompute adds work: the MFU, and the HFU beside it.
std::string utilisation_text(const Estimate& e);
// A duration for tables: "123.4 s" from 100 s up, "1.234 s" from 1 s up, "12.3 ms" below.
std::string duration_text(double seconds);
// A plan's pipeline: "pp4 1f1b vp2 m8" (degree, schedule, the virtual stages when more than one,
// micro-batches per step).
std::string pipeline_text(const TrainSettings& t);
// A cluster: "16 x A100 80GB (2 nodes of 8)".
std::string cluster_text(const ClusterSpec& c);

// The best plan beside the best uniform (one strategy for every layer) plan, one row per figure:
// pipeline, layers, embedding / LM head, step time, tokens/s, model TFLOP/s / GPU, MFU, peak memory
// / GPU (the best plan's with the memory budget), room / GPU (budget - peak: "1.6 GiB", or
// "2.3 GiB over") and, when the uniform plan's step time is positive, the speed-up (uniform step
// time / best step time); then the memory budget's parts (memory_budget_text, with the cost model's
// `margin`). Without a uniform plan its column is empty and headed "uniform baseline: none fits".
// Columns 20 and 29 wide, trailing spaces trimmed.
std::string plan_table(const Plan& best, const Estimate& best_estimate, const std::optional<Plan>& uniform,
                       const std::optional<Estimate>& uniform_estimate,
                       const std::optional<MemoryMargin>& margin = std::nullopt);

// The layers of plan p stage by stage (columns stage, layers, strategy, mem GiB; 80 columns): one
// row per run of consecutive layers with equal strategies, the stage number and its predicted
// memory on the stage's first row.
std::string layers_table(const Plan& p);

// Ranked plans, best first (columns rank, pipeline, layers, step, vs best): each plan's predicted
// step time and how much slower it is than top[0], in percent. Empty for no plans.
std::string ranking_table(const std::vector<Plan>& top);

// How much of its budget estimate e leaves (docs/cost-model.md §5.4): "1.6 GiB room", or
// "2.3 GiB over" when the peak exceeds it.
std::string memory_room_text(const Estimate& e);
// What the budget of estimate e is made of, for plan p's device (device - reserves - margin):
//   "79.7 GiB - 1.1 reserves - 2.0 margin (2.5%) = 76.6 GiB"
// `margin`: the cost model's (weft/cost/memory.h, MemoryMargin; "(2.5%)" only for a share of the
// device); without one (a model with its own reserve) "79.7 GiB - 5.1 reserves = 74.6 GiB". The
// reserves are what the budget and the margin leave of the device: the CUDA context and the GEMM
// workspaces for weft's models, whose peak holds NCCL's buffers and the allocator's fragmentation.
std::string memory_budget_text(const Plan& p, const Estimate& e, const std::optional<MemoryMargin>& margin);

// Estimate e of plan p: step time, tokens/s, model TFLOP/s / GPU, MFU, the peak memory against the
// budget with the room left (memory_room_text; "DOES NOT FIT" when over) and what the budget is
// made of (memory_budget_text), then one row per stage (busy time, predicted memory and its
// weights, gradients, optimizer, activation and other parts -- logits, ZeRO's buffers, NCCL's
// buffers, fragmentation; " !" when the stage does not fit), then the non-zero parts of the step's
// time breakdown, two to a line.
std::string estimate_table(const Plan& p, const Estimate& e, const std::optional<MemoryMargin>& margin = std::nullopt);

// Notes for the reader: "note: <text>", word-wrapped at 80 columns, continuation lines starting
// under the text (six spaces). Empty for no notes.
std::string notes_text(const std::vector<std::string>& notes);

}  // namespace weft
