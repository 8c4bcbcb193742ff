// A task file planned on a cluster (docs/multitask.md): each module's scaling curve from weft's own
// search (its best plan alone on n GPUs with the task's batch), the operators (task, module) with
// the task's data flow as dependencies, Spindle's allocator over them, and the baselines on the
// same curves. Torch-free.
#pragma once

#include <map>
#include <tuple>
#include <string>
#include <vector>

#include "weft/cost/cost_model.h"
#include "weft/multitask/allocator.h"
#include "weft/plan/wave_plan.h"
#include "weft/spec/tasks.h"
#include "weft/search/search_options.h"
#include "weft/spec/cluster.h"

namespace weft::multitask {

// Activations that cross ranks at wave boundaries, forward and their gradients back
// (weft/plan/wave_plan.h wave_transfers on the placed plan): an operator moved from one piece to
// the next (its hidden states at that layer) and a flow from one module to another within a task
// (the source's output), each sample block that changes rank. 16-bit activations, forward and
// backward: 2 x elements x 2 bytes. A crossing (one operator's move, or one flow) takes, over
// its ranks, the most any rank sends or receives, priced as the cost model prices point-to-point
// messages (weft/cost/collectives.h p2p_time: its part inside the node on NVLink, its part across
// nodes on the network); time_s counts the crossings one after another, both directions. Before placement the allocator's choice of a level's plan prices a re-shard the same way,
// its busiest rank sending batch x tokens x hidden / min(sending, receiving GPUs) 16-bit elements,
// across nodes when either group is wider than a node (allocate()'s `extra`).
struct Traffic {
  double elements = 0;   // activation elements crossing, forward (the gradients return as many)
  double bytes = 0;      // forward and backward, 2 bytes an element
  double time_s = 0;
  int crossings = 0;
};

// The gradient reduction of layers that ran on more than one set of ranks (a module several tasks
// run, a module whose operator moved between pieces, a module sharing another's parameters): each
// such layer's gradients are all-reduced over every rank that ran it, once per step (fp32
// gradients, an all-reduce over the union as the cost model prices one, weft/cost/collectives.h:
// across nodes a ring whose node-crossing hops share the adapters of the members on each node). Each operator's curve already counts a reduction inside its own group,
// which the wider one replaces: a layer's reduction lasts the wider ring less the largest of its
// groups' own (an over-estimate by the other groups' own reductions, which the curves count too).
// Each rank's communication stream runs the reductions of its unions one after another, each from
// when the layer's gradient is final (the last backward of a piece that ran it has ended) and every
// rank of its union is free, beside the backward still running (reductions over disjoint unions
// run at once, as NCCL's communicators do); time_s is what they add after the last backward.
struct SharedSync {
  int groups = 0;        // distinct rank sets reduced over
  double bytes = 0;      // gradient bytes reduced, summed over the sets
  double time_s = 0;
};

// run_waves' input, one direction's time of each crossing by (receiving wave, task, from module,
// to module), and its output, each placed piece's forward and backward end and the last end.
using CrossingTimes = std::map<std::tuple<int, std::string, std::string, std::string>, double>;
// The shares of a piece's time its forward and its backward take (a backward costs twice its
// forward: Narayanan et al., SC'21, §3.2).
constexpr double kForwardShare = 1.0 / 3.0, kBackwardShare = 2.0 / 3.0;
struct WavesRun {
  double end_s = 0;
  std::vector<std::vector<double>> fwd_end, bwd_end;  // per wave, per piece
};

struct TasksPlan {
  std::vector<Op> ops;                 // "task/module", in task order then the task's module order
  struct OpOf {
    std::string task, module;
  };
  std::vector<OpOf> op_of;             // each operator's task and module
  Allocation allocation;
  WavePlan placement;                  // the waves on ranks: what `weft train --tasks` runs
  Traffic traffic;                     // between waves (time_s: the crossings one after another)
  SharedSync shared_sync;
  // The step as the runtime runs it: every rank runs its pieces' forwards in wave order, then their
  // backwards in reverse (a third and two thirds of a piece's time), each as soon as its ranks are
  // free and its input has crossed from the piece that makes it; no barrier between waves, so at
  // most allocation.makespan_s (the waves one after another) plus the crossings. Then what the
  // wider reductions add after the last backward.
  double compute_s = 0;
  double step_time_s() const { return compute_s + shared_sync.time_s; }
  WavesRun run;                        // each placed piece's forward and backward end in that run
  // The plan is priced whole, each candidate placed and run: the allocator's per-level choice, the
  // greedy wavefront on every level, the re-planned waves on every level, packed groups on every
  // level (each of allocator.h's kPackOrders orders, forwards and reversed), and the operators one
  // after another (each on its fastest count); the fastest is kept. in_turn: the last was, the
  // waves costing more once placed and priced (their crossings and wider reductions);
  // waves_step_s: the fastest waves' step time.
  bool in_turn = false;
  double waves_step_s = 0;
  double waves_makespan_s = 0;         // the waves' compute alone, one after another (against the bound)
  double waves_compute_s = 0;          // the waves' compute_s
  // The baselines' step times include the wider reductions their own placements need (*_shared_s:
  // a module several tasks run on different GPUs), priced as SharedSync.
  double sequential_s = 0, task_greedy_s = 0;
  double sequential_shared_s = 0, task_greedy_shared_s = 0;
  double curve_ms = 0;                 // the searches behind the curves
  double plan_ms = 0;                  // operators, allocation and baselines from the curves
};

// Ranks for each wave's pieces (Spindle's placement, simplified to consecutive ranks): pieces that
// continue an operator or receive a flow first, each where the fewest of its samples change rank
// (its previous piece's ranks, or its sources'), then the others by size; a range stays inside a
// node when it fits in one. A wave that cannot be packed that way is packed largest first from
// rank 0.
// p: its ops, op_of and allocation.
WavePlan place_waves(const TaskSpec& t, const TasksPlan& p, int gpus, int gpus_per_node);

// A placed plan run as the runtime runs it (TasksPlan::compute_s): every rank runs its pieces'
// forwards in wave order, then their backwards in reverse, a third and two thirds of each piece's
// time_s, each as soon as its ranks are free and its input has arrived: the piece that makes it
// has ended and the crossing (one direction's time, by receiving wave, task, from and to module)
// has passed. Returns each piece's forward and backward end, and the last end.
WavesRun run_waves(const TaskSpec& t, const WavePlan& p, const CrossingTimes& x = {});

// Each operator's curve: module m running its task's batch of m.tokens tokens, at each count n = 1,
// 2, 4, ... up to the cluster's GPUs (and that count itself), the step time of the best plan
// search() finds for the module alone on n GPUs of the cluster (its GPU and links, n of them),
// divided by its layers: one layer's share of the step. Counts where nothing fits or no plan
// divides the batch are left out; no count at all is an error naming the task, the module, the
// batch, the largest count tried and each count's reason. Every count still to search, of every
// module, is searched side by side (one thread each up to the machine's cores).
// Curves are cached by (module, batch) in `cache` across calls (a module every task runs with the
// same batch is searched once; so is a case planned again on more GPUs, whose counts extend it):
// each count's layer time, <= 0 where it is not a valid count.
using CurveCache = std::map<std::pair<std::string, int>, std::map<int, double>>;
Result<TasksPlan> plan_tasks(const TaskSpec& t, const ClusterSpec& cluster, const CostModel& cm,
                             const SearchOptions& base, CurveCache* cache = nullptr);

// The plan as JSON: kind "tasks", format_version (weft/plan/wave_plan.h), step_time_s (compute_s
// and the wider reductions), compute_s, waves_s (the
// waves one after another), allocation ("waves" or "in_turn"), waves_step_s, world, traffic {elements, bytes, time_s, crossings}, shared_sync {groups, bytes,
// time_s}, waves (each: start_s, time_s, modules [{name, task, module, gpus, first_rank,
// first_layer, layers, time_s}]), baselines {sequential_s, task_greedy_s, bound_s}, plan_ms,
// curve_ms, and the operators' curves. wave_plan_from_json (weft/plan/wave_plan.h) reads it back.
Json to_json(const TasksPlan& p);

}  // namespace weft::multitask
