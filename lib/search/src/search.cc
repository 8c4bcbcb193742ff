// The plan search (docs/search.md). Outline:
//   1. enumerate pipeline configurations (pp, schedule, vp, m) under the configuration rules;
//   2. per configuration: candidates per layer group, their costs at every stage position (one
//      cm.layer() call per (group, strategy, position)), embedding candidates, p2p and transition
//      tables, and a lower bound on the objective;
//   3. configurations in ascending lower-bound order: skip those that cannot beat the configurations
//      kept so far; otherwise run the layer DP per stage position, the stage partition per
//      embedding strategy, backtrack the per-layer strategies and keep the plan;
//   4. the uniform (one strategy everywhere, even stages) plans of every configuration;
//   5. re-rank the kept plans with estimate() and return the top-k, the best uniform plan, and when
//      nothing fits the plan that comes closest.
#include "weft/search/search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>

#include "weft/search/layer_dp.h"
#include "weft/search/partition.h"
#include "weft/search/pruning.h"
#include "weft/search/strategy_space.h"
#include "weft/search/uniform.h"

namespace weft {

namespace planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string S(long long x) { return std::to_string(x); }

// The search objective of one layer (or a stage's extra work) per micro-batch: forward and
// backward, plus the per-step work spread over the m micro-batches -- the optimizer step and the
// part of the gradient reduction that its own backward cannot hide.
double objective_time(const LayerCost& c, int m) {
  const double exposed = std::max(0.0, c.grad_sync.value() - c.bwd.value());
  return c.fwd.value() + c.bwd.value() + (exposed + c.optimizer.value()) / m;
}

// J for per-stage (non-interleaved) costs, or per device group costs with vp virtual stages.
double objective(const std::vector<double>& group_cost, int m, int vp) {
  double mx = 0, sum = 0;
  for (double c : group_cost) mx = std::max(mx, c), sum += c;
  return (m - 1.0 / vp) * mx + sum / vp;
}

struct GroupRange {
  int first = 0, count = 0;
};

struct GroupCands {
  const std::vector<LayerStrategy>* cands = nullptr;
  std::vector<int> layout;  // layout index of each candidate
};

// Everything the search knows about one configuration.
struct Work {
  PipelineConfig cfg;
  TrainSettings train;
  int S = 0, P = 0, pmb = 0;
  std::vector<GroupCands> groups;
  std::vector<Layout> layouts;
  // u[pos][g][c], mem[pos][g][c]: objective time and memory bytes of candidate c of group g.
  std::vector<std::vector<std::vector<double>>> u, mem;
  // All embedding candidates with their extras (-1 = not costed yet), and the Pareto-filtered ones.
  const std::vector<LayerStrategy>* all_embs = nullptr;
  std::vector<std::vector<double>> eu_all, emem_all;  // [e][pos]
  std::vector<LayerStrategy> embs;
  std::vector<std::vector<double>> eu, emem;  // [e][pos]
  std::vector<std::vector<double>> p2p;       // [boundary s][layout], s = 0 .. P-2
  std::vector<std::vector<float>> t_within, t_into;  // [g] K*K: transitions inside group g / from g-1 into g
  double lb = 0;         // lower bound on J of the layer-wise search (its embedding candidates)
  double lb_time = 0;    // lower bound on J of any plan, memory ignored (for the uniform plans)
  bool memory_infeasible = false;
  bool valid = false;
  bool complete = false;  // every position costed, tables built (complete())
  std::vector<char> filled;  // per position: costs known (fill_position())
};

struct Kept {
  double j = kInf;
  Plan plan;
};

// Keeps the `cap` entries with the smallest j.
class Pool {
 public:
  explicit Pool(int cap) : cap_(cap) {}
  bool full() const { return static_cast<int>(items_.size()) >= cap_; }
  // The j an entry must beat to be kept: +inf while there is room (-inf for a pool of size 0).
  double worst() const {
    if (cap_ <= 0) return -kInf;
    return full() ? items_.back().j : kInf;
  }
  void add(double j, Plan p) {
    if (j >= worst()) return;
    auto it = std::upper_bound(items_.begin(), items_.end(), j, [](double v, const Kept& k) { return v < k.j; });
    items_.insert(it, Kept{j, std::move(p)});
    if (static_cast<int>(items_.size()) > cap_) items_.pop_back();
  }
  std::vector<Kept>& items() { return items_; }

 private:
  int cap_;
  std::vector<Kept> items_;
};

class Searcher {
 public:
  Searcher(const ModelSpec& model, const ClusterSpec& cluster, const CostModel& cm, const SearchOptions& opt)
      : model_(model), cluster_(cluster), cm_(cm), opt_(opt) {}

  Result<SearchResult> run();

 private:
  const std::vector<LayerStrategy>& layer_cands(int g, int S, int pmb);
  const std::vector<LayerStrategy>& emb_cands(int S, int pmb);
  StageContext stage_ctx(const Work& w, int pos) const;
  bool prepare(Work& w);
  void cost_entry(Work& w, int pos, int g, int c);
  void cost_position(Work& w, int pos);
  void fill_position(Work& w, int pos);
  double p2p_at(Work& w, int s, int k);
  void cost_extra(Work& w, int e, int pos);
  void complete(Work& w);
  void lower_bound(Work& w);
  std::vector<double> replacement_penalty(Work& w, int g);
  std::vector<DpOption> options(const Work& w, int pos, int g, const std::vector<double>& penalty);
  void search_config(Work& w);
  void search_pipeline(Work& w, const std::vector<std::vector<std::vector<DpOption>>>& opts);
  void search_interleaved(Work& w, const std::vector<std::vector<std::vector<DpOption>>>& opts);
  void uniform_config(Work& w);
  std::optional<Plan> closest_plan(const Work& w, double* measure);
  double memory_needed(double peak) const;
  Plan make_plan(const Work& w, int e, const std::vector<int>& sizes, const std::vector<std::vector<int>>& idx);
  int col(double avail) const;
  int steps(double bytes) const;

  const ModelSpec& model_;
  const ClusterSpec& cluster_;
  const CostModel& cm_;
  const SearchOptions& opt_;
  RuleLog log_;
  SearchStats stats_;
  std::vector<GroupRange> ranges_;
  std::vector<int> group_of_;
  int L_ = 0, world_ = 0;
  double budget_ = 0, step_ = 0;
  int M_ = 0;
  std::unique_ptr<Pool> pool_, upool_;

