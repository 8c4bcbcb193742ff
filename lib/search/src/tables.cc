// The cost tables of one pipeline configuration (search_internal.h): every candidate of every layer
// group at every stage position (one cm.layer() call per (group, strategy, position), middle
// positions interpolated), the embedding candidates' stage extras, the p2p and transition tables,
// and the configuration's lower bound.
#include <cmath>

#include "search_internal.h"

namespace weft::planner {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Costs candidate c of group g at stage position pos once (NaN marks "not costed").
void cost_entry(const Problem& pb, Tally& t, Work& w, int pos, int g, int c) {
  auto& uu = w.u[pos][g];
  if (uu.empty()) {
    uu.assign(w.groups[g].cands->size(), kNaN);
    w.mem[pos][g].assign(uu.size(), 0.0);
  }
  if (!std::isnan(uu[c])) return;
  if (const int same = pb.same_as[g]; same != g && w.groups[same].cands == w.groups[g].cands) {
    cost_entry(pb, t, w, pos, same, c);  // a group of the same shape before: its cost
    w.u[pos][g][c] = w.u[pos][same][c];
    w.mem[pos][g][c] = w.mem[pos][same][c];
    return;
  }
  LayerContext lc;
  static_cast<StageContext&>(lc) = stage_context(pb, w, pos);
  lc.layer = pb.ranges[g].first;
  const LayerCost cost = pb.cm.layer(lc, (*w.groups[g].cands)[c]);
  ++t.stats.layer_costs;
  uu[c] = objective_time(cost, w.cfg.m);
  w.mem[pos][g][c] = cost.mem().value();
}

void cost_position(const Problem& pb, Tally& t, Work& w, int pos) {
  for (size_t g = 0; g < w.groups.size(); ++g)
    if (w.groups[g].cands)
      for (size_t c = 0; c < w.groups[g].cands->size(); ++c)
        cost_entry(pb, t, w, pos, static_cast<int>(g), static_cast<int>(c));
}

void cost_extra(const Problem& pb, Work& w, int e, int pos) {
  if (w.emem_all[e][pos] >= 0) return;
  const LayerCost x = pb.cm.stage_extra(stage_context(pb, w, pos), (*w.all_embs)[e]);
  w.eu_all[e][pos] = objective_time(x, w.cfg.m);
  w.emem_all[e][pos] = x.mem().value();
}

// Each group's candidates and the activation layouts they use.
bool collect_candidates(const Problem& pb, CandidateCache& cache, Tally& t, Work& w) {
  const int G = static_cast<int>(pb.model.groups.size());
  w.groups.resize(G);
  for (int g = 0; g < G; ++g) {
    if (pb.model.groups[g].count <= 0) continue;
    w.groups[g].cands = &cache.layer(pb, g, w.S, w.pmb, t.log);
    if (w.groups[g].cands->empty()) return false;
  }
  w.all_embs = &cache.embedding(pb, w.S, w.pmb, t.log);
  if (w.all_embs->empty()) return false;
  for (int g = 0; g < G; ++g) {
    if (!w.groups[g].cands) continue;
    for (const auto& s : *w.groups[g].cands) {
      const LayoutKey l = layout_key(s);
      auto it = std::find(w.layouts.begin(), w.layouts.end(), l);
      if (it == w.layouts.end()) {
        w.layouts.push_back(l);
        it = w.layouts.end() - 1;
      }
      w.groups[g].layout.push_back(static_cast<int>(it - w.layouts.begin()));
    }
  }
  return true;
}

// The probe: every candidate at the last stage, and the candidate with the most memory there at
// the first stage. If the first stage holds more of it (more micro-batches in flight), the last
// stage is the lightest for every candidate (docs/search.md, "Stage interpolation") and the bound
// reads the last stage alone; otherwise the first stage is costed in full too.
void probe(const Problem& pb, Tally& t, Work& w) {
  w.filled.assign(w.P, 0);
  fill_position(pb, t, w, w.P - 1);
  if (w.P > 1) {
    int rg = -1, rc = -1;
    for (size_t g = 0; g < w.groups.size(); ++g) {
      if (!w.groups[g].cands) continue;
      for (size_t c = 0; c < w.groups[g].cands->size(); ++c)
        if (rg < 0 || w.mem[w.P - 1][g][c] > w.mem[w.P - 1][rg][rc]) rg = static_cast<int>(g), rc = static_cast<int>(c);
    }
    cost_entry(pb, t, w, 0, rg, rc);
    if (!pb.opt.interpolate_stages || w.mem[0][rg][rc] < w.mem[w.P - 1][rg][rc]) fill_position(pb, t, w, 0);
  }
  for (size_t e = 0; e < w.all_embs->size(); ++e)
    for (int pos : {0, w.P - 1, std::min(1, w.P - 1)}) cost_extra(pb, w, static_cast<int>(e), pos);
}

// Keeps the embedding candidates no other is at least as good as at every position (rule
// pareto-embedding; among exact equals the earlier index survives).
void filter_embeddings(Tally& t, Work& w) {
  const auto& eu = w.eu_all;
  const auto& em = w.emem_all;
  const size_t E = w.all_embs->size();
  auto dominates = [&](size_t a, size_t b) {  // a no worse than b everywhere
    for (int pos = 0; pos < w.P; ++pos)
      if (eu[a][pos] > eu[b][pos] || em[a][pos] > em[b][pos]) return false;
    return true;
  };
  for (size_t e = 0; e < E; ++e) {
    bool dominated = false;
    for (size_t o = 0; o < E && !dominated; ++o)
      dominated = o != e && dominates(o, e) && (!dominates(e, o) || o < e);
    if (dominated) {
      t.log.add(kRuleParetoEmbedding);
      continue;
    }
    w.embs.push_back((*w.all_embs)[e]);
    w.eu.push_back(eu[e]);
    w.emem.push_back(em[e]);
  }
}

// Transition times between the layouts of group ga and those of group gb into `layer` (independent
// of the stage by assumption: costed at stage 0), K*K, 0 on the diagonal.
std::vector<float> transition_table(const Problem& pb, const Work& w, int ga, int gb, int layer) {
  const int K = static_cast<int>(w.layouts.size());
  std::vector<float> t(static_cast<size_t>(K) * K, 0.0f);
  LayerContext lc;
  static_cast<StageContext&>(lc) = stage_context(pb, w, 0);
  lc.layer = layer;
  std::vector<char> in_a(K, 0), in_b(K, 0);
  for (int k : w.groups[ga].layout) in_a[k] = 1;
  for (int k : w.groups[gb].layout) in_b[k] = 1;
  for (int a = 0; a < K; ++a)
    for (int b = 0; b < K; ++b)
      if (a != b && in_a[a] && in_b[b])
        t[static_cast<size_t>(a) * K + b] = static_cast<float>(
            pb.cm.transition(lc, representative(w.layouts[a]), representative(w.layouts[b])).value());
  return t;
}

}  // namespace

