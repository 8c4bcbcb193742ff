#include "weft/spec/tasks.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "weft/core/assert.h"
#include "weft/spec/presets.h"

namespace weft::multitask {

namespace {

// A module given by its shape: one stack of `layers` equal layers (bidirectional encoder layers
// unless kind is "decoder"), LayerNorm with biases and a GELU FFN unless ffn_kind says swiglu,
// learned positions over its tokens, and a table of `vocab` rows for its input and output
// projections (default 1024: a ViT's patch projection, an encoder's projection head, both small
// beside its layers; a text encoder's or an LLM's vocabulary), tied (one table) unless `tied` is
// false (default for decoders).
ModelSpec shape_module(const JsonObj& o, const std::string& name, int tokens) {
  ModelSpec m;
  m.name = name;
  m.vocab = o.integer_or("vocab", 1024);
  m.hidden = o.integer("hidden");
  m.norm = NormKind::kLayerNorm;
  m.position = PositionKind::kLearned;
  m.max_seq = tokens;
  LayerGroup g;
  g.name = name;
  g.count = static_cast<int>(o.integer("layers"));
  LayerShape& s = g.shape;
  const std::string kind = o.str_or("kind", "encoder");
  if (kind != "encoder" && kind != "decoder")
    o.fail("kind", "expected \"encoder\" or \"decoder\", got \"" + kind + "\"");
  s.kind = kind == "encoder" ? LayerKind::kEncoder : LayerKind::kDecoder;
  // An encoder's output projection is small beside its input table (counted once); a decoder's
  // vocabulary head is a table of its own unless the file ties them.
  m.tied_embeddings = o.boolean_or("tied", kind == "encoder");
  s.hidden = m.hidden;
  s.heads = static_cast<int>(o.integer("heads"));
  s.kv_heads = static_cast<int>(o.integer_or("kv_heads", s.heads));
  if (s.heads <= 0 || m.hidden % s.heads != 0)
    o.fail("heads", std::to_string(s.heads) + " does not divide the hidden size " + std::to_string(m.hidden));
  s.head_dim = static_cast<int>(m.hidden / s.heads);
  s.ffn = o.integer_or("ffn", 4 * m.hidden);
  const std::string ffn_kind = o.str_or("ffn_kind", "gelu");
  if (ffn_kind != "gelu" && ffn_kind != "swiglu")
    o.fail("ffn_kind", "expected \"gelu\" or \"swiglu\", got \"" + ffn_kind + "\"");
  s.ffn_kind = ffn_kind == "gelu" ? FfnKind::kGelu : FfnKind::kSwiglu;
  s.bias = ffn_kind == "gelu";
  if (g.count <= 0) o.fail("layers", "must be positive, got " + std::to_string(g.count));
  m.groups.push_back(std::move(g));
  return m;
}

}  // namespace

int TaskSpec::module_index(const std::string& n) const {
  for (size_t i = 0; i < modules.size(); ++i)
    if (modules[i].name == n) return static_cast<int>(i);
  return -1;
}

const Module& TaskSpec::module(const std::string& n) const {
  const int i = module_index(n);
  WEFT_ASSERT(i >= 0, "a module the task file does not have");
  return modules[static_cast<size_t>(i)];
}

const Task* TaskSpec::task(const std::string& n) const {
  for (const Task& x : tasks)
    if (x.name == n) return &x;
  return nullptr;
}

bool Task::runs(const std::string& module) const {
  return std::find(modules.begin(), modules.end(), module) != modules.end();
}

Status validate(const TaskSpec& t) {
  auto fail = [&](const std::string& msg) -> Status { return Error{ErrorKind::kBadInput, t.name + ": " + msg}; };
  if (t.modules.empty()) return fail("modules: none given");
  if (t.tasks.empty()) return fail("tasks: none given");
  std::set<std::string> names;
  for (const Module& m : t.modules) {
    if (m.name.empty()) return fail("modules: a module without a name");
    if (!names.insert(m.name).second) return fail("modules: \"" + m.name + "\" is named twice");
    if (m.tokens <= 0) return fail("module \"" + m.name + "\": tokens must be positive, got " + std::to_string(m.tokens));
    if (Status s = weft::validate(m.model); !s.ok())
      return fail("module \"" + m.name + "\": " + s.error().message);
  }
  for (const Module& m : t.modules) {
    if (m.shares.empty()) continue;
    const int o = t.module_index(m.shares);
    if (o < 0) return fail("module \"" + m.name + "\": shares names \"" + m.shares + "\", which is not a module");
    const Module& other = t.modules[static_cast<size_t>(o)];
    if (other.name == m.name) return fail("module \"" + m.name + "\": shares names itself");
    if (!other.shares.empty())
      return fail("module \"" + m.name + "\": shares \"" + other.name + "\", which shares \"" + other.shares +
                  "\" in turn; name the module that holds the parameters");
    bool same = other.model.groups.size() == m.model.groups.size() && other.model.vocab == m.model.vocab &&
                other.model.hidden == m.model.hidden;
    for (size_t g = 0; same && g < m.model.groups.size(); ++g)
      same = m.model.groups[g].count == other.model.groups[g].count && m.model.groups[g].shape == other.model.groups[g].shape;
    if (!same)
      return fail("module \"" + m.name + "\": shares the parameters of \"" + other.name +
                  "\" but its layers differ (" + std::to_string(m.model.num_layers()) + " layers of hidden " +
                  std::to_string(m.model.hidden) + " against " + std::to_string(other.model.num_layers()) +
                  " of " + std::to_string(other.model.hidden) + ")");
  }
  const int n = static_cast<int>(t.modules.size());
  std::vector<std::vector<int>> next(static_cast<size_t>(n));
  for (const Flow& f : t.flows) {
    const int a = t.module_index(f.from), b = t.module_index(f.to);
    if (a < 0) return fail("flows: \"" + f.from + "\" is not a module");
    if (b < 0) return fail("flows: \"" + f.to + "\" is not a module");
    if (a == b) return fail("flows: \"" + f.from + "\" flows into itself");
    next[static_cast<size_t>(a)].push_back(b);
  }
  // A cycle: depth-first search, naming the modules on it.
  std::vector<int> state(static_cast<size_t>(n), 0), path;
  std::string cycle;
  std::function<bool(int)> dfs = [&](int v) {
    state[v] = 1;
    path.push_back(v);
    for (int w : next[v]) {
      if (state[w] == 1) {
        auto it = std::find(path.begin(), path.end(), w);
        for (; it != path.end(); ++it) cycle += t.modules[*it].name + " -> ";
        cycle += t.modules[w].name;
        return true;
      }
      if (state[w] == 0 && dfs(w)) return true;
    }
    path.pop_back();
    state[v] = 2;
    return false;
  };
  for (int v = 0; v < n; ++v)
    if (state[v] == 0 && dfs(v)) return fail("flows: a cycle (" + cycle + ")");
  std::set<std::string> task_names;
  for (const Task& task : t.tasks) {
    if (task.name.empty()) return fail("tasks: a task without a name");
    if (!task_names.insert(task.name).second) return fail("tasks: \"" + task.name + "\" is named twice");
    if (task.batch <= 0)
      return fail("task \"" + task.name + "\": batch must be positive, got " + std::to_string(task.batch));
    if (task.modules.empty()) return fail("task \"" + task.name + "\": modules: none given");
    std::set<std::string> seen;
    for (const std::string& m : task.modules) {
      if (t.module_index(m) < 0)
        return fail("task \"" + task.name + "\": module \"" + m + "\" does not exist (modules: " + [&] {
                 std::string s;
                 for (const Module& x : t.modules) s += (s.empty() ? "" : ", ") + x.name;
                 return s;
               }() + ")");
      if (!seen.insert(m).second) return fail("task \"" + task.name + "\": module \"" + m + "\" is named twice");
    }
  }
  return {};
}

std::vector<int> task_order(const TaskSpec& t, const Task& task) {
  std::vector<int> mods;
  for (const std::string& m : task.modules) mods.push_back(t.module_index(m));
  std::vector<int> out;
  std::set<int> done;
  // Kahn's order restricted to the task's modules, ties by the task's listing.
  while (out.size() < mods.size()) {
    bool moved = false;
    for (int m : mods) {
      if (done.count(m)) continue;
      bool ready = true;
      for (const Flow& f : t.flows) {
        const int a = t.module_index(f.from), b = t.module_index(f.to);
        if (b == m && !done.count(a) && std::find(mods.begin(), mods.end(), a) != mods.end()) ready = false;
      }
      if (!ready) continue;
      out.push_back(m);
      done.insert(m);
      moved = true;
    }
    if (!moved) break;  // a cycle; validate() refuses it
  }
  return out;
}

Result<TaskSpec> tasks_from_json(const Json& j, const std::string& path) {
  return catch_errors([&]() -> Result<TaskSpec> {
    JsonObj o(j, path);
    o.reject_unknown({"name", "modules", "flows", "tasks"});
    TaskSpec t;
    t.name = o.str_or("name", path);
    for (const JsonObj& mo : o.array_of_obj("modules")) {
      Module m;
      m.name = mo.str("name");
      m.tokens = static_cast<int>(mo.integer("tokens"));
      m.shares = mo.str_or("shares", "");
      if (mo.has("model")) {
        mo.reject_unknown({"name", "tokens", "shares", "model"});
        const Json& spec = mo.json().at("model");
        if (spec.is_string()) {
          Result<ModelSpec> r = load_model(spec.get<std::string>());
          if (!r.ok()) mo.fail("model", r.error().message);
          m.model = *r;
        } else {
          Result<ModelSpec> r = model_from_json(spec, mo.field("model"));
          if (!r.ok()) return r.error();
          m.model = *r;
        }
      } else {
        mo.reject_unknown({"name", "tokens", "shares", "kind", "layers", "hidden", "heads", "kv_heads", "ffn",
                           "ffn_kind", "vocab", "tied"});
        m.model = shape_module(mo, m.name, m.tokens);
      }
      t.modules.push_back(std::move(m));
    }
    if (o.has("flows"))
      for (const JsonObj& fo : o.array_of_obj("flows")) {
        fo.reject_unknown({"from", "to"});
        t.flows.push_back({fo.str("from"), fo.str("to")});
      }
    for (const JsonObj& to : o.array_of_obj("tasks")) {
      to.reject_unknown({"name", "modules", "batch", "loss"});
      Task task;
      task.name = to.str("name");
      task.modules = to.array_of_str("modules");
      task.batch = static_cast<int>(to.integer("batch"));
      task.loss = to.str_or("loss", "");
      t.tasks.push_back(std::move(task));
    }
    if (Status s = validate(t); !s.ok()) return t.name == path ? s.error() : s.error().with_context(path);
    return t;
  });
}

Result<TaskSpec> load_tasks(const std::string& path) {
  return catch_errors([&]() -> Result<TaskSpec> { return tasks_from_json(read_json_file(path), path); });
}

Json to_json(const TaskSpec& t) {
  Json j;
  j["name"] = t.name;
  j["modules"] = Json::array();
  for (const Module& m : t.modules) {
    Json mj;
    mj["name"] = m.name;
    mj["tokens"] = m.tokens;
    if (!m.shares.empty()) mj["shares"] = m.shares;
    mj["model"] = weft::to_json(m.model);
    j["modules"].push_back(std::move(mj));
  }
  j["flows"] = Json::array();
  for (const Flow& f : t.flows) j["flows"].push_back({{"from", f.from}, {"to", f.to}});
  j["tasks"] = Json::array();
  for (const Task& task : t.tasks) {
    Json tj{{"name", task.name}, {"modules", task.modules}, {"batch", task.batch}};
    if (!task.loss.empty()) tj["loss"] = task.loss;
    j["tasks"].push_back(std::move(tj));
  }
  return j;
}

}  // namespace weft::multitask