  struct LayerKey {
    int g, S, pmb;
    std::vector<LayerStrategy> v;
  };
  std::deque<LayerKey> layer_memo_;  // deque: references stay valid
  struct EmbKey {
    int S, pmb;
    std::vector<LayerStrategy> v;
  };
  std::deque<EmbKey> emb_memo_;
};

const std::vector<LayerStrategy>& Searcher::layer_cands(int g, int S, int pmb) {
  for (const auto& k : layer_memo_)
    if (k.g == g && k.S == S && k.pmb == pmb) return k.v;
  const LayerShape& shape = model_.groups[g].shape;
  layer_memo_.push_back(LayerKey{g, S, pmb,
                                 opt_.layer_space ? opt_.layer_space(shape, S, pmb)
                                                  : layer_candidates(shape, cluster_, opt_, S, pmb, log_)});
  return layer_memo_.back().v;
}

const std::vector<LayerStrategy>& Searcher::emb_cands(int S, int pmb) {
  for (const auto& k : emb_memo_)
    if (k.S == S && k.pmb == pmb) return k.v;
  emb_memo_.push_back(EmbKey{S, pmb,
                             opt_.embedding_space ? opt_.embedding_space(S, pmb)
                                                  : embedding_candidates(model_, cluster_, opt_, S, pmb, log_)});
  return emb_memo_.back().v;
}

StageContext Searcher::stage_ctx(const Work& w, int pos) const {
  StageContext c;
  c.model = &model_;
  c.cluster = &cluster_;
  c.train = w.train;
  c.stage = pos;
  c.num_stages = w.P;
  c.stage_size = w.S;
  return c;
}

int Searcher::col(double avail) const {
  if (avail < 0) return -1;
  const double x = avail / step_;
  return static_cast<int>(std::min<double>(M_, std::floor(x + 1e-9)));
}

int Searcher::steps(double bytes) const {
  const double x = bytes / step_;
  if (x >= M_ + 1) return M_ + 1;
  return std::max(0, static_cast<int>(std::ceil(x - 1e-9)));
}

// Candidates, costs, embedding, p2p and transitions of one configuration. False if some group has
// no candidate.
bool Searcher::prepare(Work& w) {
  w.train = w.cfg.train(opt_);
  w.S = world_ / w.cfg.pp;
  w.P = w.cfg.stages();
  w.pmb = opt_.global_batch / w.cfg.m;
  const int G = static_cast<int>(model_.groups.size());
  w.groups.resize(G);
  for (int g = 0; g < G; ++g) {
    if (model_.groups[g].count <= 0) continue;
    w.groups[g].cands = &layer_cands(g, w.S, w.pmb);
    if (w.groups[g].cands->empty()) return false;
  }
  const auto& embs = emb_cands(w.S, w.pmb);
  if (embs.empty()) return false;
  // Layouts.
  for (int g = 0; g < G; ++g) {
    if (!w.groups[g].cands) continue;
    for (const auto& s : *w.groups[g].cands) {
      const Layout l = layout_of(s);
      auto it = std::find(w.layouts.begin(), w.layouts.end(), l);
      if (it == w.layouts.end()) {
        w.layouts.push_back(l);
        it = w.layouts.end() - 1;
      }
      w.groups[g].layout.push_back(static_cast<int>(it - w.layouts.begin()));
    }
  }
  w.all_embs = &embs;
  w.p2p.assign(std::max(0, w.P - 1),
               std::vector<double>(w.layouts.size(), std::numeric_limits<double>::quiet_NaN()));
  w.u.assign(w.P, std::vector<std::vector<double>>(G));
  w.mem.assign(w.P, std::vector<std::vector<double>>(G));
  w.eu_all.assign(embs.size(), std::vector<double>(w.P, -1.0));
  w.emem_all.assign(embs.size(), std::vector<double>(w.P, -1.0));
  // The probe: every candidate at the last stage, and the candidate with the most memory there at
  // the first stage. If the first stage holds more of it (more micro-batches in flight), the last
  // stage is the lightest for every candidate (docs/search.md, "Stage interpolation") and the bound
  // reads the last stage alone; otherwise the first stage is costed in full too.
  w.filled.assign(w.P, 0);
  fill_position(w, w.P - 1);
  if (w.P > 1) {
    int rg = -1, rc = -1;
    for (int g = 0; g < G; ++g) {
      if (!w.groups[g].cands) continue;
      for (size_t c = 0; c < w.groups[g].cands->size(); ++c)
        if (rg < 0 || w.mem[w.P - 1][g][c] > w.mem[w.P - 1][rg][rc]) rg = g, rc = static_cast<int>(c);
    }
    cost_entry(w, 0, rg, rc);
    if (!opt_.interpolate_stages || w.mem[0][rg][rc] < w.mem[w.P - 1][rg][rc]) fill_position(w, 0);
  }
  for (size_t e = 0; e < embs.size(); ++e)
    for (int pos : {0, w.P - 1, std::min(1, w.P - 1)}) cost_extra(w, static_cast<int>(e), pos);
  w.valid = true;
  return true;
}

// Costs candidate c of group g at stage position pos once (NaN marks "not costed").
void Searcher::cost_entry(Work& w, int pos, int g, int c) {
  auto& uu = w.u[pos][g];
  if (uu.empty()) {
    uu.assign(w.groups[g].cands->size(), std::numeric_limits<double>::quiet_NaN());
    w.mem[pos][g].assign(uu.size(), 0.0);
  }
  if (!std::isnan(uu[c])) return;
  LayerContext lc;
  static_cast<StageContext&>(lc) = stage_ctx(w, pos);
  lc.layer = ranges_[g].first;
  const LayerCost cost = cm_.layer(lc, (*w.groups[g].cands)[c]);
  ++stats_.layer_costs;
  uu[c] = objective_time(cost, w.cfg.m);
  w.mem[pos][g][c] = cost.mem().value();
}

void Searcher::cost_position(Work& w, int pos) {
  for (size_t g = 0; g < w.groups.size(); ++g)
    if (w.groups[g].cands)
      for (size_t c = 0; c < w.groups[g].cands->size(); ++c) cost_entry(w, pos, static_cast<int>(g), static_cast<int>(c));
}

// Fills a middle stage position (docs/search.md, "Stage interpolation"). A layer's time does not
// depend on its stage, and its memory moves between the first and the last stage by a factor common
// to all strategies (the micro-batches in flight): mem(p) = mem(last) + lambda(p) (mem(first) -
// mem(last)). lambda(p) comes from one costed candidate; two more candidates check the rule at p.
// If the check fails, every candidate is costed at p.
void Searcher::fill_position(Work& w, int pos) {
  if (w.filled[pos]) return;
  w.filled[pos] = 1;
  const int first = 0, last = w.P - 1;
  if (pos == first || pos == last || !opt_.interpolate_stages) {
    cost_position(w, pos);
    return;
  }
  fill_position(w, first);
  // Reference: the candidate whose memory varies most between the ends; checks: the least-memory
  // and the fastest candidates of the first group.
  int rg = -1, rc = -1, fc = -1, mc = -1;
  double spread = -1;
  for (size_t g = 0; g < w.groups.size(); ++g) {
    if (!w.groups[g].cands) continue;
    for (size_t c = 0; c < w.groups[g].cands->size(); ++c) {
      const double d = w.mem[first][g][c] - w.mem[last][g][c];
      if (std::abs(d) > spread) spread = std::abs(d), rg = static_cast<int>(g), rc = static_cast<int>(c);
      if (static_cast<int>(g) == rg || rg < 0) {
        if (fc < 0 || w.u[first][g][c] < w.u[first][g][fc]) fc = static_cast<int>(c);
        if (mc < 0 || w.mem[first][g][c] < w.mem[first][g][mc]) mc = static_cast<int>(c);
      }
    }
  }
  if (rg < 0) return;
  cost_entry(w, pos, rg, rc);
  const double d = w.mem[first][rg][rc] - w.mem[last][rg][rc];
  const double lambda = d != 0 ? (w.mem[pos][rg][rc] - w.mem[last][rg][rc]) / d : 0.0;
  auto predicted = [&](int g, int c) { return w.mem[last][g][c] + lambda * (w.mem[first][g][c] - w.mem[last][g][c]); };
  auto close = [](double a, double b) { return std::abs(a - b) <= 1e-9 * std::max({1.0, std::abs(a), std::abs(b)}); };
  bool ok = close(w.u[pos][rg][rc], w.u[first][rg][rc]);
  for (int c : {fc, mc}) {
    if (c < 0 || !ok) continue;
    cost_entry(w, pos, rg, c);
    ok = close(w.u[pos][rg][c], w.u[first][rg][c]) && close(w.mem[pos][rg][c], predicted(rg, c));
  }
  if (!ok) {
    ++stats_.interpolation_fallbacks;
    cost_position(w, pos);
    return;
  }
  for (size_t g = 0; g < w.groups.size(); ++g) {
    if (!w.groups[g].cands) continue;
    auto& uu = w.u[pos][g];
    auto& mm = w.mem[pos][g];
    if (uu.empty()) uu.assign(w.groups[g].cands->size(), std::numeric_limits<double>::quiet_NaN()), mm.assign(uu.size(), 0.0);
    for (size_t c = 0; c < uu.size(); ++c) {
      if (!std::isnan(uu[c])) continue;
      uu[c] = w.u[first][g][c];
      mm[c] = predicted(static_cast<int>(g), static_cast<int>(c));
    }
  }
}

double Searcher::p2p_at(Work& w, int s, int k) {
  double& v = w.p2p[s][k];
  if (std::isnan(v)) {
    // The interleaved schedule's sends run beside computation (ScheduleSpec::overlap_p2p,
    // docs/cost-model.md §7): its objective charges none, as its simulated step does not.
    v = w.cfg.vp > 1 ? 0.0 : cm_.p2p(stage_ctx(w, s), representative(w.layouts[k])).value();
  }
  return v;
}

void Searcher::cost_extra(Work& w, int e, int pos) {
  if (w.emem_all[e][pos] >= 0) return;
  const LayerCost x = cm_.stage_extra(stage_ctx(w, pos), (*w.all_embs)[e]);
  w.eu_all[e][pos] = objective_time(x, w.cfg.m);
  w.emem_all[e][pos] = x.mem().value();
}

// Costs every position, filters the embedding candidates, and builds the p2p and transition tables.
void Searcher::complete(Work& w) {
  if (w.complete) return;
  w.complete = true;
  const int G = static_cast<int>(w.groups.size());
  const int K = static_cast<int>(w.layouts.size());
  for (int pos = 0; pos < w.P; ++pos) fill_position(w, pos);
  const auto& embs = *w.all_embs;
  // Embedding candidates with their stage extras; Pareto over all positions.
  {
    for (size_t e = 0; e < embs.size(); ++e)
      for (int pos = 0; pos < w.P; ++pos) cost_extra(w, static_cast<int>(e), pos);
    const auto& eu = w.eu_all;
    const auto& em = w.emem_all;
    auto dominates = [&](size_t a, size_t b) {  // a no worse than b everywhere
      for (int pos = 0; pos < w.P; ++pos)
        if (eu[a][pos] > eu[b][pos] || em[a][pos] > em[b][pos]) return false;
      return true;
    };
    for (size_t e = 0; e < embs.size(); ++e) {
      bool dominated = false;
      for (size_t o = 0; o < embs.size() && !dominated; ++o) {
        if (o == e) continue;
        // o dominates e; among exact equals the earlier index survives.
        if (dominates(o, e) && (!dominates(e, o) || o < e)) dominated = true;
      }
      if (dominated) {
        log_.add(kRuleParetoEmbedding);
        continue;
      }
      w.embs.push_back(embs[e]);
      w.eu.push_back(eu[e]);
      w.emem.push_back(em[e]);
    }
  }
  // p2p after each stage but the last, per layout.
  for (int s = 0; s + 1 < w.P; ++s)
    for (int k = 0; k < K; ++k) p2p_at(w, s, k);
  // Transitions (independent of the stage by assumption: costed at stage 0).
  w.t_within.assign(G, {});
  w.t_into.assign(G, {});
  auto table = [&](int ga, int gb, int layer) {
    std::vector<float> t(static_cast<size_t>(K) * K, 0.0f);
    LayerContext lc;
    static_cast<StageContext&>(lc) = stage_ctx(w, 0);
    lc.layer = layer;
    std::vector<char> in_a(K, 0), in_b(K, 0);
    for (int k : w.groups[ga].layout) in_a[k] = 1;
    for (int k : w.groups[gb].layout) in_b[k] = 1;
    for (int a = 0; a < K; ++a)
      for (int b = 0; b < K; ++b)
        if (a != b && in_a[a] && in_b[b])
          t[static_cast<size_t>(a) * K + b] = static_cast<float>(
              cm_.transition(lc, representative(w.layouts[a]), representative(w.layouts[b])).value());
    return t;
  };
  int prev = -1;
  for (int g = 0; g < G; ++g) {
    if (!w.groups[g].cands) continue;
    if (ranges_[g].count > 1) w.t_within[g] = table(g, g, ranges_[g].first + 1);
    if (prev >= 0) w.t_into[g] = table(prev, g, ranges_[g].first);
    prev = g;
  }
}

// Lower bound on J (docs/search.md): every layer's time is at least phi(its memory), phi the lower
// convex hull of (memory, time) over all candidates and positions; a device group holds L/pp layers
// in at most B* bytes.
void Searcher::lower_bound(Work& w) {
  // Probe positions only (the first and the last stage; a middle one for stage extras): the bound
  // assumes no middle stage is cheaper in time or memory than both ends (docs/search.md).
  const int first = w.filled[0] ? 0 : w.P - 1, last = w.P - 1, mid = std::min(1, w.P - 1);
  std::vector<double> xs, ts;
  double min_layer_mem = kInf;
  double sum_min_mem = 0;
  const int G = static_cast<int>(w.groups.size());
  for (int g = 0; g < G; ++g) {
    if (!w.groups[g].cands) continue;
    double gmin = kInf;
    for (size_t c = 0; c < w.groups[g].cands->size(); ++c) {
      const double mu = std::min(w.u[first][g][c], w.u[last][g][c]);
      const double mm = std::min(w.mem[first][g][c], w.mem[last][g][c]);
      xs.push_back(mm);
      ts.push_back(mu);
      gmin = std::min(gmin, mm);
    }
    min_layer_mem = std::min(min_layer_mem, gmin);
    sum_min_mem += gmin * ranges_[g].count;
  }
  auto min_extra_at = [&](int pos) {
    double m = kInf;
    for (const auto& e : w.emem_all) m = std::min(m, e[pos]);
    return m;
  };
  double min_extra = std::min({min_extra_at(first), min_extra_at(last), min_extra_at(mid)});
  double sum_min_extra = min_extra_at(first) + (w.P > 1 ? min_extra_at(last) : 0.0) +
                         std::max(0, w.P - 2) * min_extra_at(mid);
  const double avail = budget_ - min_extra;
  // Memory: the device groups together must hold every layer and every stage's extra.
  if (sum_min_mem + sum_min_extra > budget_ * w.cfg.pp || avail < min_layer_mem) w.memory_infeasible = true;
  const double min_u = *std::min_element(ts.begin(), ts.end());
  w.lb_time = (w.cfg.m + (w.cfg.pp - 1.0) / w.cfg.vp) * (static_cast<double>(L_) / w.cfg.pp) * min_u;
  const TimeMemoryHull phi(xs, ts);
  const double n = static_cast<double>(L_) / w.cfg.pp;
  const double psi = n * phi(avail / n);
  w.lb = (w.cfg.m + (w.cfg.pp - 1.0) / w.cfg.vp) * psi;
  if (!std::isfinite(w.lb)) w.memory_infeasible = true;
}

// Per configuration: for layouts A, B the most that replacing a layer in A by one in B can add in
// transitions and p2p, whatever its neighbours: D[A][B] = max(0, max_x T[x][B] - T[x][A]) +
// max(0, max_y T[B][y] - T[A][y]) + 2 max(0, p2p(B) - p2p(A)) over every transition table into and
// out of group g and every stage boundary (the boundary's p2p is paid by both neighbours).
std::vector<double> Searcher::replacement_penalty(Work& w, int g) {
  const int K = static_cast<int>(w.layouts.size());
  std::vector<const std::vector<float>*> in, out;
  if (!w.t_within[g].empty()) in.push_back(&w.t_within[g]), out.push_back(&w.t_within[g]);
  if (!w.t_into[g].empty()) in.push_back(&w.t_into[g]);
  for (size_t h = g + 1; h < w.groups.size(); ++h)
    if (w.groups[h].cands) {
      if (!w.t_into[h].empty()) out.push_back(&w.t_into[h]);
      break;
    }
  std::vector<double> d(static_cast<size_t>(K) * K, 0.0);
  for (int a = 0; a < K; ++a)
    for (int b = 0; b < K; ++b) {
      if (a == b) continue;
      double din = 0, dout = 0, dp = 0;
      for (const auto* t : in)
        for (int x = 0; x < K; ++x) din = std::max(din, double((*t)[x * K + b]) - (*t)[x * K + a]);
      for (const auto* t : out)
        for (int y = 0; y < K; ++y) dout = std::max(dout, double((*t)[b * K + y]) - (*t)[a * K + y]);
      for (int s = 0; s + 1 < w.P; ++s) dp = std::max(dp, p2p_at(w, s, b) - p2p_at(w, s, a));
      d[static_cast<size_t>(a) * K + b] = din + dout + 2 * dp;
    }
  return d;
}

// The DP options of group g at stage position pos: candidates not dominated by another that is no
// larger in memory steps and faster by at least the replacement penalty (0 within a layout).
std::vector<DpOption> Searcher::options(const Work& w, int pos, int g, const std::vector<double>& penalty) {
  const auto& uu = w.u[pos][g];
  const auto& mm = w.mem[pos][g];
  const auto& lay = w.groups[g].layout;
  const int K = static_cast<int>(w.layouts.size());
  std::vector<DpOption> all;
  for (size_t c = 0; c < uu.size(); ++c) {
    const int st = steps(mm[c]);
    if (st > M_) continue;
    all.push_back(DpOption{static_cast<float>(uu[c]), st, lay[c], static_cast<int>(c)});
  }
  std::vector<DpOption> out;
  long long within = 0, across = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const DpOption& a = all[i];
    bool dominated = false, by_same = false;
    for (size_t j = 0; j < all.size() && !dominated; ++j) {
      if (j == i) continue;
      const DpOption& b = all[j];
      if (b.mem > a.mem) continue;
      const double pen = b.layout == a.layout ? 0.0 : penalty[static_cast<size_t>(a.layout) * K + b.layout];
      const double tb = static_cast<double>(b.time) + pen, ta = a.time;
      if (tb > ta) continue;
      if (b.mem < a.mem || tb < ta || j < i) dominated = true, by_same = b.layout == a.layout;
    }
    if (!dominated) out.push_back(a);
    else if (by_same) ++within;
    else ++across;
  }
  log_.add(kRuleParetoLayout, within);
  log_.add(kRuleParetoAcross, across);
  return out;
}

