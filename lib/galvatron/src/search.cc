// Galvatron's task loop around weft's search (weft/galvatron/search.h).
#include "weft/galvatron/search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <string>

#include "weft/search/pruning.h"

namespace weft::galvatron {

constexpr double kGalvatronMemoryStepMib = 4.0;

Status restrict_to_galvatron(SearchOptions& opt) {
  if (!opt.schedules.empty()) {
    if (std::find(opt.schedules.begin(), opt.schedules.end(), Schedule::k1F1B) == opt.schedules.end())
      return Error{ErrorKind::kBadInput, std::string("--schedule: Galvatron's space has no ") +
                                             to_string(opt.schedules.front()) + " schedule (1f1b only)"};
  }
  opt.schedules = {Schedule::k1F1B};
  opt.uneven_stages = false;
  for (const NamedRestriction& r : opt.restrictions)
    if (r.name == planner::kRuleGalvatronSpace) return Status{};  // restricted already
  // Each part of its strategy set is decided as soon as the candidate walk sets its field.
  const auto refuse = [&](StrategyField field, std::function<bool(const LayerStrategy&)> refuses) {
    opt.restrictions.push_back(NamedRestriction{planner::kRuleGalvatronSpace, field, std::move(refuses)});
  };
  refuse(StrategyField::kUlysses, [](const LayerStrategy& s) { return s.tp > 1 && s.ulysses > 1; });
  refuse(StrategyField::kCp, [](const LayerStrategy& s) { return s.cp > 1; });
  refuse(StrategyField::kZero, [](const LayerStrategy& s) { return s.zero == 1; });
  refuse(StrategyField::kRecompute, [](const LayerStrategy& s) { return s.recompute == Recompute::kSelective; });
  return Status{};
}

Result<GalvatronSpaceResult> search_galvatron_space(const ModelSpec& model, const ClusterSpec& cluster,
                                                    const GalvatronCostModel& base, SearchOptions opt,
                                                    bool galvatron_space) {
  const auto start = std::chrono::steady_clock::now();
  if (galvatron_space) {
    if (Status st = restrict_to_galvatron(opt); !st.ok()) return st.error();
  }
  opt.allow_cp = false;
  // Galvatron's DP counts memory in 1 MB steps; weft's default 64 MiB grid misses its tightest plans
  // (B36 leaves 9 MB). 4 MiB finds every published plan at a fraction of the 1 MB grid's time.
  if (opt.memory_step_mib == SearchOptions{}.memory_step_mib) opt.memory_step_mib = kGalvatronMemoryStepMib;
  const int max_tp = std::max(1, std::min(base.options().max_tp_deg, cluster.gpus_per_node));

  struct Task {
    TpSpMode mode;
    int buffer_tp;
  };
  std::vector<Task> tasks;
  for (TpSpMode mode : {TpSpMode::kTpOnly, TpSpMode::kSpOnly, TpSpMode::kTpWithSp}) {
    if (mode == TpSpMode::kSpOnly) {
      tasks.push_back({mode, 0});
      continue;
    }
    for (int b = 1; b <= max_tp; b *= 2) tasks.push_back({mode, b});
  }

  GalvatronSpaceResult out;
  bool have = false;
  for (const Task& task : tasks) {
    const auto t0 = std::chrono::steady_clock::now();
    GalvatronOptions go = base.options();
    go.mode = task.mode;
    go.global_buffer_tp = task.buffer_tp;
    const GalvatronCostModel cm(base.profiles(), base.hidden_size(), go);
    SearchOptions o = opt;
    o.allow_ulysses = task.mode != TpSpMode::kTpOnly;
    // Tensor (or Ulysses) degree up to the buffer tp; the cost model drops what the task excludes.
    o.max_tp = task.mode == TpSpMode::kSpOnly ? 1 : task.buffer_tp;
    auto r = search(model, cluster, cm, o);
    if (!r.ok()) return r.error();
    out.configurations += r->stats.configurations;
    TaskOutcome outcome;
    outcome.mode = task.mode;
    outcome.buffer_tp = task.buffer_tp;
    for (const Plan& p : r->top) {
      auto e = cm.estimate_plan(p);
      if (!e.ok() || !e->fits) continue;
      if (!outcome.found || e->iteration_s < outcome.iteration_s) {
        outcome.found = true;
        outcome.iteration_s = e->iteration_s;
      }
      // Strictly faster replaces: with equal times the earlier task wins, as in Galvatron.
      if (!have || e->iteration_s < out.estimate.iteration_s) {
        have = true;
        out.best = p;
        out.estimate = *e;
      }
    }
    outcome.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out.tasks.push_back(outcome);
  }
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!have)
    return Error{ErrorKind::kNoFit, "no plan in Galvatron's space fits " +
                                        std::to_string(static_cast<long long>(cluster.gpu.memory_gib * 1024)) +
                                        " MB per GPU under Galvatron's cost model"};
  out.best.predicted.step_time_s = out.estimate.iteration_s;
  out.best.predicted.tokens_per_s = static_cast<double>(out.best.train.global_batch) * out.best.train.seq /
                                    out.estimate.iteration_s;
  out.best.predicted.cost_model = "galvatron";
  out.best.predicted.source = "measured";
  return out;
}

SearchResult to_search_result(const GalvatronSpaceResult& r) {
  SearchResult out;
  out.top.push_back(r.best);
  out.stats.configurations = r.configurations;
  out.stats.wall_s = r.wall_s;
  // One (name, count) entry per task, as weft's rule log: the task's best iteration time in
  // microseconds under Galvatron's accounting, -1 when nothing fits.
  for (const TaskOutcome& t : r.tasks)
    out.stats.rules.emplace_back(std::string("galvatron task ") + to_string(t.mode) +
                                     (t.buffer_tp > 0 ? " buffer tp " + std::to_string(t.buffer_tp) : std::string()) +
                                     " iteration us",
                                 t.found ? static_cast<long long>(std::llround(t.iteration_s * 1e6)) : -1LL);
  return out;
}

}  // namespace weft::galvatron
