#include "weft/search/moe_placement.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "weft/core/format.h"
#include "weft/cost/collectives.h"
#include "weft/plan/rank_map.h"

namespace weft {

namespace {

// Where a traced layer's tokens start and where its experts live.
struct LayerGeometry {
  LayerStrategy s;
  int S = 1;
  std::vector<int> node;                      // per local rank of the stage: its node
  std::vector<std::vector<int>> replica;      // per data-parallel replica: its local ranks
  std::vector<std::vector<int>> dest;         // [local rank][expert]: the local rank holding it
  std::vector<std::vector<int>> replica_of;   // [micro-batch][position in it]: the replica
};

struct Rates {
  double inter = 1, intra = 1;  // achieved bytes/s
};

Rates rates_of(const ClusterSpec& c) {
  const CollectiveOptions o;
  return {std::max(1.0, c.inter.gbps * 1e9 * o.inter_efficiency), std::max(1.0, c.intra.gbps * 1e9 * o.intra_efficiency)};
}

Result<LayerGeometry> geometry(const Plan& p, int layer) {
  for (size_t st = 0; st < p.stages.size(); ++st) {
    const Stage& stage = p.stages[st];
    if (layer < stage.first_layer || layer >= stage.first_layer + stage.num_layers()) continue;
    LayerGeometry g;
    g.s = stage.layers[layer - stage.first_layer];
    g.S = p.devices_per_stage();
    const std::string where = "stages[" + S(static_cast<long long>(st)) + "].layers[" +
                              S(layer - stage.first_layer) + "] (layer " + S(layer) + ")";
    if (g.s.ulysses > 1 || g.s.cp > 1)
      return Error{ErrorKind::kBadInput, where + ": ulysses " + S(g.s.ulysses) + ", cp " + S(g.s.cp) +
                                             ": a sample's tokens are spread beyond its replica's tensor ranks, "
                                             "which sample placement does not cost (ulysses and cp 1 only)"};
    const int group = stage_group(p, static_cast<int>(st));
    const int gpn = std::max(1, p.cluster.gpus_per_node);
    const int E = p.model.layer(layer).moe.experts, ep = std::max(1, g.s.ep), per = E / ep;
    g.replica.assign(static_cast<size_t>(g.s.dp), {});
    for (int r = 0; r < g.S; ++r) {
      g.node.push_back((group * g.S + r) / gpn);
      g.replica[coords_of(r, g.S, g.s).dp].push_back(r);
      const std::vector<int> epg = group_of(group * g.S + r, g.S, p.train.pp, g.s, Axis::kEp);
      std::vector<int> d(static_cast<size_t>(E));
      for (int e = 0; e < E; ++e) d[e] = epg[e / per] - group * g.S;
      g.dest.push_back(std::move(d));
    }
    const int m = p.train.micro_batches;
    for (int k = 0; k < m; ++k) {
      std::vector<int> of;
      for (int j = 0; j < g.s.dp; ++j) of.insert(of.end(), p.train.replica_rows(g.s.dp, j, k, group), j);
      g.replica_of.push_back(std::move(of));
    }
    return g;
  }
  return Error{ErrorKind::kBadInput, "layer " + S(layer) + " is in no stage of the plan"};
}

Result<std::vector<LayerGeometry>> geometries(const Plan& p, const RoutingStep& step) {
  if (!p.train.dp_micro_batches.empty() || p.train.varlen)
    return Error{ErrorKind::kBadInput, "sample placement needs even micro-batches (no dp_micro_batches, no varlen)"};
  std::vector<LayerGeometry> out;
  for (int l : step.layers) {
    auto g = geometry(p, l);
    if (!g.ok()) return g.error();
    out.push_back(std::move(g).value());
  }
  return out;
}

}  // namespace

std::vector<int> min_cost_assignment(const std::vector<double>& a, int n) {
  // Shortest augmenting paths with row and column potentials (1-based, column 0 a sentinel).
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> u(n + 1, 0), v(n + 1, 0);
  std::vector<int> match(n + 1, 0), way(n + 1, 0);
  for (int i = 1; i <= n; ++i) {
    match[0] = i;
    int j0 = 0;
    std::vector<double> minv(n + 1, inf);
    std::vector<bool> used(n + 1, false);
    do {
      used[j0] = true;
      const int i0 = match[j0];
      double delta = inf;
      int j1 = 0;
      for (int j = 1; j <= n; ++j) {
        if (used[j]) continue;
        const double cur = a[static_cast<size_t>(i0 - 1) * n + (j - 1)] - u[i0] - v[j];
        if (cur < minv[j]) minv[j] = cur, way[j] = j0;
        if (minv[j] < delta) delta = minv[j], j1 = j;
      }
      for (int j = 0; j <= n; ++j) {
        if (used[j]) u[match[j]] += delta, v[j] -= delta;
        else minv[j] -= delta;
      }
      j0 = j1;
    } while (match[j0] != 0);
    do {
      const int j1 = way[j0];
      match[j0] = match[j1];
      j0 = j1;
    } while (j0);
  }
  std::vector<int> col(n, 0);
  for (int j = 1; j <= n; ++j) col[match[j] - 1] = j - 1;
  return col;
}

namespace {

// placement_traffic and place_samples on the step's layer geometries (geometries(p, step)).
PlacementTraffic traffic_of(const Plan& p, const std::vector<LayerGeometry>& gs, const RoutingStep& step,
                            const std::vector<int>* samples) {
  const Rates rate = rates_of(p.cluster);
  const double copy_bytes = static_cast<double>(p.model.hidden) * dtype_bytes(p.train.dtype);
  const int m = p.train.micro_batches, P = p.train.global_batch / std::max(1, m);
  PlacementTraffic out;
  double seconds = 0;
  for (size_t l = 0; l < gs.size(); ++l) {
    const LayerGeometry& g = gs[l];
    const auto& counts = step.counts[l];
    for (int k = 0; k < m; ++k) {
      std::vector<double> si(g.S, 0), so(g.S, 0), ri(g.S, 0), ro(g.S, 0);  // send/recv inter/intra copies
      for (int q = 0; q < P; ++q) {
        const int pos = k * P + q;
        const int sample = samples ? (*samples)[pos] : pos;
        const std::vector<int>& ranks = g.replica[g.replica_of[k][q]];
        const double share = 1.0 / static_cast<double>(ranks.size());
        for (int r : ranks)
          for (size_t e = 0; e < counts[sample].size(); ++e) {
            const double n = static_cast<double>(counts[sample][e]) * share;
            const int d = g.dest[r][e];
            if (n == 0 || d == r) continue;
            if (g.node[d] != g.node[r]) si[r] += n, ri[d] += n;
            else so[r] += n, ro[d] += n;
          }
      }
      double worst = 0;
      for (int r = 0; r < g.S; ++r) {
        out.inter_bytes += 4 * si[r] * copy_bytes;
        out.inter_copies += si[r];
        out.intra_bytes += 4 * so[r] * copy_bytes;
        worst = std::max(worst, std::max(si[r], ri[r]) * copy_bytes / rate.inter +
                                    std::max(so[r], ro[r]) * copy_bytes / rate.intra);
      }
      seconds += 4 * worst;
    }
  }
  out.time = Seconds(seconds);
  return out;
}

std::vector<int> placed_samples(const Plan& p, const std::vector<LayerGeometry>& gs, const RoutingStep& step) {
  const Rates rate = rates_of(p.cluster);
  const int m = p.train.micro_batches, P = p.train.global_batch / std::max(1, m);
  // w[l][j][e]: time per copy of expert e from replica j's ranks (its tokens spread evenly over them).
  std::vector<std::vector<std::vector<double>>> w;
  for (const LayerGeometry& g : gs) {
    const int E = static_cast<int>(g.dest.front().size());
    std::vector<std::vector<double>> wl(g.replica.size(), std::vector<double>(static_cast<size_t>(E), 0.0));
    for (size_t j = 0; j < g.replica.size(); ++j)
      for (int r : g.replica[j])
        for (int e = 0; e < E; ++e) {
          const int d = g.dest[r][e];
          if (d == r) continue;
          wl[j][e] += (g.node[d] != g.node[r] ? 1.0 / rate.inter : 1.0 / rate.intra) / g.replica[j].size();
        }
    w.push_back(std::move(wl));
  }
  std::vector<int> out(static_cast<size_t>(p.train.global_batch));
  std::vector<double> cost(static_cast<size_t>(P) * P);
  for (int k = 0; k < m; ++k) {
    double most = 0;
    for (int i = 0; i < P; ++i)
      for (int q = 0; q < P; ++q) {
        double c = 0;
        for (size_t l = 0; l < gs.size(); ++l) {
          const std::vector<double>& wj = w[l][gs[l].replica_of[k][q]];
          const std::vector<int64_t>& n = step.counts[l][k * P + i];
          for (size_t e = 0; e < n.size(); ++e) c += static_cast<double>(n[e]) * wj[e];
        }
        cost[static_cast<size_t>(i) * P + q] = c;
        most = std::max(most, c);
      }
    // Equal costs keep a sample where it was.
    const double tie = std::max(most, 1e-30) * 1e-9;
    for (int i = 0; i < P; ++i)
      for (int q = 0; q < P; ++q)
        if (i != q) cost[static_cast<size_t>(i) * P + q] += tie;
    const std::vector<int> col = min_cost_assignment(cost, P);
    for (int i = 0; i < P; ++i) out[k * P + col[i]] = k * P + i;
  }
  return out;
}

}  // namespace

Result<PlacementTraffic> placement_traffic(const Plan& p, const RoutingStep& step, const std::vector<int>* samples) {
  auto gs = geometries(p, step);
  if (!gs.ok()) return gs.error();
  return traffic_of(p, *gs, step, samples);
}

Result<std::vector<int>> place_samples(const Plan& p, const RoutingStep& step) {
  auto gs = geometries(p, step);
  if (!gs.ok()) return gs.error();
  return placed_samples(p, *gs, step);
}

Result<SamplePlacement> place_trace(const Plan& p, const RoutingTrace& t, std::vector<PlacedStepReport>* reports) {
  if (Status c = check_trace(t, p); !c.ok()) return c.error();
  SamplePlacement out;
  out.global_batch = p.train.global_batch;
  out.micro_batches = p.train.micro_batches;
  for (const RoutingStep& s : t.steps) {
    auto gs = geometries(p, s);
    if (!gs.ok()) return gs.error();
    std::vector<int> placed = placed_samples(p, *gs, s);
    if (reports) reports->push_back({s.step, traffic_of(p, *gs, s, nullptr), traffic_of(p, *gs, s, &placed)});
    out.steps.push_back({s.step, std::move(placed)});
  }
  return out;
}

RoutingTrace synthetic_trace(const Plan& p, int steps, double locality, uint64_t seed) {
  RoutingTrace t;
  t.model = p.model.name;
  t.seq = p.train.seq;
  t.global_batch = p.train.global_batch;
  std::vector<int> layers;
  for (int l = 0; l < p.model.num_layers(); ++l)
    if (p.model.layer(l).moe.enabled()) layers.push_back(l);
  if (layers.empty()) return t;
  const MoeSpec& moe = p.model.layer(layers.front()).moe;
  t.experts = moe.experts;
  t.top_k = moe.top_k;
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + 1);
  const int E = moe.experts;
  for (int s = 1; s <= steps; ++s) {
    RoutingStep rs;
    rs.step = s;
    rs.layers = layers;
    // Each sample prefers one block of experts (the experts of one ep rank of the first traced
    // layer), the same in every layer.
    int ep = 1;
    if (auto g = geometry(p, layers.front()); g.ok()) ep = std::max(1, g->s.ep);
    const int per = E / ep;
    std::vector<int> home(static_cast<size_t>(t.global_batch));
    for (int& h : home) h = static_cast<int>(rng() % static_cast<uint64_t>(ep));
    std::uniform_real_distribution<double> u(0, 1);
    for (size_t l = 0; l < layers.size(); ++l) {
      std::vector<std::vector<int64_t>> layer(static_cast<size_t>(t.global_batch),
                                              std::vector<int64_t>(static_cast<size_t>(E), 0));
      for (int i = 0; i < t.global_batch; ++i)
        for (int64_t tok = 0; tok < t.seq; ++tok) {
          std::vector<int> chosen;
          while (static_cast<int>(chosen.size()) < t.top_k) {
            const int e = u(rng) < locality && per > static_cast<int>(chosen.size())
                              ? home[i] * per + static_cast<int>(rng() % static_cast<uint64_t>(per))
                              : static_cast<int>(rng() % static_cast<uint64_t>(E));
            if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
          }
          for (int e : chosen) ++layer[i][e];
        }
      rs.counts.push_back(std::move(layer));
    }
    t.steps.push_back(std::move(rs));
  }
  return t;
}

}  // namespace weft