Plan Searcher::make_plan(const Work& w, int e, const std::vector<int>& sizes,
                         const std::vector<std::vector<int>>& idx) {
  Plan p;
  p.model = model_;
  p.cluster = cluster_;
  p.train = w.train;
  p.embedding = w.embs[e];
  int next = 0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    Stage st;
    st.first_layer = next;
    // Within a run of one group and one layout the order of strategies does not change any cost
    // (equal shapes, no transitions): list them in candidate order so equal strategies sit together.
    std::vector<int> order = idx[s];
    for (int i = 0; i < sizes[s];) {
      int j = i + 1;
      const int g = group_of_[next + i];
      while (j < sizes[s] && group_of_[next + j] == g &&
             w.groups[g].layout[order[j]] == w.groups[g].layout[order[i]])
        ++j;
      std::sort(order.begin() + i, order.begin() + j);
      i = j;
    }
    for (int i = 0; i < sizes[s]; ++i) {
      const int g = group_of_[next + i];
      st.layers.push_back((*w.groups[g].cands)[order[i]]);
    }
    next += sizes[s];
    p.stages.push_back(std::move(st));
  }
  return p;
}

void Searcher::search_config(Work& w) {
  const int G = static_cast<int>(w.groups.size());
  std::vector<std::vector<std::vector<DpOption>>> opts(w.P, std::vector<std::vector<DpOption>>(G));
  for (int g = 0; g < G; ++g) {
    if (!w.groups[g].cands) continue;
    const std::vector<double> penalty = replacement_penalty(w, g);
    for (int pos = 0; pos < w.P; ++pos) opts[pos][g] = options(w, pos, g, penalty);
  }
  ++stats_.searched;
  if (w.cfg.vp > 1) search_interleaved(w, opts);
  else search_pipeline(w, opts);
}

