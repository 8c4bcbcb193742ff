// Helpers for the search tests: the small models and clusters of tiny_specs.h, deterministic random
// candidate subsets, and brute-force optima written independently of the search's dynamic programs.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "contexts.h"
#include "fake_cost_model.h"
#include "tiny_specs.h"
#include "weft/cost/estimate.h"
#include "weft/search/search.h"
#include "weft/search/strategy_space.h"
#include "weft/search/uniform.h"

namespace weft::testing {

// A deterministic subset of at most `k` items, chosen by `seed`.
template <class T>
std::vector<T> subset(const std::vector<T>& all, int k, std::uint64_t seed) {
  std::vector<T> v = all;
  std::mt19937_64 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  if (static_cast<int>(v.size()) > k) v.resize(k);
  return v;
}

inline std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t h = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull + (a << 6) + (a >> 2));
  h ^= h >> 31;
  return h * 0xBF58476D1CE4E5B9ull;
}

// The objective time of one layer (or a stage's extra work) per micro-batch, as docs/search.md
// defines it.
inline double obj_time(const LayerCost& c, int m) {
  return c.fwd.value() + c.bwd.value() +
         (std::max(0.0, c.grad_sync.value() - c.bwd.value()) + c.optimizer.value()) / m;
}

// All compositions of n into k positive parts.
inline void compositions(int n, int k, std::vector<int>& cur, const std::function<void(const std::vector<int>&)>& f) {
  if (k == 1) {
    cur.push_back(n);
    f(cur);
    cur.pop_back();
    return;
  }
  for (int a = 1; a <= n - (k - 1); ++a) {
    cur.push_back(a);
    compositions(n - a, k - 1, cur, f);
    cur.pop_back();
  }
}

struct BruteSpace {
  std::function<std::vector<LayerStrategy>(const LayerShape&, int, int)> layer;
  std::function<std::vector<LayerStrategy>(int, int)> embedding;
};

