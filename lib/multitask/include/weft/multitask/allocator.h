// Spindle's allocator (ASPLOS'25; docs/multitask.md): GPUs for the operators of concurrent tasks,
// on scaling curves given per operator. Torch-free, no dependency above weft/core.
//
// An operator ("MetaOp") is a stack of `layers` equal layers that runs on any valid GPU count n of
// its curve, one layer taking curve.t(n) seconds there (forward and backward of its batch); its
// dependencies must finish before it starts. Operators are grouped into levels by dependency depth
// (level 0: no dependencies; level d: the longest chain of dependencies before it is d), each
// level solved alone and the levels run one after another.
//
//   continuous bound (per level): every operator of the level runs from 0 to C on n_m(C) GPUs, a
//     real number interpolated between the curve's valid counts, with T_m(n_m) x L_m = C and
//     sum n_m = N; C found by bisection (Spindle's Theorem 1; C between max_m T_m(N) L_m and
//     sum_m T_m(1) L_m). A curve whose first count is above 1 is extended below it as perfect
//     scaling (t(n) = t(n0) n0 / n), so that any N can hold every operator.
//   discretisation: each operator's n_m between its two neighbouring valid counts lo <= n_m <= hi,
//     its layers split between them (l_hi on hi GPUs, l_lo on lo GPUs, l_hi + l_lo = L_m,
//     T(hi) l_hi + T(lo) l_lo as close to C as whole layers allow).
//   waves (a greedy wavefront, Spindle §3): each wave admits at most one piece per operator,
//     operators with the longest planned time left first, each on the smaller count it still has
//     layers for (so that every operator can start at once, as in the bound), while the GPUs add
//     up to <= N; GPUs left over move operators to their larger count, then widen them to a larger
//     valid count that runs a layer faster; the wave lasts as long as its shortest piece (at least
//     one layer of each), and every piece runs the whole layers that fit in it. An operator's next
//     piece is in a later wave. Two more plans of the level are tried, the shortest of the three
//     kept: waves re-planned before each wave on the layers left (the bound of what is left,
//     counts rounded down to valid ones, spare GPUs by the largest fall in time per GPU, the wave
//     ending where one operator finishes), and the operators one after another, each on its
//     fastest count <= N (so a plan is never slower than that).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "weft/core/error.h"