// Non-interleaved pipelines (and pp = 1): layer DP per stage position, then the partition.
void Searcher::search_pipeline(Work& w, const std::vector<std::vector<std::vector<DpOption>>>& opts) {
  const int P = w.P, K = static_cast<int>(w.layouts.size());
  const int E = static_cast<int>(w.embs.size());
  const bool shift_invariant = ranges_.size() == 1;
  const double ub = pool_->worst();
  const bool even = !opt_.uneven_stages || opt_.galvatron_space;
  const std::vector<int> even_sizes = even_stage_sizes(L_, P);

  // Budget columns per (pos, e) and their distinct values per pos.
  std::vector<std::vector<int>> col_of(P, std::vector<int>(E));
  std::vector<std::vector<int>> cols(P);
  std::vector<std::vector<int>> col_index(P, std::vector<int>(E, -1));
  for (int s = 0; s < P; ++s) {
    for (int e = 0; e < E; ++e) {
      col_of[s][e] = col(budget_ - w.emem[e][s]);
      if (col_of[s][e] >= 0 && std::find(cols[s].begin(), cols[s].end(), col_of[s][e]) == cols[s].end())
        cols[s].push_back(col_of[s][e]);
    }
    for (int e = 0; e < E; ++e) {
      auto it = std::find(cols[s].begin(), cols[s].end(), col_of[s][e]);
      col_index[s][e] = it == cols[s].end() ? -1 : static_cast<int>(it - cols[s].begin());
    }
  }
  // Layer DP tables: tab[s][run][(n-1)*K*C + k*C + c] = f_n[k][cols[s][c]].
  LayerDp dp(K, M_);
  struct Run {
    int start = 0, nmax = 0;
    std::vector<float> v;
  };
  std::vector<std::vector<Run>> tab(P);
  auto trans_for = [&](int layer) -> const float* {
    const int g = group_of_[layer], gp = group_of_[layer - 1];
    return g == gp ? w.t_within[g].data() : w.t_into[g].data();
  };
  std::vector<int> even_start(P, 0);
  for (int t = 1; t < P; ++t) even_start[t] = even_start[t - 1] + even_sizes[t - 1];
  // One run of the layer DP at position s from layer a, up to nhi layers, stopping once the stage's
  // layers alone exceed `bound` or no longer fit.
  auto run_from = [&](int s, int a, int nhi, double bound) {
    const int C = static_cast<int>(cols[s].size());
    const int maxcol = *std::max_element(cols[s].begin(), cols[s].end());
    Run run;
    run.start = a;
    dp.start(false);
    for (int n = 1; n <= nhi; ++n) {
      const int layer = a + n - 1;
      const int g = group_of_[layer];
      dp.push(opts[s][g].data(), static_cast<int>(opts[s][g].size()), n == 1 ? nullptr : trans_for(layer));
      for (int k = 0; k < K; ++k)
        for (int c = 0; c < C; ++c) run.v.push_back(dp.at(k, cols[s][c]));
      run.nmax = n;
      const float b = dp.best(maxcol);
      if (!(b < kInfTime) || b > bound) break;  // more layers cannot fit or cannot win
    }
    return run;
  };
  for (int s = 0; s < P; ++s)
    if (cols[s].empty()) return;  // no embedding leaves room at this position
  // Pass 1: the even partition, an upper bound on J for this configuration (each stage at its
  // best, charged the largest p2p on both sides).
  std::vector<Run> even_runs(P);
  for (int s = 0; s < P; ++s) even_runs[s] = run_from(s, even_start[s], even_sizes[s], kInf);
  double even_ub = kInf;
  for (int e = 0; e < E; ++e) {
    std::vector<double> c(P);
    bool ok = true;
    for (int s = 0; s < P && ok; ++s) {
      const Run& r = even_runs[s];
      const int C = static_cast<int>(cols[s].size());
      if (r.nmax < even_sizes[s] || col_index[s][e] < 0) {
        ok = false;
        break;
      }
      float b = kInfTime;
      for (int k = 0; k < K; ++k)
        b = std::min(b, r.v[(static_cast<size_t>(even_sizes[s] - 1) * K + k) * C + col_index[s][e]]);
      double worst_p2p = 0;
      for (int t : {s - 1, s})
        if (t >= 0 && t + 1 < P) worst_p2p += *std::max_element(w.p2p[t].begin(), w.p2p[t].end());
      c[s] = static_cast<double>(b) + w.eu[e][s] + worst_p2p;
      ok = std::isfinite(c[s]);
    }
    if (ok) even_ub = std::min(even_ub, objective(c, w.cfg.m, 1));
  }
  const double bound = std::min(ub, even_ub * (1 + 1e-9));
  const double stage_ub = bound / w.cfg.m;
  // Pass 2: the runs the partition reads (even stages: pass 1's runs).
  for (int s = 0; s < P; ++s) {
    const int rest = P - 1 - s;
    tab[s].resize(shift_invariant ? 1 : L_);
    if (even) {
      tab[s][shift_invariant ? 0 : even_start[s]] = std::move(even_runs[s]);
      continue;
    }
    if (shift_invariant) {
      tab[s][0] = run_from(s, 0, L_ - P + 1, stage_ub);
      continue;
    }
    for (int a = s; a <= L_ - (P - s); ++a) tab[s][a] = run_from(s, a, L_ - a - rest, stage_ub);
  }
  // p2p classes per boundary: layouts with equal p2p time.
  std::vector<std::vector<double>> cls_val(std::max(0, P - 1));
  std::vector<std::vector<int>> cls_of(std::max(0, P - 1), std::vector<int>(K, 0));
  for (int s = 0; s + 1 < P; ++s)
    for (int k = 0; k < K; ++k) {
      auto it = std::find(cls_val[s].begin(), cls_val[s].end(), w.p2p[s][k]);
      if (it == cls_val[s].end()) {
        cls_val[s].push_back(w.p2p[s][k]);
        it = cls_val[s].end() - 1;
      }
      cls_of[s][k] = static_cast<int>(it - cls_val[s].begin());
    }
  auto run_of = [&](int s, int a) -> const Run& { return shift_invariant ? tab[s][0] : tab[s][a]; };

  PartitionProblem pr;
  pr.layers = L_;
  pr.stages = P;
  pr.weight_max = w.cfg.m - 1.0;
  pr.p2p = cls_val;
  pr.upper_bound = bound;
  pr.shift_invariant = shift_invariant;
  if (even) {
    pr.n_min = pr.n_max = even_sizes;
  } else if (shift_invariant) {
    pr.n_max.resize(P);
    for (int s = 0; s < P; ++s) pr.n_max[s] = std::max(1, tab[s][0].nmax);
  }
  int best_e = -1;
  PartitionResult best;
  for (int e = 0; e < E; ++e) {
    bool ok = true;
    for (int s = 0; s < P; ++s) ok = ok && col_index[s][e] >= 0;
    if (!ok) continue;
    pr.cost = [&](int s, int a, int n, int q) -> double {
      const Run& r = run_of(s, a);
      if (n > r.nmax) return kInf;
      const int C = static_cast<int>(cols[s].size());
      const int c = col_index[s][e];
      const float* row = &r.v[static_cast<size_t>(n - 1) * K * C];
      float b = kInfTime;
      for (int k = 0; k < K; ++k)
        if (s == P - 1 || cls_of[s][k] == q) b = std::min(b, row[k * C + c]);
      if (!(b < kInfTime)) return kInf;
      return static_cast<double>(b) + w.eu[e][s];
    };
    PartitionResult r = solve_partition(pr);
    if (r.feasible && r.objective < best.objective) {
      best = std::move(r);
      best_e = e;
      pr.upper_bound = std::min(pr.upper_bound, best.objective);
    }
  }
  if (best_e < 0) return;
  // Backtrack each stage's per-layer strategies.
  std::vector<std::vector<int>> idx(P);
  int a = 0;
  for (int s = 0; s < P; ++s) {
    const int n = best.sizes[s];
    dp.start(true);
    for (int i = 0; i < n; ++i) {
      const int layer = a + i;
      const int g = group_of_[layer];
      dp.push(opts[s][g].data(), static_cast<int>(opts[s][g].size()), i == 0 ? nullptr : trans_for(layer));
    }
    const int c = col_of[s][best_e];
    int bk = -1;
    float bv = kInfTime;
    for (int k = 0; k < K; ++k)
      if ((s == P - 1 || cls_of[s][k] == best.classes[s]) && dp.at(k, c) < bv) bv = dp.at(k, c), bk = k;
    if (bk < 0) return;
    idx[s] = dp.backtrack(bk, c);
    a += n;
  }
  pool_->add(best.objective, make_plan(w, best_e, best.sizes, idx));
}

