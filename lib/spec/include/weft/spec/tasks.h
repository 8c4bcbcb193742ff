// Multi-task, multi-module models (docs/model-spec.md, "Multi-task models"): named modules, each a
// stack of equal transformer layers with its own shape and tokens per sample (a ViT, an audio
// encoder, a text encoder, an LLM), the data flow between them, modules sharing parameters, and
// tasks, each running some of the modules on its own batch with its own loss. Torch-free.
#pragma once

#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/json.h"
#include "weft/spec/model.h"

namespace weft::multitask {

struct Module {
  std::string name;
  ModelSpec model;     // the module as a model of its own: its layers, and a table of `vocab` rows
                       // for its input and output projections (a ViT's patch embedding, a
                       // projection head; an LLM's vocabulary)
  int tokens = 0;      // tokens per sample it runs on
  std::string shares;  // another module whose parameters it uses (empty: its own)
  // The module whose parameters it runs (itself, or the one it shares).
  const std::string& holder() const { return shares.empty() ? name : shares; }
};

struct Flow {
  std::string from, to;  // `from`'s output feeds `to` (its activations, and their gradients back)
};

struct Task {
  std::string name;
  std::vector<std::string> modules;  // the modules the task runs (their flows among them)
  int batch = 0;                     // samples per step
  std::string loss;                  // a label ("contrastive", "lm", ...); the plan does not read it
  bool runs(const std::string& module) const;
};

struct TaskSpec {
  std::string name;
  std::vector<Module> modules;
  std::vector<Flow> flows;
  std::vector<Task> tasks;
  int module_index(const std::string& name) const;  // -1 if none
  const Module& module(const std::string& name) const;  // one that exists (an invariant)
  const Task* task(const std::string& name) const;      // nullptr if none
};

// Parses a task file; every error names the field, the task or module and the numbers (a task
// naming a module that does not exist, a flow between unknown modules, a cycle in the data flow,
// a module sharing parameters with one of another shape, a batch that is not positive).
Result<TaskSpec> tasks_from_json(const Json& j, const std::string& path = "tasks");
Result<TaskSpec> load_tasks(const std::string& path);
Status validate(const TaskSpec& t);
Json to_json(const TaskSpec& t);

// The modules a task runs in dependency order (each after every module that flows into it).
std::vector<int> task_order(const TaskSpec& t, const Task& task);

}  // namespace weft::multitask