double objective_time(const LayerCost& c, int m) {
  const double exposed = std::max(0.0, c.grad_sync.value() - c.bwd.value());
  return c.fwd.value() + c.bwd.value() + (exposed + c.optimizer.value()) / m;
}

double pipeline_weight(const PipelineConfig& c) {
  // The bounds bound the search's objective J, which for ZB-H1 is 1F1B's (its real, smaller bubble
  // is estimate()'s to price when the kept plans are re-ranked), so the same weight holds.
  return c.m + (c.pp - 1.0) / c.vp;
}

double objective(const std::vector<double>& group_cost, int m, int vp) {
  double mx = 0, sum = 0;
  for (double c : group_cost) mx = std::max(mx, c), sum += c;
  return (m - 1.0 / vp) * mx + sum / vp;
}

StageContext stage_context(const Problem& pb, const Work& w, int pos) {
  StageContext c;
  c.model = &pb.model;
  c.cluster = &pb.cluster;
  c.train = w.train;
  c.stage = pos;
  c.num_stages = w.P;
  c.stage_size = w.S;
  return c;
}

bool prepare(const Problem& pb, CandidateCache& cache, Tally& t, Work& w) {
  w.train = w.cfg.train(pb.opt);
  w.S = pb.world / w.cfg.pp;
  w.P = w.cfg.stages();
  w.pmb = pb.opt.global_batch / w.cfg.m;
  if (!collect_candidates(pb, cache, t, w)) return false;
  const size_t G = w.groups.size(), E = w.all_embs->size();
  w.p2p.assign(std::max(0, w.P - 1), std::vector<double>(w.layouts.size(), kNaN));
  w.u.assign(w.P, std::vector<std::vector<double>>(G));
  w.mem.assign(w.P, std::vector<std::vector<double>>(G));
  w.eu_all.assign(E, std::vector<double>(w.P, -1.0));
  w.emem_all.assign(E, std::vector<double>(w.P, -1.0));
  probe(pb, t, w);
  w.valid = true;
  return true;
}