// Interleaved 1F1B: even chunks; each device group's chunks share its memory, so one DP runs over a
// group's chunks in order (no transition across a chunk boundary, the chunk's p2p added there).
void Searcher::search_interleaved(Work& w, const std::vector<std::vector<std::vector<DpOption>>>& opts) {
  const int P = w.P, pp = w.cfg.pp, vp = w.cfg.vp, K = static_cast<int>(w.layouts.size());
  const int E = static_cast<int>(w.embs.size());
  const int n0 = L_ / P;
  LayerDp dp(K, M_);
  auto trans_for = [&](int layer) -> const float* {
    const int g = group_of_[layer], gp = group_of_[layer - 1];
    return g == gp ? w.t_within[g].data() : w.t_into[g].data();
  };
  std::vector<std::vector<float>> offsets(std::max(0, P - 1), std::vector<float>(K));
  for (int s = 0; s + 1 < P; ++s)
    for (int k = 0; k < K; ++k) offsets[s][k] = static_cast<float>(w.p2p[s][k]);
  auto min_in = [&](int s) {  // incoming p2p of stage s: the least over layouts (a lower bound)
    if (s == 0) return 0.0;
    return *std::min_element(w.p2p[s - 1].begin(), w.p2p[s - 1].end());
  };
  auto run_group = [&](int g, bool history) {
    dp.start(history);
    for (int j = 0; j < vp; ++j) {
      const int s = g + j * pp;
      for (int i = 0; i < n0; ++i) {
        const int layer = s * n0 + i;
        const int grp = group_of_[layer];
        dp.push(opts[s][grp].data(), static_cast<int>(opts[s][grp].size()), i == 0 ? nullptr : trans_for(layer));
      }
      if (s + 1 < P) dp.add_offsets(offsets[s]);
    }
  };
  auto group_col = [&](int g, int e) {
    double extra = 0;
    for (int j = 0; j < vp; ++j) extra += w.emem[e][g + j * pp];
    return col(budget_ - extra);
  };
  auto group_fixed = [&](int g, int e) {
    double t = 0;
    for (int j = 0; j < vp; ++j) t += w.eu[e][g + j * pp] + min_in(g + j * pp);
    return t;
  };
  // value[g][e]
  std::vector<std::vector<double>> value(pp, std::vector<double>(E, kInf));
  for (int g = 0; g < pp; ++g) {
    run_group(g, false);
    for (int e = 0; e < E; ++e) {
      const int c = group_col(g, e);
      if (c < 0) continue;
      const float b = dp.best(c);
      if (b < kInfTime) value[g][e] = b + group_fixed(g, e);
    }
  }
  int best_e = -1;
  double best_j = pool_->worst();
  for (int e = 0; e < E; ++e) {
    std::vector<double> cg(pp);
    bool ok = true;
    for (int g = 0; g < pp; ++g) ok = ok && std::isfinite(cg[g] = value[g][e]);
    if (!ok) continue;
    const double j = objective(cg, w.cfg.m, vp);
    if (j < best_j) best_j = j, best_e = e;
  }
  if (best_e < 0) return;
  std::vector<std::vector<int>> idx(P);
  for (int g = 0; g < pp; ++g) {
    run_group(g, true);
    const int c = group_col(g, best_e);
    int bk = -1;
    float bv = kInfTime;
    for (int k = 0; k < K; ++k)
      if (dp.at(k, c) < bv) bv = dp.at(k, c), bk = k;
    if (bk < 0) return;
    const std::vector<int> all = dp.backtrack(bk, c);
    for (int j = 0; j < vp; ++j) idx[g + j * pp].assign(all.begin() + j * n0, all.begin() + (j + 1) * n0);
  }
  pool_->add(best_j, make_plan(w, best_e, std::vector<int>(P, n0), idx));
}

