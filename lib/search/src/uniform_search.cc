// The uniform plans of one configuration (search_internal.h): every candidate valid for all layer
// groups, even stages, the embedding following the layer strategy (embedding_for()).
#include <cstdint>
#include <unordered_map>

#include "search_internal.h"
#include "weft/search/uniform.h"

namespace weft::planner {

namespace {

// A strategy's fields packed for hashing (each degree below 2^16, ZeRO and recompute small).
struct StrategyHash {
  size_t operator()(const LayerStrategy& s) const {
    uint64_t h = static_cast<uint64_t>(s.tp) | static_cast<uint64_t>(s.ulysses) << 16 |
                 static_cast<uint64_t>(s.cp) << 32 | static_cast<uint64_t>(s.dp) << 48;
    const uint64_t g = static_cast<uint64_t>(s.ep) | static_cast<uint64_t>(s.etp) << 16 |
                       static_cast<uint64_t>(s.zero) << 32 | static_cast<uint64_t>(s.recompute) << 40 |
                       static_cast<uint64_t>(s.sp) << 48;
    h ^= (g + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
    return std::hash<uint64_t>{}(h);
  }
};

// The stage extras (objective time, memory) of each embedding strategy at every position, costed
// once per configuration.
class EmbeddingExtras {
 public:
  EmbeddingExtras(const Problem& pb, const Work& w) : pb_(pb), w_(w) {}
  const std::vector<std::pair<double, double>>& at(const LayerStrategy& emb) {
    auto it = memo_.find(emb);
    if (it != memo_.end()) return it->second;
    std::vector<std::pair<double, double>> v(w_.P);
    for (int pos = 0; pos < w_.P; ++pos) {
      const LayerCost x = pb_.cm.stage_extra(stage_context(pb_, w_, pos), emb);
      v[pos] = {objective_time(x, w_.cfg.m), x.mem().value()};
    }
    return memo_.emplace(emb, std::move(v)).first->second;
  }

 private:
  const Problem& pb_;
  const Work& w_;
  std::unordered_map<LayerStrategy, std::vector<std::pair<double, double>>, StrategyHash> memo_;
};

// Where each candidate of the first group sits in every group's list (expert degrees only on MoE
// layers): one hash map per distinct list, built once per configuration instead of a linear
// search per candidate and group.
class GroupIndices {
 public:
  GroupIndices(const Problem& pb, const Work& w) : pb_(pb), w_(w), index_(w.groups.size()) {
    for (size_t g = 0; g < w.groups.size(); ++g) {
      if (!w.groups[g].cands) continue;
      if (const int same = pb.same_as[g]; same != static_cast<int>(g) && w.groups[same].cands == w.groups[g].cands)
        continue;  // a group of the same shape before: the same list
      const auto& cg = *w.groups[g].cands;
      index_[g].reserve(cg.size());
      for (size_t i = 0; i < cg.size(); ++i) index_[g].emplace(cg[i], static_cast<int>(i));
    }
  }

  // The index of candidate c0 of the first group in every group; empty when some group lacks it.
  std::vector<int> of(const LayerStrategy& c0) const {
    std::vector<int> gi(w_.groups.size(), -1);
    for (size_t g = 0; g < w_.groups.size(); ++g) {
      if (!w_.groups[g].cands) continue;
      if (const int same = pb_.same_as[g];
          same != static_cast<int>(g) && w_.groups[same].cands == w_.groups[g].cands) {
        gi[g] = gi[same];
        continue;
      }
      const LayerStrategy want = pb_.model.groups[g].shape.moe.enabled() ? c0 : without_experts(c0);
      const auto it = index_[g].find(want);
      if (it == index_[g].end()) return {};
      gi[g] = it->second;
    }
    return gi;
  }

 private:
  const Problem& pb_;
  const Work& w_;
  std::vector<std::unordered_map<LayerStrategy, int, StrategyHash>> index_;
};

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
  const GroupIndices indices(pb, w);
  for (size_t c = 0; c < c0.size(); ++c) {
    const std::vector<int> gi = indices.of(c0[c]);
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