// A middle stage position (docs/search.md, "Stage interpolation"): a layer's time does not depend
// on its stage, and its memory moves between the first and the last stage by a factor common to
// all strategies (the micro-batches in flight): mem(p) = mem(last) + lambda(p) (mem(first) -
// mem(last)). lambda(p) comes from one costed candidate; two more candidates check the rule at p.
// If the check fails, every candidate is costed at p.
void fill_position(const Problem& pb, Tally& t, Work& w, int pos) {
  if (w.filled[pos]) return;
  w.filled[pos] = 1;
  const int first = 0, last = w.P - 1;
  if (pos == first || pos == last || !pb.opt.interpolate_stages) {
    cost_position(pb, t, w, pos);
    return;
  }
  fill_position(pb, t, w, first);
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
  cost_entry(pb, t, w, pos, rg, rc);
  const double d = w.mem[first][rg][rc] - w.mem[last][rg][rc];
  const double lambda = d != 0 ? (w.mem[pos][rg][rc] - w.mem[last][rg][rc]) / d : 0.0;
  auto predicted = [&](int g, int c) { return w.mem[last][g][c] + lambda * (w.mem[first][g][c] - w.mem[last][g][c]); };
  auto close = [](double a, double b) { return std::abs(a - b) <= 1e-9 * std::max({1.0, std::abs(a), std::abs(b)}); };
  bool ok = close(w.u[pos][rg][rc], w.u[first][rg][rc]);
  for (int c : {fc, mc}) {
    if (c < 0 || !ok) continue;
    cost_entry(pb, t, w, pos, rg, c);
    ok = close(w.u[pos][rg][c], w.u[first][rg][c]) && close(w.mem[pos][rg][c], predicted(rg, c));
  }
  if (!ok) {
    ++t.stats.interpolation_fallbacks;
    cost_position(pb, t, w, pos);
    return;
  }
  for (size_t g = 0; g < w.groups.size(); ++g) {
    if (!w.groups[g].cands) continue;
    auto& uu = w.u[pos][g];
    auto& mm = w.mem[pos][g];
    if (uu.empty()) uu.assign(w.groups[g].cands->size(), kNaN), mm.assign(uu.size(), 0.0);
    for (size_t c = 0; c < uu.size(); ++c) {
      if (!std::isnan(uu[c])) continue;
      uu[c] = w.u[first][g][c];
      mm[c] = predicted(static_cast<int>(g), static_cast<int>(c));
    }
  }
}

double p2p_at(const Problem& pb, Work& w, int s, int k) {
  double& v = w.p2p[s][k];
  if (std::isnan(v)) {
    // The interleaved and zb-v schedules' sends run beside computation (ScheduleSpec::overlap_p2p,
    // docs/cost-model.md §7): their objective charges none, as their simulated step does not.
    v = w.cfg.vp > 1 ? 0.0 : pb.cm.p2p(stage_context(pb, w, s), representative(w.layouts[k])).value();
  }
  return v;
}