namespace weft::multitask {

// Time of one layer on n GPUs, for the valid counts n (ascending, distinct, each >= 1).
struct Curve {
  std::vector<int> n;
  std::vector<double> t;
  // The time at count x: the curve's value where x is a valid count; between two valid counts
  // linear in 1/n (what dividing the work w / n gives); below the first valid count n0 perfect
  // scaling from it; above the last, its value.
  double at(double x) const;
};

struct Op {
  std::string name;
  int layers = 1;
  Curve curve;
  std::vector<int> deps;  // indices of operators that must finish before this one starts
};

// One piece of an operator in a wave.
struct Piece {
  int op = 0;
  int gpus = 0;
  int layers = 0;
  double time_s = 0;  // layers x curve.at(gpus)
  int first_rank = -1;  // its ranks [first_rank, first_rank + gpus) where the plan fixes them (packed groups)
};

struct Wave {
  double start_s = 0;
  double time_s = 0;  // the longest piece of the wave
  std::vector<Piece> pieces;
};

struct Allocation {
  double makespan_s = 0;         // sum of the waves' times
  double bound_s = 0;            // sum over levels of the continuous bound
  std::vector<double> level_bound_s;
  std::vector<Wave> waves;
};

// Checks the operators (layers >= 1, curves non-empty with ascending positive counts and positive
// times, dependencies in range, no cycle) and N >= 1; errors name the operator and the numbers.
Status check_ops(const std::vector<Op>& ops, int gpus);
// The levels (operator indices of each level, in index order).
Result<std::vector<std::vector<int>>> levels(const std::vector<Op>& ops);
// The continuous bound of one level's operators on N GPUs, and each operator's real GPU count.
struct Bound {
  double c_s = 0;
  std::vector<double> gpus;  // per operator of `level`, in its order
};
Result<Bound> continuous_bound(const std::vector<Op>& ops, const std::vector<int>& level, int gpus);
// The whole plan: levels, bounds, discretisation, waves. `extra`, when given, prices what a level's
// waves cost beyond their time (the traffic of operators re-sharded between waves): of the three
// plans of a level the one with the least time + extra is kept (Allocation::makespan_s stays the
// waves' time).
// kBest keeps, per level, the plan of least time + extra; the other modes take one plan on every
// level: kWavefront the greedy wavefront, kReplanned the re-planned waves, kInTurn the operators
// one after another, kPacked groups packed by wrap-around.
//
// Packed groups (McNaughton's wrap-around on whole layers and GPU groups, with a buddy allocator's
// halving): the N GPUs are cut into groups of valid counts, each running pieces back to back within
// a length C. Every operator takes the count of least GPU-seconds that runs it whole within C.
//   - One that does not fit in what is left of the open slot runs its last k layers at the end of
//     it and its first layers at the start of the next slot (a sub-slot, or a new group from time 0
//     of the fewest GPUs that can): max(s_A, s_B + r) + k t_A <= C (s: the slots' free times, r:
//     the first layers' time) keeps the two pieces apart and within C.
//   - One of a smaller count that runs whole in what is left of the open slot cuts that remainder
//     into sub-slots of the fewest GPUs, from its count, that run it whole there (a group of 16
//     running a large encoder, then two of 8 running smaller ones).
// C is the least length that packs (bisection from the level's bound). The groups get ranks largest
// first (Piece::first_rank); the waves number the pieces by start, each after the pieces before it
// on its ranks. kPackedReversed runs the same packing backwards in time, so that the operators of
// the largest counts run their forwards last and their backwards first (their gradients' wider
// reductions start early). A run without barriers between waves (plan_tasks.h run_waves) runs each
// slot's pieces back to back, so the level lasts about C; the waves one after another (makespan_s)
// last longer. A level no length packs runs its operators one after another.
using WaveCost = std::function<double(const std::vector<Wave>&)>;
enum class AllocateMode { kBest, kWavefront, kReplanned, kInTurn, kPacked, kPackedReversed };
// pack_order (kPacked, kPackedReversed): -1 packs each level in the order of operators whose
// groups end first; 0 to kPackOrders - 1 in that one order (operators by count, largest or
// smallest first, then by time, longest or shortest first; the new group an operator's first
// layers open: the fewest GPUs that can, or its own count), for a caller that prices each.
constexpr int kPackOrders = 8;
Result<Allocation> allocate(const std::vector<Op>& ops, int gpus, const WaveCost& extra = {},
                            AllocateMode mode = AllocateMode::kBest, int pack_order = -1);

// Baselines on the same curves. A task is a set of operators (with their dependencies among them).
// sequential: each task in turn on all N GPUs (its operators one after another, each on the largest
//   valid count <= N): how Megatron-LM and DeepSpeed run such models.
// task_greedy: Spindle's task-level baseline ("Spindle-Optimus"): every task starts with its
//   smallest valid count; repeatedly the task with the largest (T(n) - T(n')) / (n' - n) takes its
//   next valid count n' while the sum stays <= N; tasks then run side by side, the step as long as
//   the slowest. A task's time on n GPUs is its operators' times one after another on the largest
//   valid count <= n of each. When the tasks' smallest counts add up to more than N, the tasks run
//   in rounds (in order, each round as many as fit), one round after another.
struct TaskOps {
  std::string name;
  std::vector<int> ops;
};
// `runs`, when given, receives where and when each task ran (in the tasks' order): its ranks
// [first_rank, first_rank + gpus) (sequential: all N; task_greedy: consecutive ranges in each round),
// its start and its time, and the GPUs each of its operators ran on (the largest valid count <= gpus).
struct TaskRun {
  int first_rank = 0, gpus = 0;
  double start_s = 0, time_s = 0;
  std::vector<int> op_gpus;  // per operator of the task, in its order
};
Result<double> sequential_time(const std::vector<Op>& ops, const std::vector<TaskOps>& tasks, int gpus,
                               std::vector<TaskRun>* runs = nullptr);
Result<double> task_greedy_time(const std::vector<Op>& ops, const std::vector<TaskOps>& tasks, int gpus,
                                std::vector<TaskRun>* runs = nullptr);

}  // namespace weft::multitask