// Uniform plans of one configuration: every candidate valid for all groups, even stages, the
// embedding following the layer strategy (embedding_for()).
void Searcher::uniform_config(Work& w) {
  const int G = static_cast<int>(w.groups.size());
  const int P = w.P, last = P - 1;
  int g0 = 0;
  while (!w.groups[g0].cands) ++g0;
  const auto& c0 = *w.groups[g0].cands;
  const std::vector<int> sizes = even_stage_sizes(L_, P);
  const double weight = (w.cfg.m + (w.cfg.pp - 1.0) / w.cfg.vp) * (static_cast<double>(L_) / w.cfg.pp);
  std::vector<std::pair<LayerStrategy, std::vector<std::pair<double, double>>>> emb_memo;
  auto extras = [&](const LayerStrategy& emb) -> std::vector<std::pair<double, double>>& {
    auto em = std::find_if(emb_memo.begin(), emb_memo.end(), [&](const auto& x) { return x.first == emb; });
    if (em != emb_memo.end()) return em->second;
    std::vector<std::pair<double, double>> v(P);
    for (int pos = 0; pos < P; ++pos) {
      const LayerCost x = cm_.stage_extra(stage_ctx(w, pos), emb);
      v[pos] = {objective_time(x, w.cfg.m), x.mem().value()};
    }
    emb_memo.emplace_back(emb, std::move(v));
    return emb_memo.back().second;
  };
  for (size_t c = 0; c < c0.size(); ++c) {
    // The index of this strategy in every group (ep only on MoE layers).
    std::vector<int> gi(G, -1);
    bool ok = true;
    for (int g = 0; g < G && ok; ++g) {
      if (!w.groups[g].cands) continue;
      LayerStrategy want = c0[c];
      if (!model_.groups[g].shape.moe.enabled()) want.ep = 1;
      const auto& cg = *w.groups[g].cands;
      auto it = std::find(cg.begin(), cg.end(), want);
      if (it == cg.end()) ok = false;
      else gi[g] = static_cast<int>(it - cg.begin());
    }
    if (!ok) continue;
    // Cheap tests at the last stage first: a time bound (times do not depend on the stage), and
    // the memory of its layers alone (a necessary condition).
    double umin = kInf;
    bool fits_probe = true;
    for (int g = 0; g < G; ++g) {
      if (!w.groups[g].cands) continue;
      umin = std::min(umin, w.u[last][g][gi[g]]);
    }
    if (weight * umin >= upool_->worst()) continue;
    for (int s : {last}) {
      double m = 0;
      int a = 0;
      for (int t = 0; t < s; ++t) a += sizes[t];
      for (int i = 0; i < sizes[s]; ++i) m += w.mem[s][group_of_[a + i]][gi[group_of_[a + i]]];
      fits_probe = fits_probe && m <= budget_;
    }
    if (!fits_probe) continue;
    const LayerStrategy emb = embedding_for(c0[c]);
    const auto& ex = extras(emb);
    const int k = w.groups[g0].layout[c];
    std::vector<double> stage_t(P, 0.0), dev_mem(w.cfg.pp, 0.0);
    int next = 0;
    for (int s = 0; s < P; ++s) {
      double t = ex[s].first, m = ex[s].second;
      for (int i = 0; i < sizes[s]; ++i) {
        const int g = group_of_[next + i];
        fill_position(w, s);
        t += w.u[s][g][gi[g]];
        m += w.mem[s][g][gi[g]];
      }
      next += sizes[s];
      if (s + 1 < P) t += p2p_at(w, s, k);
      if (s > 0) t += p2p_at(w, s - 1, k);
      stage_t[s] = t;
      dev_mem[s % w.cfg.pp] += m;
    }
    bool fits = true;
    for (double m : dev_mem) fits = fits && m <= budget_;
    if (!fits) continue;
    std::vector<double> group_t(w.cfg.pp, 0.0);
    for (int s = 0; s < P; ++s) group_t[s % w.cfg.pp] += stage_t[s];
    const double j = objective(group_t, w.cfg.m, w.cfg.vp);
    if (j >= upool_->worst()) continue;
    auto plan = make_uniform_plan(model_, cluster_, w.train, c0[c], emb);
    if (plan.ok()) upool_->add(j, std::move(plan).value());
  }
}

