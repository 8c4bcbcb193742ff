#include "weft/multitask/plan_tasks.h"

#include <algorithm>
#include <chrono>

#include "weft/search/search.h"

namespace weft::multitask {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The counts a module is searched at: powers of two up to max_gpus, and max_gpus itself.
std::vector<int> counts_up_to(int max_gpus) {
  std::vector<int> n;
  for (int x = 1; x <= max_gpus; x *= 2) n.push_back(x);
  if (n.back() != max_gpus) n.push_back(max_gpus);
  return n;
}

// One layer's share of the best step time of module m on n GPUs (<= 0: nothing fits or divides).
Result<double> layer_time(const Module& m, int batch, const ClusterSpec& cluster, int n, const CostModel& cm,
                          const SearchOptions& base) {
  ClusterOverrides ov;
  ov.gpus = n;
  if (n < cluster.gpus_per_node) ov.gpus_per_node = n;
  Result<ClusterSpec> c = apply_overrides(cluster, ov);
  if (!c.ok()) return c.error();
  SearchOptions opt = base;
  opt.seq = m.tokens;
  opt.global_batch = batch;
  Result<SearchResult> r = search(m.model, *c, cm, opt);
  if (!r.ok()) return -1.0;  // no configuration divides this batch on n GPUs: not a valid count
  if (r->top.empty()) return -1.0;
  const Plan& best = r->top.front();
  return best.predicted.step_time_s / m.model.num_layers();
}

}  // namespace

Result<Curve> module_curve(const Module& m, int batch, const ClusterSpec& cluster, int max_gpus, const CostModel& cm,
                           const SearchOptions& base, std::map<int, double>* known) {
  std::map<int, double> local;
  std::map<int, double>& times = known ? *known : local;
  Curve c;
  for (int n : counts_up_to(max_gpus)) {
    auto it = times.find(n);
    if (it == times.end()) {
      Result<double> t = layer_time(m, batch, cluster, n, cm, base);
      if (!t.ok()) return t.error();
      it = times.emplace(n, *t).first;
    }
    if (it->second > 0) c.n.push_back(n), c.t.push_back(it->second);
  }
  if (c.n.empty())
    return Error{ErrorKind::kBadInput, "module \"" + m.name + "\" fits on no group of 1 to " + std::to_string(max_gpus) +
                                           " GPUs of " + cluster.gpu.name + " with a batch of " +
                                           std::to_string(batch) + " (or no count divides it)"};
  return c;
}

