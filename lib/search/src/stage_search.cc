// The layer-wise search of one configuration (search_internal.h, docs/search.md): the layer DP per
// stage position and the stage partition per embedding candidate for pipelines (and pp = 1)
// (interleaved schedules: interleaved_search.cc). The best plan goes to the pool.
#include <cmath>

#include "search_internal.h"
#include "weft/search/partition.h"
#include "weft/search/uniform.h"

namespace weft::planner {

namespace {

// Non-interleaved pipelines (and pp = 1): layer DP per stage position, then the partition.
class PipelineSearch {
 public:
  PipelineSearch(const Problem& pb, const Work& w, const DpOptions& opts, double ub)
      : pb_(pb), w_(w), opts_(opts), ub_(ub), P_(w.P), K_(static_cast<int>(w.layouts.size())),
        E_(static_cast<int>(w.embs.size())), period_(period_of(pb)), shift_invariant_(period_ == 1),
        even_(!pb.opt.uneven_stages), even_sizes_(even_stage_sizes(pb.L, w.P)), tail_(tail_of(pb)), dp_(K_, pb.M) {}

  // The best plan and its objective, if one beats the pool's worst.
  std::optional<Pool::Kept> run();

 private:
  // f_n[k][cols[s][c]] of one run of the layer DP at position s from layer `start`, n = 1 .. nmax:
  // v[(n-1)*K*C + k*C + c].
  struct Run {
    int start = 0, nmax = 0;
    std::vector<float> v;
  };

  void budget_columns();
  Run run_from(int s, int a, int nhi, double bound);
  double even_upper_bound(const std::vector<Run>& even_runs) const;
  void build_runs(std::vector<Run> even_runs, double stage_ub);
  void p2p_classes();
  const Run& run_of(int s, int a) const {
    if (shift_invariant_) return tab_[s][0];
    if (even_) return tab_[s][a];
    return periodic() ? tab_[s][a % period_] : tab_[s][std::min(a, tail_start(s))];
  }
  // From layer tail_ on every layer has one shape (DeepSeek-V3: 3 dense layers, then 58 MoE): a run
  // from any start there is the run from the first such start a stage can take, cut short where
  // the layers end (the partition never asks a stage for more layers than remain).
  int tail_start(int s) const { return std::max(s, tail_); }
  static int tail_of(const Problem& pb) {
    int u = pb.L - 1;
    while (u > 0 && pb.same_as[pb.group_of[u - 1]] == pb.same_as[pb.group_of[pb.L - 1]]) --u;
    return u;
  }
  // The layers' shapes repeat with a period of a few layers (GPT-OSS: banded, full, banded, ...):
  // a stage's runs depend on its first layer only modulo the period (uneven stages).
  bool periodic() const { return period_ > 1 && !even_; }
  static int period_of(const Problem& pb) {
    if (pb.ranges.size() == 1) return 1;
    for (int p = 1; p <= 4 && 2 * p <= pb.L; ++p) {
      bool same = true;
      for (int i = 0; i + p < pb.L && same; ++i) same = pb.same_as[pb.group_of[i]] == pb.same_as[pb.group_of[i + p]];
      if (same) return p;
    }
    return 0;
  }
  std::optional<std::pair<int, PartitionResult>> best_partition(double bound) const;
  std::optional<std::vector<std::vector<int>>> backtrack(int e, const PartitionResult& best);

