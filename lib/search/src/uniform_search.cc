// The uniform plans of one configuration (search_internal.h): every candidate valid for all layer
// groups, even stages, the embedding following the layer strategy (embedding_for()).
#include "search_internal.h"
#include "weft/search/uniform.h"

namespace weft::planner {

namespace {

// The stage extras (objective time, memory) of each embedding strategy at every position, costed
// once per configuration.
class EmbeddingExtras {
 public:
  EmbeddingExtras(const Problem& pb, const Work& w) : pb_(pb), w_(w) {}
  const std::vector<std::pair<double, double>>& at(const LayerStrategy& emb) {
    auto it = std::find_if(memo_.begin(), memo_.end(), [&](const auto& x) { return x.first == emb; });
    if (it != memo_.end()) return it->second;
    std::vector<std::pair<double, double>> v(w_.P);
    for (int pos = 0; pos < w_.P; ++pos) {
      const LayerCost x = pb_.cm.stage_extra(stage_context(pb_, w_, pos), emb);
      v[pos] = {objective_time(x, w_.cfg.m), x.mem().value()};
    }
    memo_.emplace_back(emb, std::move(v));
    return memo_.back().second;
  }

 private:
  const Problem& pb_;
  const Work& w_;
  std::vector<std::pair<LayerStrategy, std::vector<std::pair<double, double>>>> memo_;
};

// The index of candidate c0 of the first group in every group (ep only on MoE layers); empty when
// some group lacks it.
std::vector<int> indices_in_groups(const Problem& pb, const Work& w, const LayerStrategy& c0) {
  std::vector<int> gi(w.groups.size(), -1);
  for (size_t g = 0; g < w.groups.size(); ++g) {
    if (!w.groups[g].cands) continue;
    if (const int same = pb.same_as[g]; same != static_cast<int>(g) && w.groups[same].cands == w.groups[g].cands) {
      gi[g] = gi[same];  // a group of the same shape before: the same list
      continue;
    }
    LayerStrategy want = c0;
    if (!pb.model.groups[g].shape.moe.enabled()) want.ep = 1;
    const auto& cg = *w.groups[g].cands;
    auto it = std::find(cg.begin(), cg.end(), want);
    if (it == cg.end()) return {};
    gi[g] = static_cast<int>(it - cg.begin());
  }
  return gi;
}

// The cheap tests at the last stage: a time bound (times do not depend on the stage) against the
// pool's worst, and the memory of the last stage's layers alone (a necessary condition).
bool may_win(const Problem& pb, const Work& w, const std::vector<int>& gi, const std::vector<int>& sizes,
             double weight, double worst) {
  const int last = w.P - 1;
  double umin = kInf;
  for (size_t g = 0; g < w.groups.size(); ++g)
    if (w.groups[g].cands) umin = std::min(umin, w.u[last][g][gi[g]]);
  if (weight * umin >= worst) return false;
  double m = 0;
  int a = 0;
  for (int t = 0; t < last; ++t) a += sizes[t];
  for (int i = 0; i < sizes[last]; ++i) m += w.mem[last][pb.group_of[a + i]][gi[pb.group_of[a + i]]];
  return m <= pb.budget;
}

}  // namespace

void uniform_config(const Problem& pb, Tally& t, Work& w, Pool& pool) {
  const int P = w.P, pp = w.cfg.pp;
  int g0 = 0;
  while (!w.groups[g0].cands) ++g0;
  const auto& c0 = *w.groups[g0].cands;
  const std::vector<int> sizes = even_stage_sizes(pb.L, P);
  const double weight = pipeline_weight(w.cfg) * (static_cast<double>(pb.L) / pp);
  EmbeddingExtras extras(pb, w);
  for (size_t c = 0; c < c0.size(); ++c) {
    const std::vector<int> gi = indices_in_groups(pb, w, c0[c]);
    if (gi.empty()) continue;
    if (!may_win(pb, w, gi, sizes, weight, pool.worst())) continue;
    const LayerStrategy emb = embedding_for(c0[c]);
    const auto& ex = extras.at(emb);
    const int k = w.groups[g0].layout[c];
    // Per stage its time with the p2p on both sides; per device group its memory.
    std::vector<double> stage_t(P, 0.0), dev_mem(pp, 0.0);
    int next = 0;
    for (int s = 0; s < P; ++s) {
      double time = ex[s].first, m = ex[s].second;
      for (int i = 0; i < sizes[s]; ++i) {
        const int g = pb.group_of[next + i];
        fill_position(pb, t, w, s);
        time += w.u[s][g][gi[g]];
        m += w.mem[s][g][gi[g]];
      }
      next += sizes[s];
      if (s + 1 < P) time += p2p_at(pb, w, s, k);
      if (s > 0) time += p2p_at(pb, w, s - 1, k);
      stage_t[s] = time;
      dev_mem[stage_group(w.train, s)] += m;
    }
    bool fits = true;
    for (double m : dev_mem) fits = fits && m <= pb.budget;
    if (!fits) continue;
    std::vector<double> group_t(pp, 0.0);
    for (int s = 0; s < P; ++s) group_t[stage_group(w.train, s)] += stage_t[s];
    const double j = objective(group_t, w.cfg.m, w.cfg.vp);
    if (j >= pool.worst()) continue;
    auto plan = make_uniform_plan(pb.model, pb.cluster, w.train, c0[c], emb);
    if (plan.ok()) pool.add(j, std::move(plan).value());
  }
}

}  // namespace weft::planner