Result<TasksPlan> plan_tasks(const TaskSpec& t, const ClusterSpec& cluster, const CostModel& cm,
                             const SearchOptions& base, CurveCache* cache) {
  if (Status s = validate(t); !s.ok()) return s.error();
  const int N = cluster.total_gpus();
  TasksPlan p;
  const auto t0 = std::chrono::steady_clock::now();
  CurveCache local;
  CurveCache& cc = cache ? *cache : local;
  std::map<std::pair<std::string, int>, Curve> curves;
  for (const Task& task : t.tasks)
    for (const std::string& name : task.modules) {
      const auto key = std::make_pair(name, task.batch);
      if (curves.count(key)) continue;
      const Module& m = t.modules[static_cast<size_t>(t.module_index(name))];
      Result<Curve> c = module_curve(m, task.batch, cluster, N, cm, base, &cc[key]);
      if (!c.ok()) return c.error().with_context("task \"" + task.name + "\"");
      curves[key] = std::move(*c);
    }
  p.curve_ms = ms_since(t0);
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<TaskOps> tasks;
  struct OpShape {
    double batch = 0, tokens = 0, hidden = 0;
  };
  std::vector<OpShape> shape;
  std::vector<std::pair<int, int>> flows;  // (source operator, target operator)
  for (const Task& task : t.tasks) {
    TaskOps to;
    to.name = task.name;
    std::map<int, int> op_of;  // module index -> operator
    for (int mi : task_order(t, task)) {
      const Module& m = t.modules[static_cast<size_t>(mi)];
      Op op;
      op.name = task.name + "/" + m.name;
      p.op_of.push_back({task.name, m.name});
      op.layers = m.model.num_layers();
      op.curve = curves.at({m.name, task.batch});
      for (const Flow& f : t.flows)
        if (f.to == m.name) {
          auto it = op_of.find(t.module_index(f.from));
          if (it != op_of.end()) {
            op.deps.push_back(it->second);
            flows.emplace_back(it->second, static_cast<int>(p.ops.size()));
          }
        }
      shape.push_back({static_cast<double>(task.batch), static_cast<double>(m.tokens),
                       static_cast<double>(m.model.hidden)});
      op_of[mi] = static_cast<int>(p.ops.size());
      to.ops.push_back(static_cast<int>(p.ops.size()));
      p.ops.push_back(std::move(op));
    }
    tasks.push_back(std::move(to));
  }
  // Traffic between waves (TasksPlan::traffic): a re-shard between two groups that each fit in a
  // node on NVLink, else on the inter-node network; a flow likewise by its two groups.
  auto link_for = [&](int from_gpus, int to_gpus) -> const LinkSpec& {
    return std::max(from_gpus, to_gpus) <= cluster.gpus_per_node ? cluster.intra : cluster.inter;
  };
  auto crossing_bytes = [](const OpShape& s) { return 2.0 * s.batch * s.tokens * s.hidden * 2.0; };
  auto crossing_s = [&](const OpShape& s, int from_gpus, int to_gpus) {
    const LinkSpec& link = link_for(from_gpus, to_gpus);
    return crossing_bytes(s) / (std::min(from_gpus, to_gpus) * link.gbps * 1e9) + 2 * link.latency_us * 1e-6;
  };
  // The re-shards of a level's waves, for the allocator's choice between its plans.
  const WaveCost reshards = [&](const std::vector<Wave>& waves) {
    std::map<int, int> last;
    double t = 0;
    for (const Wave& w : waves)
      for (const Piece& pc : w.pieces) {
        auto it = last.find(pc.op);
        if (it != last.end() && it->second != pc.gpus) t += crossing_s(shape[static_cast<size_t>(pc.op)], it->second, pc.gpus);
        last[pc.op] = pc.gpus;
      }
    return t;
  };
  Result<Allocation> a = allocate(p.ops, N, reshards);
  if (!a.ok()) return a.error();
  p.allocation = std::move(*a);
  auto move = [&](const OpShape& s, int from_gpus, int to_gpus) {
    p.traffic.bytes += crossing_bytes(s);
    p.traffic.time_s += crossing_s(s, from_gpus, to_gpus);
    ++p.traffic.crossings;
  };
  std::vector<std::vector<const Piece*>> pieces(p.ops.size());
  for (const Wave& w : p.allocation.waves)
    for (const Piece& pc : w.pieces) pieces[static_cast<size_t>(pc.op)].push_back(&pc);
  for (size_t o = 0; o < p.ops.size(); ++o)
    for (size_t k = 1; k < pieces[o].size(); ++k)
      if (pieces[o][k]->gpus != pieces[o][k - 1]->gpus) move(shape[o], pieces[o][k - 1]->gpus, pieces[o][k]->gpus);
  for (const auto& [src, dst] : flows)
    move(shape[static_cast<size_t>(src)], pieces[static_cast<size_t>(src)].back()->gpus,
         pieces[static_cast<size_t>(dst)].front()->gpus);
  Result<double> seq = sequential_time(p.ops, tasks, N);
  if (!seq.ok()) return seq.error();
  p.sequential_s = *seq;
  Result<double> greedy = task_greedy_time(p.ops, tasks, N);
  if (!greedy.ok()) return greedy.error();
  p.task_greedy_s = *greedy;
  p.plan_ms = ms_since(t1);
  return p;
}

Json to_json(const TasksPlan& p) {
  Json j;
  j["step_time_s"] = p.step_time_s();
  j["waves_s"] = p.allocation.makespan_s;
  j["traffic"] = {{"bytes", p.traffic.bytes}, {"time_s", p.traffic.time_s}, {"crossings", p.traffic.crossings}};
  j["waves"] = Json::array();
  for (const Wave& w : p.allocation.waves) {
    Json wj{{"start_s", w.start_s}, {"time_s", w.time_s}, {"modules", Json::array()}};
    for (const Piece& pc : w.pieces) {
      const TasksPlan::OpOf& of = p.op_of[static_cast<size_t>(pc.op)];
      wj["modules"].push_back({{"name", p.ops[static_cast<size_t>(pc.op)].name},
                               {"task", of.task},
                               {"module", of.module},
                               {"gpus", pc.gpus},
                               {"layers", pc.layers},
                               {"time_s", pc.time_s}});
    }
    j["waves"].push_back(std::move(wj));
  }
  j["baselines"] = {{"sequential_s", p.sequential_s},
                    {"task_greedy_s", p.task_greedy_s},
                    {"bound_s", p.allocation.bound_s}};
  j["plan_ms"] = p.plan_ms;
  j["curve_ms"] = p.curve_ms;
  j["curves"] = Json::array();
  for (const Op& op : p.ops) j["curves"].push_back({{"name", op.name}, {"gpus", op.curve.n}, {"layer_time_s", op.curve.t}});
  return j;
}

}  // namespace weft::multitask