void complete(const Problem& pb, Tally& t, Work& w) {
  if (w.complete) return;
  w.complete = true;
  const int G = static_cast<int>(w.groups.size());
  const int K = static_cast<int>(w.layouts.size());
  for (int pos = 0; pos < w.P; ++pos) fill_position(pb, t, w, pos);
  for (size_t e = 0; e < w.all_embs->size(); ++e)
    for (int pos = 0; pos < w.P; ++pos) cost_extra(pb, w, static_cast<int>(e), pos);
  filter_embeddings(t, w);
  // p2p after each stage but the last, per layout.
  for (int s = 0; s + 1 < w.P; ++s)
    for (int k = 0; k < K; ++k) p2p_at(pb, w, s, k);
  w.t_within.assign(G, {});
  w.t_into.assign(G, {});
  int prev = -1;
  for (int g = 0; g < G; ++g) {
    if (!w.groups[g].cands) continue;
    if (pb.ranges[g].count > 1) w.t_within[g] = transition_table(pb, w, g, g, pb.ranges[g].first + 1);
    if (prev >= 0) w.t_into[g] = transition_table(pb, w, prev, g, pb.ranges[g].first);
    prev = g;
  }
}

// Lower bound on J (docs/search.md): every layer's time is at least phi(its memory), phi the lower
// convex hull of (memory, time) over all candidates and positions; a device group holds L/pp layers
// in at most B* bytes. Probe positions only (the first and the last stage; a middle one for stage
// extras): the bound assumes no middle stage is cheaper in time or memory than both ends.
void lower_bound(const Problem& pb, Work& w) {
  const int first = w.filled[0] ? 0 : w.P - 1, last = w.P - 1, mid = std::min(1, w.P - 1);
  std::vector<double> xs, ts;
  double min_layer_mem = kInf;
  double sum_min_mem = 0;
  for (size_t g = 0; g < w.groups.size(); ++g) {
    if (!w.groups[g].cands) continue;
    double gmin = kInf;
    for (size_t c = 0; c < w.groups[g].cands->size(); ++c) {
      const double mu = std::min(w.u[first][g][c], w.u[last][g][c]);
      const double mm = std::min(w.mem[first][g][c], w.mem[last][g][c]);
      if (pb.same_as[g] == static_cast<int>(g)) {  // a group of an earlier one's shape adds the same points
        xs.push_back(mm);
        ts.push_back(mu);
      }
      gmin = std::min(gmin, mm);
    }
    min_layer_mem = std::min(min_layer_mem, gmin);
    sum_min_mem += gmin * pb.ranges[g].count;
  }
  auto min_extra_at = [&](int pos) {
    double m = kInf;
    for (const auto& e : w.emem_all) m = std::min(m, e[pos]);
    return m;
  };
  const double min_extra = std::min({min_extra_at(first), min_extra_at(last), min_extra_at(mid)});
  const double sum_min_extra = min_extra_at(first) + (w.P > 1 ? min_extra_at(last) : 0.0) +
                               std::max(0, w.P - 2) * min_extra_at(mid);
  const double avail = pb.budget - min_extra;
  // Memory: the device groups together must hold every layer and every stage's extra.
  if (sum_min_mem + sum_min_extra > pb.budget * w.cfg.pp || avail < min_layer_mem) w.memory_infeasible = true;
  const double min_u = *std::min_element(ts.begin(), ts.end());
  const double n = static_cast<double>(pb.L) / w.cfg.pp;
  const double weight = pipeline_weight(w.cfg);
  w.lb_time = weight * n * min_u;
  const TimeMemoryHull phi(xs, ts);
  w.lb = weight * (n * phi(avail / n));
  if (!std::isfinite(w.lb)) w.memory_infeasible = true;
}

}  // namespace weft::planner
