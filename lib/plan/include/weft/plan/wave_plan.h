// The plan of a multi-task model (docs/multitask.md, "Running the waves"): waves of pieces, each
// piece one operator (a task's module) running some of its layers on a range of consecutive
// ranks, the pieces of one wave on disjoint ranks. What `weft plan --tasks` writes and
// `weft train --plan P --tasks FILE` runs; the samples a piece's ranks hold and the activations
// that cross between pieces (the planner prices them, the runtime sends them) are defined here
// once. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/json.h"
#include "weft/spec/tasks.h"

namespace weft {

struct WavePiece {
  std::string task, module;
  int first_rank = 0, gpus = 1;    // ranks [first_rank, first_rank + gpus)
  int first_layer = 0, layers = 0; // the module's layers [first_layer, first_layer + layers)
  double time_s = 0;               // the planner's estimate (not read by the runtime)
};

struct WavePlan {
  int world = 1;
  std::vector<std::vector<WavePiece>> waves;
};

// The version of the multi-task plan file ("kind": "tasks", "format_version": 1).
constexpr int kWavePlanFormatVersion = 1;

// Reads the `world` and `waves` of a `weft plan --tasks --format json` file (each wave's
// `modules`: task, module, first_rank, gpus, first_layer, layers; the planner's other keys, its
// times, baselines and curves, are not read). `kind` must be "tasks" and `format_version` 1; the
// errors name the field (a one-model plan given for a multi-task one is named as such).
Result<WavePlan> wave_plan_from_json(const Json& j, const std::string& path = "plan");
Result<WavePlan> load_wave_plan(const std::string& path);

// Checks a plan against its task file; errors (kBadInput) name the wave, the task, the module and
// the numbers: a task or module the file does not have, ranks outside [0, world), two pieces of one
// wave on a common rank, an operator's pieces that do not cover its layers in order, an operator
// that starts before a module flowing into it has finished, an operator the plan leaves out.
Status validate(const WavePlan& p, const multitask::TaskSpec& t);

// Each task's modules one after another (in task_order), each on all `world` ranks: the plan a run
// without --plan executes, and on one rank the single-process reference of every other plan.
WavePlan sequential_wave_plan(const multitask::TaskSpec& t, int world);

// The rank of a piece that holds sample s of a batch of `batch` (consecutive shares, the first
// ranks one sample more when gpus does not divide the batch).
int rank_of_sample(int first_rank, int gpus, int batch, int s);
// The samples [first, first + n) that `rank` holds of such a piece ({0, 0}: none).
std::pair<int, int> samples_of_rank(int first_rank, int gpus, int batch, int rank);

// The batch's samples from one piece's ranks to another's, in runs of consecutive samples with
// one rank on each side (src == dst included: the samples that stay), in sample order.
struct SampleBlock {
  int src = 0, dst = 0, first = 0, n = 0;
};
std::vector<SampleBlock> sample_blocks(int batch, const WavePiece& from, const WavePiece& to);

// Activations crossing between pieces, forward (their gradients return the same way): from an
// operator's piece to its next piece (the hidden states at that layer), and from the last piece of
// a module to the first piece of each module it flows into within the task (the source's output).
// One entry per block of consecutive samples that changes rank.
struct WaveTransfer {
  int wave = 0;                 // the wave of the receiving piece
  std::string task, from, to;   // modules (from == to: an operator moved between pieces)
  int src_rank = 0, dst_rank = 0;
  int first_sample = 0, samples = 0;
  std::int64_t elements = 0;    // samples x the source's tokens x its hidden size
};
// Requires validate(p, t) to pass.
std::vector<WaveTransfer> wave_transfers(const WavePlan& p, const multitask::TaskSpec& t);

}  // namespace weft
