// A task file planned on a cluster (docs/multitask.md): each module's scaling curve from weft's own
// search (its best plan alone on n GPUs with the task's batch), the operators (task, module) with
// the task's data flow as dependencies, Spindle's allocator over them, and the baselines on the
// same curves. Torch-free.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "weft/cost/cost_model.h"
#include "weft/multitask/allocator.h"
#include "weft/spec/tasks.h"
#include "weft/search/search_options.h"
#include "weft/spec/cluster.h"

namespace weft::multitask {

// Module m running `batch` samples of m.tokens tokens: at each count n = 1, 2, 4, ... up to
// max_gpus (and max_gpus itself) the step time of the best plan search() finds for the module alone
// on n GPUs of `cluster` (the cluster's GPU and links, n of them), divided by its layers: one
// layer's share of the step. Counts where nothing fits or no plan divides the batch are left out;
// no count at all is an error naming the module, the batch and the largest count tried. `known`,
// when given, holds the counts already searched (<= 0: not a valid count) and receives the new ones.
Result<Curve> module_curve(const Module& m, int batch, const ClusterSpec& cluster, int max_gpus, const CostModel& cm,
                           const SearchOptions& base, std::map<int, double>* known = nullptr);

// Activations that cross device groups at wave boundaries, forward and their gradients back: an
// operator whose GPU count changes from one piece to the next (its hidden states at that layer,
// re-sharded onto the new group), and a flow from one module to another within a task (the
// source's output, sent to the target's group). Each moves 2 x batch x tokens x hidden x 2 bytes
// (16-bit activations, forward and backward) over min(sending, receiving) GPUs' links: NVLink when
// both groups fit in a node, else the inter-node network. Groups are not yet placed on nodes: the
// NVLink price assumes the placement Spindle makes (an operator's groups in one NVLink island where
// they fit). The transfers are counted one after another, with no overlap; the allocator's choice
// of a level's plan counts its re-shards (allocate()'s `extra`).
struct Traffic {
  double bytes = 0;
  double time_s = 0;
  int crossings = 0;
};

struct TasksPlan {
  std::vector<Op> ops;                 // "task/module", in task order then the task's module order
  struct OpOf {
    std::string task, module;
  };
  std::vector<OpOf> op_of;             // each operator's task and module
  Allocation allocation;
  Traffic traffic;                     // between waves; step_time_s() adds it to the waves' time
  double step_time_s() const { return allocation.makespan_s + traffic.time_s; }
  double sequential_s = 0, task_greedy_s = 0;
  double curve_ms = 0;                 // the searches behind the curves
  double plan_ms = 0;                  // operators, allocation and baselines from the curves
};

// Curves are cached by (module, batch) in `cache` across calls (a module every task runs with the
// same batch is searched once; so is a case planned again on more GPUs, whose counts extend it).
using CurveCache = std::map<std::pair<std::string, int>, std::map<int, double>>;
Result<TasksPlan> plan_tasks(const TaskSpec& t, const ClusterSpec& cluster, const CostModel& cm,
                             const SearchOptions& base, CurveCache* cache = nullptr);

// The plan as JSON: step_time_s (the waves and the traffic between them), waves_s, traffic
// {bytes, time_s, crossings}, waves (each: start_s, time_s, modules [{name, task, module, gpus,
// layers, time_s}]), baselines {sequential_s, task_greedy_s, bound_s}, plan_ms, curve_ms, and the
// operators' curves.
Json to_json(const TasksPlan& p);

}  // namespace weft::multitask