// The plan of a configuration that needs the least memory: per layer the least-memory candidate at
// its position, the embedding with the least memory in total, stage sizes minimising the largest
// device memory (even chunks when interleaved). *measure: that largest device memory (bytes).
std::optional<Plan> Searcher::closest_plan(const Work& w, double* measure) {
  const int P = w.P, G = static_cast<int>(w.groups.size());
  std::vector<std::vector<int>> least(P, std::vector<int>(G, -1));
  for (int s = 0; s < P; ++s)
    for (int g = 0; g < G; ++g) {
      if (!w.groups[g].cands) continue;
      const auto& mm = w.mem[s][g];
      least[s][g] = static_cast<int>(std::min_element(mm.begin(), mm.end()) - mm.begin());
    }
  int e = 0;
  double esum = kInf;
  for (size_t i = 0; i < w.embs.size(); ++i) {
    double t = 0;
    for (int s = 0; s < P; ++s) t += w.emem[i][s];
    if (t < esum) esum = t, e = static_cast<int>(i);
  }
  auto stage_mem = [&](int s, int a, int n) {
    double m = w.emem[e][s];
    for (int i = 0; i < n; ++i) {
      const int g = group_of_[a + i];
      m += w.mem[s][g][least[s][g]];
    }
    return m;
  };
  std::vector<int> sizes;
  if (w.cfg.vp > 1 || !opt_.uneven_stages || opt_.galvatron_space) {
    sizes = even_stage_sizes(L_, P);
  } else {
    // Min-max DP over (stage, layers placed).
    std::vector<std::vector<double>> best(P + 1, std::vector<double>(L_ + 1, kInf));
    std::vector<std::vector<int>> from(P + 1, std::vector<int>(L_ + 1, -1));
    best[0][0] = 0;
    for (int s = 0; s < P; ++s)
      for (int i = s; i <= L_; ++i) {
        if (!std::isfinite(best[s][i])) continue;
        for (int n = 1; i + n <= L_ - (P - 1 - s); ++n) {
          const double v = std::max(best[s][i], stage_mem(s, i, n));
          if (v < best[s + 1][i + n]) best[s + 1][i + n] = v, from[s + 1][i + n] = i;
        }
      }
    sizes.assign(P, 0);
    int i = L_;
    for (int s = P; s > 0; --s) {
      const int a = from[s][i];
      if (a < 0) return std::nullopt;
      sizes[s - 1] = i - a;
      i = a;
    }
  }
  std::vector<double> dev(w.cfg.pp, 0.0);
  std::vector<std::vector<int>> idx(P);
  int next = 0;
  for (int s = 0; s < P; ++s) {
    dev[s % w.cfg.pp] += stage_mem(s, next, sizes[s]);
    for (int i = 0; i < sizes[s]; ++i) idx[s].push_back(least[s][group_of_[next + i]]);
    next += sizes[s];
  }
  *measure = *std::max_element(dev.begin(), dev.end());
  return make_plan(w, e, sizes, idx);
}

// The device memory (GiB) at which the cost model's budget reaches `peak` bytes: bisection on
// gpu.memory_gib (the budget grows with the device). 0 if no device size gets there.
double Searcher::memory_needed(double peak) const {
  auto budget_at = [&](double gib) {
    ClusterSpec c = cluster_;
    c.gpu.memory_gib = gib;
    return cm_.memory_budget(c).value();
  };
  double lo = 0, hi = std::max(1.0, cluster_.gpu.memory_gib);
  while (budget_at(hi) < peak) {
    lo = hi;
    hi *= 2;
    if (hi > 1e9) return 0;
  }
  for (int i = 0; i < 60 && hi - lo > 1e-6; ++i) {
    const double mid = 0.5 * (lo + hi);
    (budget_at(mid) >= peak ? hi : lo) = mid;
  }
  return hi;
}

