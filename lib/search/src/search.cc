// The plan search (docs/search.md; search_internal.h names the parts). Outline:
//   1. enumerate pipeline configurations (pp, schedule, vp, m) under the configuration rules;
//   2. per configuration: candidates per layer group, their costs at the probe stage positions,
//      embedding candidates, and a lower bound on the objective (tables.cc);
//   3. configurations in ascending lower-bound order: skip those that cannot beat the configurations
//      kept so far; otherwise complete the tables and run the layer DP per stage position and the
//      stage partition per embedding strategy (stage_search.cc), keeping the plan;
//   4. the uniform (one strategy everywhere, even stages) plans of every configuration
//      (uniform_search.cc);
//   5. re-rank the kept plans by their simulated step (estimate()) and return the top-k, the best
//      uniform plan, and when nothing fits the plan that comes closest (closest.cc).
#include "weft/search/search.h"

#include <chrono>
#include <cmath>
#include <numeric>

#include "search_internal.h"

#include "weft/core/format.h"

namespace weft {

namespace planner {

int Problem::col(double avail) const {
  if (avail < 0) return -1;
  const double x = avail / step;
  return static_cast<int>(std::min<double>(M, std::floor(x + 1e-9)));
}

int Problem::steps(double bytes) const {
  const double x = bytes / step;
  if (x >= M + 1) return M + 1;
  return std::max(0, static_cast<int>(std::ceil(x - 1e-9)));
}

const std::vector<LayerStrategy>& CandidateCache::layer(const Problem& pb, int g, int S, int pmb, RuleLog& log) {
  g = pb.same_as[g];  // one candidate list per shape
  for (const auto& k : layers_)
    if (k.g == g && k.S == S && k.pmb == pmb) return k.v;
  const LayerShape& shape = pb.model.groups[g].shape;
  layers_.push_back(LayerKey{g, S, pmb,
                             pb.opt.layer_space ? pb.opt.layer_space(shape, S, pmb)
                                                : layer_candidates(shape, pb.cluster, pb.opt, S, pmb, log)});
  return layers_.back().v;
}

const std::vector<LayerStrategy>& CandidateCache::embedding(const Problem& pb, int S, int pmb, RuleLog& log) {
  for (const auto& k : embeddings_)
    if (k.S == S && k.pmb == pmb) return k.v;
  embeddings_.push_back(EmbKey{S, pmb,
                               pb.opt.embedding_space ? pb.opt.embedding_space(S, pmb)
                                                      : embedding_candidates(pb.model, pb.cluster, pb.opt, S, pmb, log)});
  return embeddings_.back().v;
}

void Pool::add(double j, Plan p) {
  if (j >= worst()) return;
  auto it = std::upper_bound(items_.begin(), items_.end(), j, [](double v, const Kept& k) { return v < k.j; });
  items_.insert(it, Kept{j, std::move(p)});
  if (static_cast<int>(items_.size()) > cap_) items_.pop_back();
}

namespace {

Error bad(const std::string& s) { return Error{ErrorKind::kBadInput, s}; }

// The checks of the inputs that need no configuration: the model, the cluster, and the options
// (validate(SearchOptions), weft/search/search_options.h).
Status check_inputs(const ModelSpec& model, const ClusterSpec& cluster, const SearchOptions& opt) {
  if (Status m = validate(model); !m.ok()) return m.error().with_context("model");
  if (Status c = validate(cluster); !c.ok()) return c.error().with_context("cluster");
  return validate(opt, model, cluster);
}

// The layer groups' ranges, and the memory grid of the layer DP.
Status set_up(Problem& pb) {
  pb.L = pb.model.num_layers();
  pb.world = pb.cluster.total_gpus();
  pb.budget = pb.cm.memory_budget(pb.cluster).value();
  if (!(pb.budget > 0)) return bad("memory: the cost model leaves no memory for training on " + pb.cluster.gpu.name);
  pb.step = pb.opt.memory_step_mib * 1048576.0;
  constexpr int kMaxStates = 8192;  // bounds the DP's memory axis; a coarser step beyond
  if (pb.budget / pb.step > kMaxStates) pb.step = pb.budget / kMaxStates;
  pb.M = static_cast<int>(std::floor(pb.budget / pb.step + 1e-9));
  int first = 0;
  for (const auto& g : pb.model.groups) {
    int same = static_cast<int>(pb.ranges.size());
    for (int h = 0; h < same; ++h)
      if (pb.model.groups[h].shape == g.shape) {
        same = h;
        break;
      }
    pb.same_as.push_back(same);
    pb.ranges.push_back({first, g.count});
    for (int i = 0; i < g.count; ++i) pb.group_of.push_back(static_cast<int>(pb.ranges.size()) - 1);
    first += g.count;
  }
  return Status{};
}

// Whether GPipe at w's (pp, m) is dominated by 1F1B there (rule gpipe-dominated): the model says
// it is no faster and no lighter.
bool gpipe_dominated(const Problem& pb, const Work& w, const std::vector<Work>& works) {
  const Work* twin = nullptr;
  for (const auto& o : works)
    if (o.cfg.schedule == Schedule::k1F1B && o.cfg.pp == w.cfg.pp && o.cfg.m == w.cfg.m) twin = &o;
  if (!twin || twin->groups.size() != w.groups.size()) return false;
  // Every candidate at the last stage; at the first stage those costed for both.
  for (int pos : {0, w.P - 1})
    for (size_t g = 0; g < w.groups.size(); ++g)
      for (size_t c = 0; c < w.u[pos][g].size() && c < twin->u[pos][g].size(); ++c)
        if (!std::isnan(w.u[pos][g][c]) && !std::isnan(twin->u[pos][g][c]) &&
            !(twin->u[pos][g][c] <= w.u[pos][g][c] && twin->mem[pos][g][c] <= w.mem[pos][g][c]))
          return false;
  std::vector<StageSums> sums(w.P);
  for (int pos = 0; pos < w.P; ++pos) {
    sums[pos].fwd = sec(1e-3 * (pos + 1));
    sums[pos].bwd = sec(2e-3 * (pos + 1));
  }
  return pb.cm.step(twin->train, sums).step_time.value() <= pb.cm.step(w.train, sums).step_time.value();
}

// The kept plans, each estimate()d: those that fit with their step time, fastest first.
std::vector<std::pair<double, Plan>> rerank(const Problem& pb, Tally& t, std::vector<Pool::Kept>& items) {
  std::vector<std::pair<double, Plan>> out;
  for (auto& k : items) {
    const Estimate e = estimate(k.plan, pb.cm);
    ++t.stats.estimates;
    if (!e.fits) continue;
    annotate(k.plan, e, pb.cm);
    out.emplace_back(e.step_time.value(), std::move(k.plan));
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

// The top-k of the layer-wise plans and the best uniform plan; a uniform plan is a plan of the
// layer-wise space too, so no top plan is slower than it.
void pick_top(const Problem& pb, Tally& t, Pool& pool, Pool& upool, SearchResult& res) {
  auto ranked = rerank(pb, t, pool.items());
  auto uranked = rerank(pb, t, upool.items());
  if (!uranked.empty()) res.best_uniform = uranked.front().second;
  if (!pb.opt.layerwise) ranked = uranked;
  for (auto& r : ranked) {
    if (static_cast<int>(res.top.size()) >= pb.opt.top_k) break;
    res.top.push_back(std::move(r.second));
  }
  if (res.best_uniform && pb.opt.layerwise &&
      (res.top.empty() || res.best_uniform->predicted.step_time_s < res.top.front().predicted.step_time_s)) {
    res.top.insert(res.top.begin(), *res.best_uniform);
    if (static_cast<int>(res.top.size()) > pb.opt.top_k) res.top.pop_back();
  }
}

// Nothing fits: among the configurations whose least-memory plans are smallest, the one estimate()
// finds smallest, and the device memory it needs.
void pick_closest(const Problem& pb, Tally& t, std::vector<Work>& works, SearchResult& res) {
  std::vector<std::pair<double, Plan>> cands;
  for (auto& w : works) {
    complete(pb, t, w);
    double measure = kInf;
    auto p = closest_plan(pb, w, &measure);
    if (p) cands.emplace_back(measure, std::move(*p));
  }
  std::stable_sort(cands.begin(), cands.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  double best_peak = kInf;
  for (size_t i = 0; i < cands.size() && i < 3; ++i) {
    const Estimate e = estimate(cands[i].second, pb.cm);
    ++t.stats.estimates;
    if (e.peak_memory.value() < best_peak) {
      best_peak = e.peak_memory.value();
      annotate(cands[i].second, e, pb.cm);
      res.closest = cands[i].second;
    }
  }
  if (res.closest) res.min_memory_gib = memory_needed(pb, best_peak);
}

// Step 2: every configuration's candidates, probe costs and bound; those with no candidate are
// dropped, the dominated GPipe ones marked.
Result<std::vector<Work>> prepare_configurations(const Problem& pb, const std::vector<PipelineConfig>& cfgs,
                                                 CandidateCache& cache, Tally& t, long long& done, long long total) {
  std::vector<Work> works;
  works.reserve(cfgs.size());
  for (const auto& c : cfgs) {
    Work w;
    w.cfg = c;
    if (!prepare(pb, cache, t, w)) {
      t.log.add(kRuleNoCandidates);
    } else {
      lower_bound(pb, w);
      works.push_back(std::move(w));
    }
    if (pb.opt.progress) pb.opt.progress(++done, total);
  }
  if (works.empty())
    return bad("no valid strategy for global batch " + S(pb.opt.global_batch) + " on " + S(pb.world) +
               " GPUs: every layer needs tp*ulysses*cp*dp = GPUs/pp with dp dividing the samples of a "
               "micro-batch (global batch / micro-batches), tp <= " + S(pb.cluster.gpus_per_node) +
               " GPUs per node and dividing the attention heads; no (pp, micro-batches) choice satisfies this");
  for (auto& w : works) {
    if (w.cfg.schedule != Schedule::kGpipe || w.cfg.pp == 1 || !gpipe_dominated(pb, w, works)) continue;
    w.valid = false;
    t.log.add(kRuleGpipeDominated);
  }
  return works;
}

// Steps 3-4: the configurations in ascending lower-bound order.
void search_configurations(const Problem& pb, Tally& t, std::vector<Work>& works, Pool& pool, Pool& upool,
                           long long& done, long long total) {
  std::vector<int> order(works.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return works[a].lb < works[b].lb; });
  for (int i : order) {
    Work& w = works[i];
    if (pb.opt.progress) pb.opt.progress(++done, total);
    if (!w.valid) continue;
    if (pb.opt.layerwise) {
      if (w.memory_infeasible) {
        t.log.add(kRuleMemory);
      } else if (w.lb >= pool.worst()) {
        t.log.add(kRuleObjectiveBound);
      } else {
        complete(pb, t, w);
        search_config(pb, t, w, pool);
      }
    }
    if (w.lb_time < upool.worst()) uniform_config(pb, t, w, upool);
  }
  if (pb.opt.progress) pb.opt.progress(total, total);
}

// One search from checked inputs; `cache` holds the candidates it builds.
Result<SearchResult> run(Problem& pb, CandidateCache& cache) {
  Tally t;
  if (Status st = set_up(pb); !st.ok()) return st.error();
  const int rerank_cap = pb.opt.rerank > 0 ? pb.opt.rerank : std::max(2 * pb.opt.top_k, 8);
  Pool pool(pb.opt.layerwise ? rerank_cap : 0), upool(4);
  const std::vector<PipelineConfig> cfgs = pipeline_configs(pb.model, pb.cluster, pb.opt, t.log);
  t.stats.configurations = static_cast<long long>(cfgs.size());
  if (cfgs.empty())
    return bad("no pipeline configuration: " + S(pb.world) + " GPUs, " + S(pb.L) + " layers, global batch " +
               S(pb.opt.global_batch) + " admit no (pp, micro-batches) pair under the options");
  long long done = 0;
  const long long total = static_cast<long long>(cfgs.size()) * 2;  // each prepared, then searched
  auto works = prepare_configurations(pb, cfgs, cache, t, done, total);
  if (!works.ok()) return works.error();
  search_configurations(pb, t, *works, pool, upool, done, total);
  SearchResult res;
  pick_top(pb, t, pool, upool, res);
  if (res.top.empty()) pick_closest(pb, t, *works, res);
  t.stats.pruned = t.log.total();
  t.stats.rules = t.log.counts();
  res.stats = t.stats;
  return res;
}

}  // namespace
}  // namespace planner

Result<SearchResult> search(const ModelSpec& model, const ClusterSpec& cluster, const CostModel& cm,
                            const SearchOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (Status st = planner::check_inputs(model, cluster, opt); !st.ok()) return st.error();
    planner::Problem pb(model, cluster, cm, opt);
    planner::CandidateCache cache;
    auto r = planner::run(pb, cache);
    if (r.ok()) r->stats.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  } catch (const InputError& e) {
    return Error{e.kind, e.what()};
  }
}

}  // namespace weft