// The least objective J of one pipeline configuration, over every stage partition (even chunks
// when interleaved), every embedding candidate and every per-layer assignment, computed directly
// from the cost model's layer / transition / p2p / stage_extra figures with exact memory. +inf if
// nothing fits. Enumerates each stage's (or device group's) assignments completely.
inline double brute_force_config(const ModelSpec& model, const ClusterSpec& cluster, const CostModel& cm,
                                 const SearchOptions& opt, const planner::PipelineConfig& cfg,
                                 const BruteSpace& space, bool uneven = true) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  const int L = model.num_layers();
  const int world = cluster.total_gpus();
  const int S = world / cfg.pp, P = cfg.stages(), m = cfg.m;
  const int pmb = opt.global_batch / m;
  const TrainSettings train = cfg.train(opt);
  const double budget = cm.memory_budget(cluster).value();
  std::vector<std::vector<LayerStrategy>> cands(L);
  for (int l = 0; l < L; ++l) {
    cands[l] = space.layer(model.layer(l), S, pmb);
    if (cands[l].empty()) return inf;
  }
  const std::vector<LayerStrategy> embs = space.embedding(S, pmb);
  auto sctx = [&](int s) { return make_stage_context(model, cluster, train, s, P, S); };
  auto lctx = [&](int s, int layer) { return make_layer_context(model, cluster, train, s, P, S, layer); };
  // Per stage s and range [a, a+n): for each assignment, (time, memory, last strategy).
  struct Assign {
    double t, mem;
    LayerStrategy last;
  };
  auto enumerate = [&](const std::vector<std::pair<int, int>>& chunks /* (stage, first layer) */, int n,
                       const std::function<void(double, double, const std::vector<LayerStrategy>&)>& f) {
    // Enumerate all assignments of the layers of the given chunks (each n layers).
    std::vector<std::pair<int, int>> layers;  // (stage, layer)
    for (auto [s, a] : chunks)
      for (int i = 0; i < n; ++i) layers.emplace_back(s, a + i);
    std::vector<int> pick(layers.size(), 0);
    while (true) {
      double t = 0, mem = 0;
      std::vector<LayerStrategy> chosen;
      for (size_t i = 0; i < layers.size(); ++i) {
        auto [s, l] = layers[i];
        const LayerStrategy& st = cands[l][pick[i]];
        const LayerCost c = cm.layer(lctx(s, l), st);
        t += obj_time(c, m);
        mem += c.mem().value();
        if (i > 0 && layers[i - 1].first == s) t += cm.transition(lctx(s, l), chosen.back(), st).value();
        chosen.push_back(st);
      }
      f(t, mem, chosen);
      size_t i = 0;
      while (i < pick.size() && ++pick[i] == static_cast<int>(cands[layers[i].second].size())) pick[i++] = 0;
      if (i == pick.size()) break;
    }
  };
  double best = inf;
  if (cfg.vp == 1) {
    std::vector<int> cur;
    compositions(L, P, cur, [&](const std::vector<int>& sizes) {
      if (!uneven && sizes != even_stage_sizes(L, P)) return;
      for (const auto& e : embs) {
        // For each stage: the assignments that fit, as (time without p2p, last strategy).
        std::vector<std::vector<Assign>> per(P);
        int a = 0;
        bool ok = true;
        for (int s = 0; s < P; ++s) {
          const LayerCost x = cm.stage_extra(sctx(s), e);
          const double xt = obj_time(x, m), xm = x.mem().value();
          enumerate({{s, a}}, sizes[s], [&](double t, double mem, const std::vector<LayerStrategy>& ch) {
            if (mem + xm <= budget) per[s].push_back({t + xt, mem + xm, ch.back()});
          });
          ok = ok && !per[s].empty();
          a += sizes[s];
        }
        if (!ok) continue;
        // Combine stages: every choice of one assignment per stage (p2p couples neighbours).
        std::vector<size_t> idx(P, 0);
        while (true) {
          double mx = 0, sum = 0;
          for (int s = 0; s < P; ++s) {
            double c = per[s][idx[s]].t;
            if (s + 1 < P) c += cm.p2p(sctx(s), per[s][idx[s]].last).value();
            if (s > 0) c += cm.p2p(sctx(s - 1), per[s - 1][idx[s - 1]].last).value();
            mx = std::max(mx, c);
            sum += c;
          }
          best = std::min(best, sum + (m - 1) * mx);
          int s = 0;
          while (s < P && ++idx[s] == per[s].size()) idx[s++] = 0;
          if (s == P) break;
        }
      }
    });
  } else {
    // Interleaved: even chunks; a device group's chunks share its memory. p2p must not depend on the
    // layout here (the test cases make it constant), so it is added per boundary.
    const int n0 = L / P;
    for (const auto& e : embs) {
      std::vector<double> group(cfg.pp, inf);
      for (int g = 0; g < cfg.pp; ++g) {
        std::vector<std::pair<int, int>> chunks;
        double xt = 0, xm = 0;
        for (int j = 0; j < cfg.vp; ++j) {
          const int s = g + j * cfg.pp;
          chunks.emplace_back(s, s * n0);
          const LayerCost x = cm.stage_extra(sctx(s), e);
          xt += obj_time(x, m);
          xm += x.mem().value();
          if (s + 1 < P) xt += cm.p2p(sctx(s), cands[0][0]).value();
          if (s > 0) xt += cm.p2p(sctx(s - 1), cands[0][0]).value();
        }
        enumerate(chunks, n0, [&](double t, double mem, const std::vector<LayerStrategy>&) {
          if (mem + xm <= budget) group[g] = std::min(group[g], t + xt);
        });
      }
      double mx = 0, sum = 0;
      for (double c : group) mx = std::max(mx, c), sum += c;
      if (std::isfinite(mx)) best = std::min(best, (m - 1.0 / cfg.vp) * mx + sum / cfg.vp);
    }
  }
  return best;
}

// The best uniform plan's step time (estimate()) of one configuration: every strategy offered to
// the first layer that is offered to every layer, even stages, the embedding following the layer
// (embedding_for()). +inf if none fits.
inline double brute_force_uniform(const ModelSpec& model, const ClusterSpec& cluster, const CostModel& cm,
                                  const SearchOptions& opt, const planner::PipelineConfig& cfg,
                                  const BruteSpace& space) {
  double best = std::numeric_limits<double>::infinity();
  const int S = cluster.total_gpus() / cfg.pp, pmb = opt.global_batch / cfg.m;
  for (const LayerStrategy& s : space.layer(model.layer(0), S, pmb)) {
    bool everywhere = true;
    for (int l = 0; l < model.num_layers(); ++l) {
      auto c = space.layer(model.layer(l), S, pmb);
      everywhere = everywhere && std::find(c.begin(), c.end(), s) != c.end();
    }
    if (!everywhere) continue;
    auto p = make_uniform_plan(model, cluster, cfg.train(opt), s, embedding_for(s));
    if (!p.ok()) continue;
    const Estimate e = estimate(*p, cm);
    if (e.fits) best = std::min(best, e.step_time.value());
  }
  return best;
}

}  // namespace weft::testing