Result<SearchResult> Searcher::run() {
  const auto t0 = std::chrono::steady_clock::now();
  // --- input checks ---
  {
    Status m = validate(model_);
    if (!m.ok()) return m.error().with_context("model");
    Status c = validate(cluster_);
    if (!c.ok()) return c.error().with_context("cluster");
  }
  auto bad = [](const std::string& s) { return Error{ErrorKind::kBadInput, s}; };
  if (opt_.seq <= 0) return bad("seq: must be positive, got " + S(opt_.seq));
  if (opt_.global_batch <= 0) return bad("global_batch: must be positive, got " + S(opt_.global_batch));
  if (opt_.top_k < 1) return bad("top: must be >= 1, got " + S(opt_.top_k));
  if (!(opt_.memory_step_mib > 0)) return bad("memory_step_mib: must be positive");
  if (model_.position == PositionKind::kLearned && model_.max_seq > 0 && opt_.seq > model_.max_seq)
    return bad("seq: " + S(opt_.seq) + " exceeds the model's learned position table of " + S(model_.max_seq));
  L_ = model_.num_layers();
  world_ = cluster_.total_gpus();
  for (int pp : opt_.pp_degrees)
    if (pp < 1 || world_ % pp != 0 || pp > L_)
      return bad("pp: " + S(pp) + " must divide the " + S(world_) + " GPUs and be at most the " + S(L_) + " layers");
  for (int m : opt_.micro_batches)
    if (m < 1 || opt_.global_batch % m != 0)
      return bad("micro_batches: " + S(m) + " does not divide global batch " + S(opt_.global_batch));
  budget_ = cm_.memory_budget(cluster_).value();
  if (!(budget_ > 0)) return bad("memory: the cost model leaves no memory for training on " + cluster_.gpu.name);
  step_ = opt_.memory_step_mib * 1048576.0;
  constexpr int kMaxStates = 8192;  // bounds the DP's memory axis; a coarser step beyond
  if (budget_ / step_ > kMaxStates) step_ = budget_ / kMaxStates;
  M_ = static_cast<int>(std::floor(budget_ / step_ + 1e-9));
  int first = 0;
  for (const auto& g : model_.groups) {
    ranges_.push_back({first, g.count});
    for (int i = 0; i < g.count; ++i) group_of_.push_back(static_cast<int>(ranges_.size()) - 1);
    first += g.count;
  }
  const int rerank = opt_.rerank > 0 ? opt_.rerank : std::max(2 * opt_.top_k, 8);
  pool_ = std::make_unique<Pool>(opt_.layerwise ? rerank : 0);
  upool_ = std::make_unique<Pool>(4);

  // --- configurations ---
  const std::vector<PipelineConfig> cfgs = pipeline_configs(model_, cluster_, opt_, log_);
  stats_.configurations = static_cast<long long>(cfgs.size());
  if (cfgs.empty())
    return bad("no pipeline configuration: " + S(world_) + " GPUs, " + S(L_) + " layers, global batch " +
               S(opt_.global_batch) + " admit no (pp, micro-batches) pair under the options");
  std::vector<Work> works;
  works.reserve(cfgs.size());
  const long long total = static_cast<long long>(cfgs.size()) * 2;
  long long done = 0;
  for (const auto& c : cfgs) {
    Work w;
    w.cfg = c;
    if (!prepare(w)) {
      log_.add(kRuleNoCandidates);
    } else {
      lower_bound(w);
      works.push_back(std::move(w));
    }
    if (opt_.progress) opt_.progress(++done, total);
  }
  if (works.empty()) {
    return bad("no valid strategy for global batch " + S(opt_.global_batch) + " on " + S(world_) +
               " GPUs: every layer needs tp*ulysses*cp*dp = GPUs/pp with dp dividing the samples of a "
               "micro-batch (global batch / micro-batches), tp <= " + S(cluster_.gpus_per_node) +
               " GPUs per node and dividing the attention heads; no (pp, micro-batches) choice satisfies this");
  }
  // GPipe dominated by 1F1B at the same (pp, m): the model says it is no faster and no lighter.
  for (auto& w : works) {
    if (w.cfg.schedule != Schedule::kGpipe || w.cfg.pp == 1) continue;
    const Work* twin = nullptr;
    for (const auto& o : works)
      if (o.cfg.schedule == Schedule::k1F1B && o.cfg.pp == w.cfg.pp && o.cfg.m == w.cfg.m) twin = &o;
    if (!twin || twin->groups.size() != w.groups.size()) continue;
    // Every candidate at the last stage; at the first stage those costed for both.
    bool dominated = true;
    for (int pos : {0, w.P - 1})
      for (size_t g = 0; g < w.groups.size() && dominated; ++g)
        for (size_t c = 0; c < w.u[pos][g].size() && c < twin->u[pos][g].size() && dominated; ++c)
          if (!std::isnan(w.u[pos][g][c]) && !std::isnan(twin->u[pos][g][c]))
            dominated = twin->u[pos][g][c] <= w.u[pos][g][c] && twin->mem[pos][g][c] <= w.mem[pos][g][c];
    if (dominated) {
      std::vector<StageSums> sums(w.P);
      for (int pos = 0; pos < w.P; ++pos) {
        sums[pos].fwd = sec(1e-3 * (pos + 1));
        sums[pos].bwd = sec(2e-3 * (pos + 1));
      }
      const double tg = cm_.step(w.train, sums).step_time.value();
      const double t1 = cm_.step(twin->train, sums).step_time.value();
      dominated = t1 <= tg;
    }
    if (dominated) {
      w.valid = false;
      log_.add(kRuleGpipeDominated);
    }
  }
  // --- search in ascending lower-bound order ---
  std::vector<int> order(works.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return works[a].lb < works[b].lb; });
  for (int i : order) {
    Work& w = works[i];
    if (opt_.progress) opt_.progress(++done, total);
    if (!w.valid) continue;
    if (opt_.layerwise) {
      if (w.memory_infeasible) {
        log_.add(kRuleMemory);
      } else if (w.lb >= pool_->worst()) {
        log_.add(kRuleObjectiveBound);
      } else {
        complete(w);
        search_config(w);
      }
    }
    if (w.lb_time < upool_->worst()) uniform_config(w);
  }
  if (opt_.progress) opt_.progress(total, total);

  // --- final ranking by estimate() ---
  SearchResult res;
  auto rank = [&](std::vector<Kept>& items) {
    std::vector<std::pair<double, Plan>> out;
    for (auto& k : items) {
      const Estimate e = estimate(k.plan, cm_);
      ++stats_.estimates;
      if (!e.fits) continue;
      annotate(k.plan, e, cm_);
      out.emplace_back(e.step_time.value(), std::move(k.plan));
    }
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return out;
  };
  auto ranked = rank(pool_->items());
  auto uranked = rank(upool_->items());
  if (!uranked.empty()) res.best_uniform = uranked.front().second;
  if (!opt_.layerwise) ranked = uranked;
  for (auto& r : ranked) {
    if (static_cast<int>(res.top.size()) >= opt_.top_k) break;
    res.top.push_back(std::move(r.second));
  }
  // A uniform plan is a plan of the layer-wise space too: never report a top plan slower than it.
  if (res.best_uniform && opt_.layerwise &&
      (res.top.empty() || res.best_uniform->predicted.step_time_s < res.top.front().predicted.step_time_s)) {
    res.top.insert(res.top.begin(), *res.best_uniform);
    if (static_cast<int>(res.top.size()) > opt_.top_k) res.top.pop_back();
  }
  if (res.top.empty()) {
    // Nothing fits: the configurations whose least-memory plan is smallest.
    std::vector<std::pair<double, Plan>> cands;
    for (auto& w : works) {
      complete(w);
      double measure = kInf;
      auto p = closest_plan(w, &measure);
      if (p) cands.emplace_back(measure, std::move(*p));
    }
    std::stable_sort(cands.begin(), cands.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    double best_peak = kInf;
    for (size_t i = 0; i < cands.size() && i < 3; ++i) {
      const Estimate e = estimate(cands[i].second, cm_);
      ++stats_.estimates;
      if (e.peak_memory.value() < best_peak) {
        best_peak = e.peak_memory.value();
        annotate(cands[i].second, e, cm_);
        res.closest = cands[i].second;
      }
    }
    if (res.closest) res.min_memory_gib = memory_needed(best_peak);
  }
  stats_.pruned = log_.total();
  stats_.rules = log_.lines();
  stats_.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.stats = stats_;
  return res;
}

}  // namespace
}  // namespace planner

Result<SearchResult> search(const ModelSpec& model, const ClusterSpec& cluster, const CostModel& cm,
                            const SearchOptions& opt) {
  try {
    return planner::Searcher(model, cluster, cm, opt).run();
  } catch (const InputError& e) {
    return Error{e.kind, e.what()};
  }
}

}  // namespace weft