  const Problem& pb_;
  const Work& w_;
  const DpOptions& opts_;
  const double ub_;
  const int P_, K_, E_;
  const int period_;  // of the layers' shapes (1: one shape; 0: none of up to 4 layers)
  const bool shift_invariant_, even_;
  const std::vector<int> even_sizes_;
  const int tail_;  // the first layer of the model's last run of one shape
  LayerDp dp_;
  // Budget columns per (pos, e) and their distinct values per pos.
  std::vector<std::vector<int>> col_of_, cols_, col_index_;
  std::vector<std::vector<Run>> tab_;  // [s][start layer], [s][0] when shift invariant, [s][start % period]
  // p2p classes per boundary: layouts with equal p2p time.
  std::vector<std::vector<double>> cls_val_;
  std::vector<std::vector<int>> cls_of_;
};

void PipelineSearch::budget_columns() {
  col_of_.assign(P_, std::vector<int>(E_));
  cols_.assign(P_, {});
  col_index_.assign(P_, std::vector<int>(E_, -1));
  for (int s = 0; s < P_; ++s) {
    for (int e = 0; e < E_; ++e) {
      col_of_[s][e] = pb_.col(pb_.budget - w_.emem[e][s]);
      if (col_of_[s][e] >= 0 && std::find(cols_[s].begin(), cols_[s].end(), col_of_[s][e]) == cols_[s].end())
        cols_[s].push_back(col_of_[s][e]);
    }
    for (int e = 0; e < E_; ++e) {
      auto it = std::find(cols_[s].begin(), cols_[s].end(), col_of_[s][e]);
      col_index_[s][e] = it == cols_[s].end() ? -1 : static_cast<int>(it - cols_[s].begin());
    }
  }
}

// One run of the layer DP at position s from layer a, up to nhi layers, stopping once the stage's
// layers alone exceed `bound` or no longer fit.
PipelineSearch::Run PipelineSearch::run_from(int s, int a, int nhi, double bound) {
  const int C = static_cast<int>(cols_[s].size());
  const int maxcol = *std::max_element(cols_[s].begin(), cols_[s].end());
  Run run;
  run.start = a;
  dp_.start(false);
  for (int n = 1; n <= nhi; ++n) {
    const int layer = a + n - 1;
    const int g = pb_.group_of[layer];
    dp_.push(opts_[s][g].data(), static_cast<int>(opts_[s][g].size()),
             n == 1 ? nullptr : transitions_into(pb_, w_, layer));
    for (int k = 0; k < K_; ++k)
      for (int c = 0; c < C; ++c) run.v.push_back(dp_.at(k, cols_[s][c]));
    run.nmax = n;
    const float b = dp_.best(maxcol);
    if (!(b < kInfTime) || b > bound) break;  // more layers cannot fit or cannot win
  }
  return run;
}

// The even partition's J, an upper bound for this configuration: each stage at its best, charged
// the largest p2p on both sides.
double PipelineSearch::even_upper_bound(const std::vector<Run>& even_runs) const {
  double even_ub = kInf;
  for (int e = 0; e < E_; ++e) {
    std::vector<double> c(P_);
    bool ok = true;
    for (int s = 0; s < P_ && ok; ++s) {
      const Run& r = even_runs[s];
      const int C = static_cast<int>(cols_[s].size());
      if (r.nmax < even_sizes_[s] || col_index_[s][e] < 0) {
        ok = false;
        break;
      }
      float b = kInfTime;
      for (int k = 0; k < K_; ++k)
        b = std::min(b, r.v[(static_cast<size_t>(even_sizes_[s] - 1) * K_ + k) * C + col_index_[s][e]]);
      double worst_p2p = 0;
      for (int t : {s - 1, s})
        if (t >= 0 && t + 1 < P_) worst_p2p += *std::max_element(w_.p2p[t].begin(), w_.p2p[t].end());
      c[s] = static_cast<double>(b) + w_.eu[e][s] + worst_p2p;
      ok = std::isfinite(c[s]);
    }
    if (ok) even_ub = std::min(even_ub, objective(c, w_.cfg.m, 1));
  }
  return even_ub;
}

// The runs the partition reads (even stages: the even pass's runs).
void PipelineSearch::build_runs(std::vector<Run> even_runs, double stage_ub) {
  const int L = pb_.L;
  tab_.assign(P_, {});
  for (int s = 0; s < P_; ++s) {
    const int rest = P_ - 1 - s;
    tab_[s].resize(shift_invariant_ ? 1 : L);
    if (even_) {
      tab_[s][shift_invariant_ ? 0 : even_runs[s].start] = std::move(even_runs[s]);
      continue;
    }
    if (shift_invariant_) {
      tab_[s][0] = run_from(s, 0, L - P_ + 1, stage_ub);
      continue;
    }
    if (periodic()) {
      // From layer r, as long as any start a = r (mod period), a >= s, may run.
      tab_[s].resize(period_);
      for (int r = 0; r < period_; ++r) tab_[s][r] = run_from(s, r, L - r - rest, stage_ub);
      continue;
    }
    for (int a = s; a <= std::min(L - (P_ - s), tail_start(s)); ++a)
      tab_[s][a] = run_from(s, a, L - a - rest, stage_ub);
  }
}

void PipelineSearch::p2p_classes() {
  cls_val_.assign(std::max(0, P_ - 1), {});
  cls_of_.assign(std::max(0, P_ - 1), std::vector<int>(K_, 0));
  for (int s = 0; s + 1 < P_; ++s)
    for (int k = 0; k < K_; ++k) {
      auto it = std::find(cls_val_[s].begin(), cls_val_[s].end(), w_.p2p[s][k]);
      if (it == cls_val_[s].end()) {
        cls_val_[s].push_back(w_.p2p[s][k]);
        it = cls_val_[s].end() - 1;
      }
      cls_of_[s][k] = static_cast<int>(it - cls_val_[s].begin());
    }
}

// The stage partition for each embedding candidate that leaves room everywhere; the best of them.
std::optional<std::pair<int, PartitionResult>> PipelineSearch::best_partition(double bound) const {
  PartitionProblem pr;
  pr.layers = pb_.L;
  pr.stages = P_;
  pr.weight_max = w_.cfg.m - 1.0;
  pr.p2p = cls_val_;
  pr.upper_bound = bound;
  pr.shift_invariant = shift_invariant_;
  if (even_) {
    pr.n_min = pr.n_max = even_sizes_;
  } else if (shift_invariant_) {
    pr.n_max.resize(P_);
    for (int s = 0; s < P_; ++s) pr.n_max[s] = std::max(1, tab_[s][0].nmax);
  }
  int best_e = -1;
  PartitionResult best;
  for (int e = 0; e < E_; ++e) {
    bool ok = true;
    for (int s = 0; s < P_; ++s) ok = ok && col_index_[s][e] >= 0;
    if (!ok) continue;
    pr.cost = [&](int s, int a, int n, int q) -> double {
      const Run& r = run_of(s, a);
      if (n > r.nmax) return kInf;
      const int C = static_cast<int>(cols_[s].size());
      const int c = col_index_[s][e];
      const float* row = &r.v[static_cast<size_t>(n - 1) * K_ * C];
      float b = kInfTime;
      for (int k = 0; k < K_; ++k)
        if (s == P_ - 1 || cls_of_[s][k] == q) b = std::min(b, row[k * C + c]);
      if (!(b < kInfTime)) return kInf;
      return static_cast<double>(b) + w_.eu[e][s];
    };
    PartitionResult r = solve_partition(pr);
    if (r.feasible && r.objective < best.objective) {
      best = std::move(r);
      best_e = e;
      pr.upper_bound = std::min(pr.upper_bound, best.objective);
    }
  }
  if (best_e < 0) return std::nullopt;
  return std::make_pair(best_e, std::move(best));
}

// Each stage's per-layer candidate indices under the partition found for embedding e.
std::optional<std::vector<std::vector<int>>> PipelineSearch::backtrack(int e, const PartitionResult& best) {
  std::vector<std::vector<int>> idx(P_);
  int a = 0;
  for (int s = 0; s < P_; ++s) {
    const int n = best.sizes[s];
    dp_.start(true);
    for (int i = 0; i < n; ++i) {
      const int layer = a + i;
      const int g = pb_.group_of[layer];
      dp_.push(opts_[s][g].data(), static_cast<int>(opts_[s][g].size()),
               i == 0 ? nullptr : transitions_into(pb_, w_, layer));
    }
    const int c = col_of_[s][e];
    int bk = -1;
    float bv = kInfTime;
    for (int k = 0; k < K_; ++k)
      if ((s == P_ - 1 || cls_of_[s][k] == best.classes[s]) && dp_.at(k, c) < bv) bv = dp_.at(k, c), bk = k;
    if (bk < 0) return std::nullopt;
    idx[s] = dp_.backtrack(bk, c);
    a += n;
  }
  return idx;
}

std::optional<Pool::Kept> PipelineSearch::run() {
  budget_columns();
  for (int s = 0; s < P_; ++s)
    if (cols_[s].empty()) return std::nullopt;  // no embedding leaves room at this position
  std::vector<int> even_start(P_, 0);
  for (int t = 1; t < P_; ++t) even_start[t] = even_start[t - 1] + even_sizes_[t - 1];
  std::vector<Run> even_runs(P_);
  for (int s = 0; s < P_; ++s) even_runs[s] = run_from(s, even_start[s], even_sizes_[s], kInf);
  const double bound = std::min(ub_, even_upper_bound(even_runs) * (1 + 1e-9));
  build_runs(std::move(even_runs), bound / w_.cfg.m);
  p2p_classes();
  auto best = best_partition(bound);
  if (!best) return std::nullopt;
  auto idx = backtrack(best->first, best->second);
  if (!idx) return std::nullopt;
  return Pool::Kept{best->second.objective, make_plan(pb_, w_, best->first, best->second.sizes, *idx)};
}

}  // namespace

const float* transitions_into(const Problem& pb, const Work& w, int layer) {
  const int g = pb.group_of[layer], gp = pb.group_of[layer - 1];
  return g == gp ? w.t_within[g].data() : w.t_into[g].data();
}

void search_config(const Problem& pb, Tally& t, Work& w, Pool& pool) {
  const DpOptions opts = dp_options(pb, t, w);
  ++t.stats.searched;
  if (w.cfg.vp > 1) {
    search_interleaved(pb, w, opts, pool);
    return;
  }
  auto kept = PipelineSearch(pb, w, opts, pool.worst()).run();
  if (kept) pool.add(kept->j, std::move(kept->plan));
}

Plan make_plan(const Problem& pb, const Work& w, int e, const std::vector<int>& sizes,
               const std::vector<std::vector<int>>& idx) {
  Plan p;
  p.model = pb.model;
  p.cluster = pb.cluster;
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
      const int g = pb.group_of[next + i];
      while (j < sizes[s] && pb.group_of[next + j] == g &&
             w.groups[g].layout[order[j]] == w.groups[g].layout[order[i]])
        ++j;
      std::sort(order.begin() + i, order.begin() + j);
      i = j;
    }
    for (int i = 0; i < sizes[s]; ++i) st.layers.push_back((*w.groups[pb.group_of[next + i]].cands)[order[i]]);
    next += sizes[s];
    p.stages.push_back(std::move(st));
  }
  return p;
}

}  // namespace weft::planner
