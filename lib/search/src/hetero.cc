// Plans for mixed and straggling devices: costing unit by unit, placing homogeneous structures on
// the real devices (group order, stage boundaries, data-parallel shares) and the two baselines.
// weft/search/hetero.h describes the method.
#include "weft/search/hetero.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <limits>
#include <functional>
#include <map>
#include <numeric>
#include <set>

#include "weft/core/assert.h"
#include "weft/core/format.h"
#include "weft/plan/geometry.h"
#include "weft/search/partition.h"

namespace weft {

namespace {

MixedCluster devices_of(const Plan& p) { return p.devices ? p.devices->cluster : mixed_of(p.cluster); }

// Every layer and the embedding lay activations out alike (the condition for train.dp_shares).
// (Equal layout keys give equal layouts, weft/plan/geometry.h: each distinct key's layout is built
// once, not every layer's rank by rank.)
bool single_layout(const Plan& p) {
  const int S = p.devices_per_stage();
  const ActivationLayout want = layout_of(p.embedding, S);
  std::vector<LayoutKey> same{layout_key(p.embedding)}, differ;
  for (const Stage& st : p.stages)
    for (const LayerStrategy& l : st.layers) {
      const LayoutKey k = layout_key(l);
      if (std::find(same.begin(), same.end(), k) != same.end()) continue;
      if (std::find(differ.begin(), differ.end(), k) != differ.end()) return false;
      if (layout_of(l, S) == want) same.push_back(k);
      else return false;
    }
  return true;
}

// How the plan's devices split into units: replicas per stage group (1 when layouts differ).
int unit_replicas(const Plan& p) {
  if (!p.train.dp_shares.empty()) return static_cast<int>(p.train.dp_shares.size());
  if (!p.train.stage_dp_shares.empty()) return static_cast<int>(p.train.stage_dp_shares[0].size());
  return p.embedding.dp > 1 && single_layout(p) ? p.embedding.dp : 1;
}

// The links between nodes a stage's units are costed with: the slowest inter-node link of the
// groups the stage's ranks touch, and the link between groups when it spans several.
LinkSpec stage_inter(const MixedCluster& d, int first, int count) {
  const int g0 = d.group_of(first), g1 = d.group_of(first + count - 1);
  const ClusterSpec& home = d.groups[g0];
  LinkSpec l = home.nodes > 1 || home.inter.gbps > 0 ? home.inter : home.intra;
  for (int g = g0 + 1; g <= g1; ++g) {
    const ClusterSpec& o = d.groups[g];
    if (o.inter.gbps > 0 && o.inter.gbps < l.gbps) l = o.inter;
  }
  if (g1 != g0 && (l.gbps <= 0 || d.between.gbps < l.gbps)) l = d.between;
  if (l.gbps <= 0) l = home.intra;
  return l;
}

// The ClusterSpec one unit is costed on: the slowest of its ranks' GPUs with the least memory among
// them, the links of the groups it touches (the link between groups where it spans several), and
// its stage's links between nodes (stage_inter). Groups are contiguous rank ranges, so a unit spans
// the groups of its first and last rank.
ClusterSpec unit_cluster(const MixedCluster& d, const ClusterSpec& view, DType dtype, int first, int count,
                         const LinkSpec& inter) {
  ClusterSpec c = view;
  const int g0 = d.group_of(first), g1 = d.group_of(first + count - 1);
  const ClusterSpec& home = d.groups[g0];
  c.gpus_per_node = home.gpus_per_node;
  const int world = d.total_gpus();
  c.nodes = world % c.gpus_per_node == 0 ? world / c.gpus_per_node : 1;
  if (world % c.gpus_per_node != 0) c.gpus_per_node = world;
  c.gpu = home.gpu;
  double mem = c.gpu.memory_gib;
  for (int g = g0 + 1; g <= g1; ++g) {
    const GpuSpec& o = d.groups[g].gpu;
    if (o.peak(dtype).value() < c.gpu.peak(dtype).value()) c.gpu = o;
    mem = std::min(mem, o.memory_gib);
  }
  c.gpu.memory_gib = mem;
  // Inside a node: tensor-parallel and sequence groups never leave a node, so a unit spanning groups
  // keeps the slowest of their node links; what crosses groups goes over `inter`.
  c.intra = home.intra;
  for (int g = g0 + 1; g <= g1; ++g)
    if (d.groups[g].intra.gbps < c.intra.gbps) c.intra = d.groups[g].intra;
  c.inter = inter;
  return c;
}

std::string unit_key(const ClusterSpec& c) {
  return c.gpu.name + "|" + num(c.gpu.memory_gib) + "|" + num(c.gpu.tflops_bf16) + "|" + num(c.gpu.tflops_fp32) +
         "|" + num(c.intra.gbps) + "|" + num(c.inter.gbps) + "|" + std::to_string(c.gpus_per_node);
}

// The units of plan p: units[g][j] is replica j of stage group g.
struct Units {
  int pp = 1, replicas = 1, size = 1;  // size: ranks per unit
  std::vector<std::vector<ClusterSpec>> cluster;
  std::vector<std::vector<double>> slow;  // the largest slowdown among a unit's GPUs
  std::vector<std::string> signature;  // per replica: its units' keys over the stage groups
};

Units units_of(const Plan& p, const MixedCluster& d) {
  Units u;
  u.pp = std::max(1, p.train.pp);
  u.replicas = unit_replicas(p);
  const int S = p.devices_per_stage();
  u.size = S / u.replicas;
  const ClusterSpec view = d.as_uniform();
  u.cluster.assign(u.pp, {});
  u.slow.assign(u.pp, {});
  u.signature.assign(u.replicas, "");
  for (int g = 0; g < u.pp; ++g) {
    const LinkSpec inter = stage_inter(d, g * S, S);
    // Units alike (one group, no slowdown) share their cluster and key: build each distinct one once.
    std::map<std::pair<int, int>, int> built;  // (first group, last group) -> its index in keys
    std::vector<std::string> keys;             // each distinct unit's key
    std::vector<int> first_of;                 // the replica whose unit was built for it
    for (int j = 0; j < u.replicas; ++j) {
      const int first = g * S + j * u.size;
      double slow = 1.0;
      for (int r = first; r < first + u.size && !d.slowdown.empty(); ++r) slow = std::max(slow, d.slowdown_of(r));
      const std::pair<int, int> span{d.group_of(first), d.group_of(first + u.size - 1)};
      auto it = built.find(span);
      if (it == built.end()) {
        u.cluster[g].push_back(unit_cluster(d, view, p.train.dtype, first, u.size, inter));
        keys.push_back(unit_key(u.cluster[g].back()));
        it = built.emplace(span, static_cast<int>(keys.size()) - 1).first;
      } else {
        u.cluster[g].push_back(u.cluster[g][first_of[it->second]]);
      }
      if (first_of.size() < keys.size()) first_of.push_back(j);
      u.slow[g].push_back(slow);
      u.signature[j] += keys[it->second] + (slow == 1.0 ? std::string(";") : "x" + num(slow) + ";");
    }
  }
  return u;
}

struct ReplicaCost {
  StepCost step;
  std::vector<StageSums> sums;
  std::vector<Bytes> group_mem, budget;  // per stage group
  bool fits = true;
};

// Plan p as one replica taking `share` samples of each of `count` micro-batches sees it: every
// replica at that share and count, so the cost model's per-device batch is the share and its
// pipeline runs `count` micro-batches (a suspended replica, share or count 0, is costed as one of
// share 1 and one micro-batch whose passes are then taken out: replica_cost). The micro-batches a
// replica passes through with no samples (train.dp_micro_batches) take no time.
Plan with_share(const Plan& p, const Units& u, int share, int count) {
  Plan q = p;
  q.train.dp_shares.clear();
  q.train.stage_dp_shares.clear();
  q.train.dp_micro_batches.clear();
  q.train.micro_batches = std::max(1, count);
  q.train.global_batch = std::max(1, share) * u.replicas * q.train.micro_batches;
  return q;
}

// Replica j of plan p taking `share` samples of each of `count` micro-batches. Share or count 0
// suspends the replica (Malleus's suspended devices): it runs no forward or backward pass but still
// holds its model states, joins the gradient reduction and steps its optimizer; its memory is taken
// at share 1 (an upper bound: one sample's activations it does not hold).
ReplicaCost replica_cost(const Plan& p, const Units& u, const CostModel& cm, int j, int share, int count) {
  const Plan q = with_share(p, u, share, count);
  std::vector<ClusterSpec> clusters;
  for (size_t s = 0; s < q.stages.size(); ++s) clusters.push_back(u.cluster[stage_group(q, static_cast<int>(s))][j]);
  ReplicaCost rc;
  rc.sums = stage_sums(q, cm, clusters);
  // A slowed unit's passes (compute and the communication inside them) take `slow` times as long,
  // as a throttled GPU or the runtime's --slow hook makes them.
  for (size_t s = 0; s < rc.sums.size(); ++s) {
    const double f = u.slow[stage_group(q, static_cast<int>(s))][j];
    if (f == 1.0) continue;
    rc.sums[s].fwd = rc.sums[s].fwd * f;
    rc.sums[s].bwd = rc.sums[s].bwd * f;
    rc.sums[s].wgrad = rc.sums[s].wgrad * f;
  }
  if (share == 0 || count == 0)
    for (StageSums& ss : rc.sums) ss.fwd = ss.bwd = ss.wgrad = ss.p2p = Seconds(0);
  rc.step = cm.step(q.train, rc.sums);
  rc.group_mem.assign(u.pp, Bytes(0));
  rc.budget.assign(u.pp, Bytes(0));
  for (size_t s = 0; s < rc.sums.size(); ++s) rc.group_mem[stage_group(q, static_cast<int>(s))] += rc.sums[s].memory.total();
  for (int g = 0; g < u.pp; ++g) {
    rc.budget[g] = cm.memory_budget(u.cluster[g][j]);
    rc.fits = rc.fits && rc.group_mem[g] <= rc.budget[g];
  }
  return rc;
}

// Replica j's samples of each micro-batch on device group g.
int share_of(const Plan& p, const Units& u, int j, int g = 0) {
  if (!p.train.dp_shares.empty()) return p.train.dp_shares[j];
  if (!p.train.stage_dp_shares.empty()) return p.train.stage_dp_shares[g][j];
  return p.train.pipeline_micro_batch() / std::max(1, u.replicas);
}

// The micro-batches replica j computes (train.dp_micro_batches, or all of them).
int count_of(const Plan& p, int j) {
  return p.train.dp_micro_batches.empty() ? p.train.micro_batches : p.train.dp_micro_batches[j];
}

// Replica j's samples per step on device group g (the whole batch when the plan is costed as one
// unit).
int samples_of(const Plan& p, const Units& u, int j, int g = 0) {
  return u.replicas <= 1 ? p.train.global_batch : p.train.replica_samples(u.replicas, j, g);
}

// What unit (g, j) is: its devices and their slowdown (units alike cost alike at one share).
std::string unit_id(const Units& u, int g, int j) { return unit_key(u.cluster[g][j]) + "x" + num(u.slow[g][j]); }

// Replica costs of plan p memoised by (replica signature, share, count).
struct ReplicaCosts {
  const Plan& p;
  const Units& u;
  const CostModel& cm;
  std::map<std::string, ReplicaCost> memo;
  const ReplicaCost& at(int j, int share, int count) {
    const std::string key = u.signature[j] + "#" + std::to_string(share) + "/" + std::to_string(count);
    auto it = memo.find(key);
    if (it == memo.end()) it = memo.emplace(key, replica_cost(p, u, cm, j, share, count)).first;
    return it->second;
  }
};

// Plan p with train.stage_dp_shares: each stage's units at their own group's shares; a stage takes
// its slowest unit's time per micro-batch (the units of a stage exchange activations with the next
// group's, so each waits for the slowest), and the step is one pipeline over those stages
// (CostModel::step). A boundary where the groups split a micro-batch differently also pays the
// receiving group's re-split (an all-to-all of about one block among its ranks: priced as one
// more boundary transfer of its largest block). Per-stage sums, the step, and per unit (g, j) its
// memory and budget.
struct StageSplitCost {
  StepCost step;
  std::vector<StageSums> sums;
  std::vector<std::vector<Bytes>> mem, budget;  // [group][replica]
  std::vector<std::vector<double>> time;         // [group][replica]: busy time per step
  bool fits = true;
};
StageSplitCost stage_split_cost(const Plan& p, const Units& u, ReplicaCosts& rcs) {
  StageSplitCost out;
  const int nst = static_cast<int>(p.stages.size());
  const int m = p.train.micro_batches;
  out.sums.assign(nst, StageSums{});
  out.mem.assign(u.pp, std::vector<Bytes>(u.replicas, Bytes(0)));
  out.budget = out.mem;
  out.time.assign(u.pp, std::vector<double>(u.replicas, 0.0));
  for (int s = 0; s < nst; ++s) {
    const int g = stage_group(p, s);
    // The slowest unit's sums, with the most any unit spends on its gradient sync, optimizer and p2p.
    const StageSums* slowest = nullptr;
    Seconds grad_sync, optimizer, p2p;
    for (int j = 0; j < u.replicas; ++j) {
      const ReplicaCost& rc = rcs.at(j, share_of(p, u, j, g), m);
      const StageSums& ss = rc.sums[s];
      out.time[g][j] += (ss.fwd + ss.bwd).value() * m;
      if (!slowest || ss.fwd + ss.bwd > slowest->fwd + slowest->bwd) slowest = &ss;
      grad_sync = std::max(grad_sync, ss.grad_sync);
      optimizer = std::max(optimizer, ss.optimizer);
      p2p = std::max(p2p, ss.p2p);
      out.mem[g][j] = rc.group_mem[g];
      out.budget[g][j] = rc.budget[g];
      out.fits = out.fits && rc.group_mem[g] <= rc.budget[g];
    }
    out.sums[s] = *slowest;
    out.sums[s].grad_sync = grad_sync;
    out.sums[s].optimizer = optimizer;
    out.sums[s].p2p = p2p;
    if (s > 0 && stage_group(p, s - 1) != g && p.train.stage_dp_shares[stage_group(p, s - 1)] != p.train.stage_dp_shares[g]) {
      const int boundaries = 1 + (s + 1 < nst ? 1 : 0);
      out.sums[s].p2p += p2p / boundaries;
    }
  }
  TrainSettings t = p.train;
  t.stage_dp_shares.clear();
  out.step = rcs.cm.step(t, out.sums);
  return out;
}

double nominal_peak_sum(const MixedCluster& d, DType dtype) {
  double s = 0;
  for (const ClusterSpec& g : d.groups) s += g.gpu.peak(dtype).value() * g.total_gpus();
  return s;
}

// A replica's step time and whether it fits, as a function of its share: exact at a geometric grid
// of shares (1, 2, 3, 4, 6, 8, 12, ...), linear between them.
struct ShareCurve {
  std::vector<int> at;
  std::vector<double> time;
  std::vector<char> fits;
  double operator()(int b) const {
    size_t i = 1;
    while (i < at.size() && at[i] < b) ++i;
    if (i >= at.size()) return time.back();
    const double f = static_cast<double>(b - at[i - 1]) / (at[i] - at[i - 1]);
    return time[i - 1] + f * (time[i] - time[i - 1]);
  }
  // The largest share whose sampled neighbours both fit.
  int most() const {
    int m = 0;
    for (size_t i = 0; i < at.size() && fits[i]; ++i) m = at[i];
    return m;
  }
};

// Replica j's curve over its share b of each micro-batch (share 0), or over the count b of its
// micro-batches at `share` samples each. A count curve is exact up to the pipeline's stages (pp x
// vp) and at `largest`, linear between: beyond that a pipeline's step grows by one slowest stage per
// micro-batch (sum + (m - 1) x max) and its activations in flight no longer grow (every schedule
// but gpipe's, whose grow linearly), so the two ends bound it.
// A curve sampled by at(b) = (time, fits) at b = 1, 2, 3, 4, 6, 9, ... up to `dense`, then at
// `largest` (and at `largest` in any case).
ShareCurve sample_curve(int largest, int dense, const std::function<std::pair<double, bool>(int b)>& at) {
  ShareCurve c;
  for (int b = 1; b <= largest;) {
    const auto [time, fits] = at(b);
    c.at.push_back(b);
    c.time.push_back(time);
    c.fits.push_back(fits ? 1 : 0);
    if (b == largest) break;
    b = b >= dense ? largest : std::min(largest, b < 4 ? b + 1 : b + b / 2);
  }
  return c;
}

ShareCurve share_curve(const Plan& p, const Units& u, const CostModel& cm, int j, int largest, int share = 0) {
  const int dense = share == 0 ? largest : std::max(1, p.train.pp) * std::max(1, p.train.vp);
  return sample_curve(largest, dense, [&](int b) {
    const ReplicaCost rc =
        share == 0 ? replica_cost(p, u, cm, j, b, p.train.micro_batches) : replica_cost(p, u, cm, j, share, b);
    return std::pair<double, bool>{rc.step.step_time.value(), rc.fits};
  });
}

// Integer shares, `least` or more each, summing to `total`, that minimise the largest time(j, share):
// one sample at a time to the replica that would finish it first (exact when each time grows with
// its share), never beyond most(j). Empty when a sample fits no replica. With least 0 a replica
// stays suspended while its first sample would finish later than another replica's next.
std::vector<int> water_fill(int replicas, int total, const std::function<double(int j, int share)>& time,
                            const std::function<int(int j)>& most, int least = 1) {
  std::vector<int> x(replicas, least);
  for (int left = total - least * replicas; left > 0; --left) {
    int best = -1;
    double bt = 0;
    for (int j = 0; j < replicas; ++j) {
      if (x[j] + 1 > most(j)) continue;
      const double t = time(j, x[j] + 1);
      if (best < 0 || t < bt - 1e-12) best = j, bt = t;
    }
    if (best < 0) return {};
    ++x[best];
  }
  return x;
}

// Balances the replicas, two ways, keeping the fastest of them and even shares by the exact
// estimate (even wins ties): shares, integers summing to the micro-batch that minimise the slowest
// replica's step (min-max water filling over each distinct replica's share curve, one sample at a
// time to the replica that would finish first); and, where the micro-batch splits evenly and the
// schedule is not interleaved, counts, the micro-batches of the even size each replica computes
// (train.dp_micro_batches: a one-sample replica has no smaller share to take), water-filled the
// same way over its count curve, so the plan runs the largest count. Both within each replica's
// memory; with `suspend` a replica may get none. Replicas alike keep even shares.
void fit_shares(Plan& p, const MixedCluster& d, const CostModel& cm, bool suspend = true) {
  if (!p.train.dp_micro_batches.empty()) {
    // Counts set before (by an earlier fit): back to micro-batches of the shares' samples.
    long long per = 0;
    for (int x : p.train.dp_shares) per += x;
    if (per > 0 && p.train.global_batch % per == 0) p.train.micro_batches = static_cast<int>(p.train.global_batch / per);
  }
  p.train.dp_shares.clear();
  p.train.dp_micro_batches.clear();
  p.train.stage_dp_shares.clear();
  const int dp = p.embedding.dp;
  const int P = p.train.pipeline_micro_batch();
  const int m = p.train.micro_batches;
  const int least = suspend ? 0 : 1;
  if (dp <= 1 || !single_layout(p)) return;
  const Units u = units_of(p, d);
  // Replicas alike (each spans the same kinds at the same speeds) balance evenly.
  if (P % dp == 0 && std::all_of(u.signature.begin(), u.signature.end(), [&](const std::string& g) {
        return g == u.signature[0];
      }))
    return;
  std::optional<Plan> best;
  double best_s = 0;
  auto consider = [&](Plan q) {
    const HeteroEstimate e = hetero_estimate(q, cm);
    if (!e.total.fits || (best && e.total.step_time.value() >= best_s)) return;
    best_s = e.total.step_time.value();
    best = std::move(q);
  };
  if (P % dp == 0) consider(p);
  auto fill = [&](int total, int share) {
    const int largest = total - least * (dp - 1);
    std::map<std::string, ShareCurve> curves;
    std::vector<const ShareCurve*> curve(dp);
    for (int j = 0; j < dp; ++j) {
      auto it = curves.find(u.signature[j]);
      if (it == curves.end()) it = curves.emplace(u.signature[j], share_curve(p, u, cm, j, largest, share)).first;
      curve[j] = &it->second;
    }
    std::vector<int> x = water_fill(
        dp, total, [&](int j, int b) { return (*curve[j])(b); }, [&](int j) { return curve[j]->most(); }, least);
    if (std::all_of(x.begin(), x.end(), [&](int v) { return v == x[0]; })) x.clear();  // even (or none)
    return x;
  };
  if (P >= 2 && P > least * dp) {
    std::vector<int> x = fill(P, 0);
    if (!x.empty()) {
      Plan q = p;
      q.train.dp_shares = std::move(x);
      consider(std::move(q));
    }
  }
  const int share = P / dp;
  // (Not interleaved: its micro-batches come in multiples of pp, which a count curve steps over.)
  if (P % dp == 0 && p.train.schedule != Schedule::kInterleaved) {
    std::vector<int> c = fill(m * dp, share);
    const int most = c.empty() ? 0 : *std::max_element(c.begin(), c.end());
    if (most > 0) {
      Plan q = p;
      q.train.dp_shares.assign(dp, share);
      q.train.dp_micro_batches = std::move(c);
      q.train.micro_batches = most;
      consider(std::move(q));
    }
  }
  // Shares per device group (train.stage_dp_shares, Metis's split inside each stage): where some
  // group's units differ (a stage on fast and slow devices at once), each group's shares are
  // water-filled over its own units' time per micro-batch at each share (their stages' forward and
  // backward), so a group of alike devices splits evenly while a mixed one leans on its fast
  // devices. Not under counts (a micro-batch's samples are then the same on every group).
  if (u.pp > 1 && P >= dp) {
    std::vector<std::vector<int>> x(u.pp);
    bool uneven = false;
    ReplicaCosts rcs{p, u, cm, {}};
    for (int g = 0; g < u.pp; ++g) {
      bool alike = true;
      for (int j = 1; j < dp; ++j) alike = alike && unit_id(u, g, j) == unit_id(u, g, 0);
      if (alike && P % dp == 0) {
        x[g].assign(dp, P / dp);
        continue;
      }
      // Group g's time per micro-batch for replica j at share b, from its distinct units' curves.
      std::map<std::string, ShareCurve> curves;
      std::vector<const ShareCurve*> curve(dp);
      const int largest = P - least * (dp - 1);
      for (int j = 0; j < dp; ++j) {
        auto it = curves.find(unit_id(u, g, j));
        if (it == curves.end()) {
          // Exact at shares 1, 2, 3, 4, 6, 9, ... and at the largest, linear between.
          const ShareCurve c = sample_curve(largest, largest, [&](int b) {
            const ReplicaCost& rc = rcs.at(j, b, m);
            double t = 0;
            for (size_t st = 0; st < p.stages.size(); ++st)
              if (stage_group(p, static_cast<int>(st)) == g) t += (rc.sums[st].fwd + rc.sums[st].bwd).value();
            return std::pair<double, bool>{t, rc.group_mem[g] <= rc.budget[g]};
          });
          it = curves.emplace(unit_id(u, g, j), c).first;
        }
        curve[j] = &it->second;
      }
      x[g] = water_fill(
          dp, P, [&](int j, int b) { return (*curve[j])(b); }, [&](int j) { return curve[j]->most(); }, least);
      if (x[g].empty()) {
        x.clear();
        break;
      }
      uneven = uneven || !std::all_of(x[g].begin(), x[g].end(), [&](int v) { return v == x[g][0]; });
    }
    if (!x.empty() && uneven) {
      Plan q = p;
      q.train.stage_dp_shares = std::move(x);
      consider(std::move(q));
    }
  }
  if (best) p = std::move(*best);
}

// Re-cuts the stage boundaries: each stage's layers by the search's partition DP over the stage's
// slowest unit's per-micro-batch time, within every unit's memory.
void recut(Plan& p, const MixedCluster& d, const CostModel& cm) {
  const int pp = p.train.pp;
  if (pp <= 1 || p.train.vp != 1) return;
  const int L = p.model.num_layers();
  std::vector<LayerStrategy> strat;
  for (const Stage& st : p.stages) strat.insert(strat.end(), st.layers.begin(), st.layers.end());
  const Units u = units_of(p, d);
  // Distinct units per stage: (cluster, share).
  struct Col {
    std::vector<double> t, m;  // prefix sums over layers of time per micro-batch and memory
    double extra_t = 0, extra_m = 0, budget = 0;
  };
  std::vector<std::vector<Col>> cols(pp);
  for (int s = 0; s < pp; ++s) {
    std::map<std::string, int> seen;
    for (int j = 0; j < u.replicas; ++j) {
      const int share = share_of(p, u, j, s), count = count_of(p, j);
      const std::string key = unit_key(u.cluster[s][j]) + "x" + num(u.slow[s][j]) + "#" + std::to_string(share) + "/" +
                              std::to_string(count);
      if (seen.count(key)) continue;
      seen[key] = 1;
      const Plan q = with_share(p, u, share, p.train.micro_batches);
      const ClusterSpec& cl = u.cluster[s][j];
      // Time factor: a suspended replica runs no pass, one of fewer micro-batches (dp_micro_batches)
      // its share of the step's (the objective's micro-batches are the plan's).
      const double pass = share == 0 ? 0.0 : u.slow[s][j] * count / std::max(1, p.train.micro_batches);
      const StageContext sc = stage_context(q, s, cl);
      LayerContext lc;
      static_cast<StageContext&>(lc) = sc;
      Col col;
      col.t.assign(L + 1, 0);
      col.m.assign(L + 1, 0);
      double t = 0, mem = 0;
      for (int l = 0; l < L; ++l) {
        // A layer of the same shape under the same strategy as the one before costs the same (the
        // cost model's contract, weft/search/search.h), with no transition between them; the
        // transition into a layer is paid where the strategy changes, once.
        lc.layer = l;
        if (l == 0 || !(strat[l] == strat[l - 1]) || !(p.model.layer(l) == p.model.layer(l - 1))) {
          const LayerCost c = cm.layer(lc, strat[l]);
          t = (c.fwd + c.bwd).value() * pass;
          mem = c.mem().value();
        }
        double here = t;
        if (l > 0 && !(strat[l] == strat[l - 1])) here += cm.transition(lc, strat[l - 1], strat[l]).value() * pass;
        col.t[l + 1] = col.t[l] + here;
        col.m[l + 1] = col.m[l] + mem;
      }
      const LayerCost e = cm.stage_extra(sc, p.embedding);
      col.extra_t = (e.fwd + e.bwd).value() * pass;
      col.extra_m = e.mem().value();
      col.budget = cm.memory_budget(cl).value();
      cols[s].push_back(std::move(col));
    }
  }
  const double inf = std::numeric_limits<double>::infinity();
  // The search's own partition DP (weft/search/partition.h) over each stage's slowest unit: the
  // pipeline objective sum + (m - 1) x max of the stages' times per micro-batch, within every
  // unit's memory. Layer strategies stay; only the cuts move.
  planner::PartitionProblem prob;
  prob.layers = L;
  prob.stages = pp;
  prob.weight_max = p.train.micro_batches - 1;
  prob.p2p.assign(pp > 1 ? pp - 1 : 0, std::vector<double>{0.0});
  prob.cost = [&](int s, int a, int n, int) {
    double worst = 0;
    for (const Col& c : cols[s]) {
      if (c.m[a + n] - c.m[a] + c.extra_m > c.budget) return inf;
      worst = std::max(worst, c.t[a + n] - c.t[a] + c.extra_t);
    }
    return worst;
  };
  const planner::PartitionResult cutr = planner::solve_partition(prob);
  if (!cutr.feasible) return;  // nothing fits: keep the structure's own cut
  std::vector<int> cut(pp + 1, 0);
  for (int s = 0; s < pp; ++s) cut[s + 1] = cut[s] + cutr.sizes[s];
  for (int s = 0; s < pp; ++s) {
    Stage& st = p.stages[s];
    st.first_layer = cut[s];
    st.layers.assign(strat.begin() + cut[s], strat.begin() + cut[s + 1]);
    st.predicted = {};
  }
}

std::vector<std::vector<int>> group_orders(int n) {
  std::vector<int> o(n);
  std::iota(o.begin(), o.end(), 0);
  std::vector<std::vector<int>> out;
  do {
    out.push_back(o);
  } while (std::next_permutation(o.begin(), o.end()) && out.size() < 24);
  return out;
}

struct SubsetResult {
  std::optional<Plan> plan;
  double step_s = 0;
  std::string label;
};

// The best plan on the largest homogeneous subset of the fastest devices: the fastest group's GPUs at
// full speed, whole nodes or one partial node, a count that divides the batch.
SubsetResult fastest_subset(const ModelSpec& model, const MixedCluster& devices, const CostModel& cm,
                            const SearchOptions& opt) {
  SubsetResult out;
  int fastest = 0;
  auto speed = [&](int g) { return devices.groups[g].gpu.peak(opt.dtype).value(); };
  for (int g = 1; g < static_cast<int>(devices.groups.size()); ++g)
    if (speed(g) > speed(fastest)) fastest = g;
  const ClusterSpec& fg = devices.groups[fastest];
  int n = 0;
  for (int r = devices.first_gpu(fastest); r < devices.first_gpu(fastest) + fg.total_gpus(); ++r)
    n += devices.slowdown_of(r) <= 1.0 ? 1 : 0;
  for (; n >= 1; --n) {
    ClusterSpec sub = fg;
    if (n % fg.gpus_per_node == 0) sub.nodes = n / fg.gpus_per_node;
    else if (n < fg.gpus_per_node) sub.nodes = 1, sub.gpus_per_node = n;
    else continue;
    if (opt.global_batch % n != 0 && n > 1) continue;
    SearchOptions so = opt;
    so.top_k = 1;
    so.pp_degrees.clear();
    so.progress = nullptr;
    auto r = search(model, sub, cm, so);
    if (!r.ok()) continue;
    out.label = std::to_string(n) + " x " + fg.gpu.name;
    if (!r->top.empty()) {
      out.plan = r->top[0];
      out.step_s = r->top[0].predicted.step_time_s;
    }
    break;
  }
  return out;
}

// Structures the homogeneous searches propose: their best kStructures, of which placement tries
// the best kPlaced and, beyond them, the best of each pipeline shape (pp, vp) not yet among them.
// On one kind of device the near-best plans are often one shape in small variations (context
// parallelism on or off, a ZeRO stage); on mixed devices another depth can place far better (a
// deeper pipeline gives the partition DP finer cuts), so every shape the search ranked high is tried.
constexpr int kStructures = 16, kPlaced = 8;

std::vector<Plan> diverse(std::vector<Plan> top) {
  std::vector<Plan> out;
  std::set<std::pair<int, int>> shapes;
  for (size_t i = 0; i < top.size(); ++i) {
    const std::pair<int, int> shape{top[i].train.pp, top[i].train.vp};
    if (static_cast<int>(i) < kPlaced || !shapes.count(shape)) {
      shapes.insert(shape);
      out.push_back(std::move(top[i]));
    }
  }
  return out;
}

// Plan p on its devices (its cluster's, in rank order, when it has none) running at `slowdown`
// per rank: what rebalance and replan cost the running plan on.
Plan at_speeds(const Plan& p, const std::vector<double>& slowdown) {
  Plan q = p;
  if (!q.devices) {
    PlanDevices pd;
    pd.cluster = mixed_of(p.cluster);
    pd.gpu_of_rank.resize(p.world_size());
    std::iota(pd.gpu_of_rank.begin(), pd.gpu_of_rank.end(), 0);
    q.devices = pd;
  }
  q.devices->cluster.slowdown = slowdown;
  return q;
}

}  // namespace

Plan place(Plan p, const MixedCluster& devices, const std::vector<int>& order) {
  MixedCluster placed;
  placed.name = devices.name;
  placed.between = devices.between;
  PlanDevices pd;
  for (int g : order) {
    placed.groups.push_back(devices.groups[g]);
    const int first = devices.first_gpu(g), n = devices.groups[g].total_gpus();
    for (int r = 0; r < n; ++r) {
      pd.gpu_of_rank.push_back(first + r);
      if (!devices.slowdown.empty()) placed.slowdown.push_back(devices.slowdown[first + r]);
    }
  }
  pd.cluster = placed;
  p.cluster = placed.as_uniform();
  p.devices = std::move(pd);
  return p;
}

Plan balance_shares(Plan p, const CostModel& cm, bool suspend) {
  const MixedCluster d = devices_of(p);
  fit_shares(p, d, cm, suspend);
  return p;
}

HeteroEstimate hetero_estimate(const Plan& p, const CostModel& cm) {
  const MixedCluster d = devices_of(p);
  const Units u = units_of(p, d);
  HeteroEstimate he;
  Estimate& e = he.total;
  const int nst = static_cast<int>(p.stages.size());
  e.stages.assign(nst, StageEstimate{});
  std::vector<std::vector<double>> unit_time(u.pp, std::vector<double>(u.replicas, 0));
  std::vector<std::vector<Bytes>> unit_mem(u.pp, std::vector<Bytes>(u.replicas, Bytes(0)));
  std::vector<std::vector<Bytes>> unit_budget(u.pp, std::vector<Bytes>(u.replicas, Bytes(0)));
  e.fits = true;
  bool have_room = false;
  // The device with the least room: its peak against its own budget.
  auto note_room = [&](Bytes mem, Bytes budget) {
    if (!have_room || (budget - mem).value() < (e.memory_budget - e.peak_memory).value()) {
      e.peak_memory = mem;
      e.memory_budget = budget;
      have_room = true;
    }
  };
  ReplicaCosts rcs{p, u, cm, {}};
  if (!p.train.stage_dp_shares.empty()) {
    const StageSplitCost sc = stage_split_cost(p, u, rcs);
    he.replica_time.push_back(sc.step.step_time);
    e.fits = sc.fits;
    e.step_time = sc.step.step_time;
    e.breakdown = sc.step.time;
    for (int s = 0; s < nst; ++s) {
      StageEstimate& se = e.stages[s];
      se.time = s < static_cast<int>(sc.step.stage_time.size()) ? sc.step.stage_time[s] : Seconds(0);
      se.memory = sc.sums[s].memory;
      const int g = stage_group(p, s);
      for (int j = 0; j < u.replicas; ++j) se.fits = se.fits && sc.mem[g][j] <= sc.budget[g][j];
    }
    for (int g = 0; g < u.pp; ++g)
      for (int j = 0; j < u.replicas; ++j) {
        unit_time[g][j] = sc.time[g][j];
        unit_mem[g][j] = sc.mem[g][j];
        unit_budget[g][j] = sc.budget[g][j];
        note_room(sc.mem[g][j], sc.budget[g][j]);
      }
  } else {
    int slowest = 0;
    for (int j = 0; j < u.replicas; ++j) {
      const ReplicaCost& rc = rcs.at(j, share_of(p, u, j), count_of(p, j));
      he.replica_time.push_back(rc.step.step_time);
      if (rc.step.step_time > he.replica_time[slowest]) slowest = j;
      e.fits = e.fits && rc.fits;
      for (int s = 0; s < nst; ++s) {
        StageEstimate& se = e.stages[s];
        const Seconds t = s < static_cast<int>(rc.step.stage_time.size()) ? rc.step.stage_time[s] : Seconds(0);
        se.time = std::max(se.time, t);
        if (rc.sums[s].memory.total() > se.memory.total()) se.memory = rc.sums[s].memory;
        const int g = stage_group(p, s);
        se.fits = se.fits && rc.group_mem[g] <= rc.budget[g];
        unit_time[g][j] += t.value();
      }
      for (int g = 0; g < u.pp; ++g) {
        unit_mem[g][j] = rc.group_mem[g];
        unit_budget[g][j] = rc.budget[g];
        note_room(rc.group_mem[g], rc.budget[g]);
      }
    }
    const ReplicaCost& rc = rcs.at(slowest, share_of(p, u, slowest), count_of(p, slowest));
    e.step_time = rc.step.step_time;
    e.breakdown = rc.step.time;
  }
  set_throughput(e, p, cm, nominal_peak_sum(d, p.train.dtype));
  // Per node group.
  const int S = p.devices_per_stage();
  for (size_t g = 0; g < d.groups.size(); ++g) {
    DeviceGroupUse use;
    use.name = d.groups[g].name;
    use.gpu = d.groups[g].gpu.name;
    use.first_rank = d.first_gpu(static_cast<int>(g));
    use.ranks = d.groups[g].total_gpus();
    for (int r = use.first_rank; r < use.first_rank + use.ranks; ++r) use.slowest = std::max(use.slowest, d.slowdown_of(r));
    std::vector<int> stage_groups;
    for (int sg = 0; sg < u.pp; ++sg) {
      const int a = sg * S, b = (sg + 1) * S;
      if (b <= use.first_rank || a >= use.first_rank + use.ranks) continue;
      stage_groups.push_back(sg);
      for (int s = 0; s < nst; ++s)
        if (stage_group(p, s) == sg) use.layers += p.stages[s].num_layers();
      for (int j = 0; j < u.replicas; ++j) {
        const int ua = a + j * u.size;
        if (ua + u.size <= use.first_rank || ua >= use.first_rank + use.ranks) continue;
        use.samples += samples_of(p, u, j, sg);
        use.time_s = std::max(use.time_s, unit_time[sg][j]);
        use.memory_gib = std::max(use.memory_gib, to_gib(unit_mem[sg][j]));
        use.budget_gib = use.budget_gib == 0 ? to_gib(unit_budget[sg][j]) : std::min(use.budget_gib, to_gib(unit_budget[sg][j]));
      }
    }
    if (!stage_groups.empty()) use.samples /= static_cast<int>(stage_groups.size());
    he.groups.push_back(use);
  }
  return he;
}

void annotate(Plan& p, const HeteroEstimate& e, const CostModel& cm) { annotate(p, e.total, cm); }

std::vector<double> rank_work(const Plan& p) {
  const MixedCluster d = devices_of(p);
  const Units u = units_of(p, d);
  const int S = p.devices_per_stage();
  std::vector<double> out(p.world_size(), 0);
  for (int j = 0; j < u.replicas; ++j)
    for (size_t s = 0; s < p.stages.size(); ++s) {
      const int g = stage_group(p, static_cast<int>(s));
      const double samples = samples_of(p, u, j, g);
      for (int r = g * S + j * u.size; r < g * S + (j + 1) * u.size; ++r) out[r] += samples * p.stages[s].num_layers();
    }
  return out;
}

Result<Rebalanced> rebalance(const Plan& p, const std::vector<double>& slowdown, const CostModel& cm) {
  if (static_cast<int>(slowdown.size()) != p.world_size())
    return Error{ErrorKind::kBadInput, "rebalance: " + std::to_string(slowdown.size()) + " slowdowns for " +
                                           std::to_string(p.world_size()) + " ranks"};
  for (double f : slowdown)
    if (!(f > 0)) return Error{ErrorKind::kBadInput, "rebalance: slowdowns must be positive"};
  const Plan base = at_speeds(p, slowdown);
  const Units u = units_of(base, base.devices->cluster);
  const int P = base.train.pipeline_micro_batch();
  const int m = base.train.micro_batches;
  // The compute-bound step of plan q with shares x, in units of one layer of one full-speed sample:
  // stage s takes layers(s) x the slowest of its replicas' share x slowdown per micro-batch (a
  // unit's ranks wait for each other, the replicas for the slowest), and the pipeline
  // sum + (m - 1) x max of its stages (one stage: m x its time). Linear in the samples, as
  // measured compute is once the per-step fixed costs are small; the cost model's own share
  // curves are for planning on real devices (fit_shares), where its fixed costs are the devices'
  // own.
  auto step_units = [&](const Plan& q, const std::vector<int>& x) {
    double sum = 0, worst = 0;
    for (size_t s = 0; s < q.stages.size(); ++s) {
      double t = 0;
      for (int j = 0; j < u.replicas; ++j) t = std::max(t, x[j] * u.slow[stage_group(q, static_cast<int>(s))][j]);
      t *= q.stages[s].num_layers();
      sum += t;
      worst = std::max(worst, t);
    }
    return sum + (m - 1) * worst;
  };
  // Shares x balanced for the stages of q: min-max over samples x the replica's slowest stage
  // (layers x slowdown); the running shares `now` unless that is better.
  auto balanced = [&](const Plan& q, const std::vector<int>& now) {
    std::vector<int> x = now;
    if (u.replicas > 1 && P >= u.replicas && single_layout(base)) {
      std::vector<double> per(u.replicas, 0.0);
      for (size_t s = 0; s < q.stages.size(); ++s)
        for (int j = 0; j < u.replicas; ++j)
          per[j] = std::max(per[j], u.slow[stage_group(q, static_cast<int>(s))][j] * std::max(1, q.stages[s].num_layers()));
      x = water_fill(
          u.replicas, P, [&](int j, int b) { return b * per[j]; }, [&](int) { return P; });
      if (step_units(q, x) >= step_units(q, now)) x = now;
    }
    return x;
  };
  Rebalanced out;
  Plan q = base;
  double best = 0;
  if (!base.train.stage_dp_shares.empty()) {
    // Shares per device group (train.stage_dp_shares): each group's re-balanced on its own units'
    // slowdowns (its stages' layers are the same for every replica), the pipeline then
    // sum + (m - 1) x max over stages of layers x the group's slowest share x slowdown.
    auto group_units = [&](const std::vector<std::vector<int>>& x) {
      double sum = 0, worst = 0;
      for (size_t s = 0; s < base.stages.size(); ++s) {
        const int g = stage_group(base, static_cast<int>(s));
        double t = 0;
        for (int j = 0; j < u.replicas; ++j) t = std::max(t, x[g][j] * u.slow[g][j]);
        t *= base.stages[s].num_layers();
        sum += t;
        worst = std::max(worst, t);
      }
      return sum + (m - 1) * worst;
    };
    const auto& now = base.train.stage_dp_shares;
    std::vector<std::vector<int>> x = now;
    for (int g = 0; g < u.pp; ++g) {
      std::vector<int> y = water_fill(
          u.replicas, P, [&](int j, int b) { return b * u.slow[g][j]; }, [&](int) { return P; });
      if (!y.empty()) x[g] = std::move(y);
    }
    if (group_units(x) >= group_units(now)) x = now;
    out.current_s = group_units(now);
    best = group_units(x);
    bool even = P % u.replicas == 0;
    for (const auto& row : x) even = even && std::all_of(row.begin(), row.end(), [&](int v) { return v == P / u.replicas; });
    if (even) q.train.stage_dp_shares.clear();
    else q.train.stage_dp_shares = std::move(x);
  } else if (!base.train.dp_micro_batches.empty()) {
    // Micro-batch counts per replica (train.dp_micro_batches): the counts re-balanced, each
    // replica's share (the size of its micro-batches) and the total count kept, so a replica's
    // per-micro-batch costs scale with its count and the linear model holds. Replica j's
    // compute-bound step: sum + (count - 1) x max over its stages of layers x share x slowdown.
    auto replica_units = [&](int j, int count) {
      double sum = 0, worst = 0;
      for (size_t s = 0; s < base.stages.size(); ++s) {
        const double t = base.stages[s].num_layers() * std::max(1, base.train.dp_shares[j]) *
                         u.slow[stage_group(base, static_cast<int>(s))][j];
        sum += t;
        worst = std::max(worst, t);
      }
      return count > 0 ? sum + (count - 1) * worst : 0.0;
    };
    auto step_of = [&](const std::vector<int>& c) {
      double t = 0;
      for (int j = 0; j < u.replicas; ++j) t = std::max(t, replica_units(j, c[j]));
      return t;
    };
    const std::vector<int>& now = base.train.dp_micro_batches;
    const int total = std::accumulate(now.begin(), now.end(), 0);
    std::vector<int> c = water_fill(u.replicas, total, replica_units, [&](int) { return total; });
    if (c.empty() || step_of(c) >= step_of(now)) c = now;
    out.current_s = step_of(now);
    best = step_of(c);
    q.train.micro_batches = *std::max_element(c.begin(), c.end());
    const auto& x = q.train.dp_shares;
    if (std::all_of(c.begin(), c.end(), [&](int v) { return v == c[0]; })) {
      // Every replica runs every micro-batch: no counts; and equal shares are even ones.
      q.train.dp_micro_batches.clear();
      if (std::all_of(x.begin(), x.end(), [&](int v) { return v == x[0]; })) q.train.dp_shares.clear();
    } else {
      q.train.dp_micro_batches = std::move(c);
    }
  } else {
    std::vector<int> now(u.replicas);
    for (int j = 0; j < u.replicas; ++j) now[j] = u.replicas > 1 ? share_of(base, u, j) : P;
    out.current_s = step_units(base, now);
    // Candidates: new shares on the running stages, and (a pipeline) the stage cuts re-made for the
    // slowdowns (recut: the search's partition DP over each stage's slowest unit, within memory) with
    // shares balanced for them. A new cut moves layers between ranks, so it is taken only when it
    // is predicted at least 2 % faster than new shares alone.
    std::vector<int> x = balanced(q, now);
    best = step_units(q, x);
    if (base.train.pp > 1 && base.train.vp == 1) {
      Plan c = base;
      recut(c, c.devices->cluster, cm);
      bool moved = false;
      for (size_t k = 0; k < c.stages.size(); ++k) moved = moved || c.stages[k].first_layer != base.stages[k].first_layer;
      if (moved) {
        const std::vector<int> cx = balanced(c, now);
        const double t = step_units(c, cx);
        if (t * 1.02 < best) {
          q = std::move(c);
          x = cx;
          best = t;
        }
      }
    }
    const bool even = std::all_of(x.begin(), x.end(), [&](int v) { return v == x[0]; });
    if (even && P % u.replicas == 0) q.train.dp_shares.clear();
    else q.train.dp_shares = x;
  }
  if (std::all_of(slowdown.begin(), slowdown.end(), [](double f) { return f == 1.0; }) && !p.devices)
    q.devices.reset();  // nothing slowed: the plan as the homogeneous runtime plan it was
  Status st = validate(q);
  if (!st.ok()) return st.error();
  out.estimate = hetero_estimate(q, cm);
  if (!out.estimate.total.fits)
    return Error{ErrorKind::kNoFit, "rebalance: the balanced shares need " +
                                        printf_str("%.1f", to_gib(out.estimate.total.peak_memory)) +
                                        " GiB on a device that holds " +
                                        printf_str("%.1f", to_gib(out.estimate.total.memory_budget))};
  out.predicted_s = best;
  annotate(q, out.estimate, cm);
  out.plan = std::move(q);
  return out;
}

Result<Rebalanced> replan(const Plan& p, const std::vector<double>& slowdown, const CostModel& cm) {
  auto r = rebalance(p, slowdown, cm);
  if (!r.ok()) return r;
  const double kept = r->predicted_s > 0 ? r->current_s / r->predicted_s : 1.0;
  if (kept >= kRebalanceGain) return r;  // shares, counts or cuts help: no new structure
  // The running plan at the measured speeds, on the cost model.
  const Plan now = at_speeds(p, slowdown);
  const MixedCluster& dev = now.devices->cluster;
  const HeteroEstimate running = hetero_estimate(now, cm);
  if (!(running.total.step_time.value() > 0)) return r;
  SearchOptions o;
  o.seq = p.train.seq;
  o.global_batch = p.train.global_batch;
  o.dtype = p.train.dtype;
  o.top_k = 1;
  if (!restrict_to_runtime(o).ok()) return r;
  std::optional<Plan> found;
  if (dev.heterogeneous()) {
    auto h = hetero_search(p.model, dev, cm, o);
    if (h.ok() && !h->top.empty()) found = h->top.front();
  } else {
    auto h = search(p.model, p.cluster, cm, o);
    if (h.ok() && !h->top.empty()) found = h->top.front();
  }
  if (!found || found->world_size() != p.world_size() || !validate(*found).ok()) return r;
  const HeteroEstimate e = hetero_estimate(*found, cm);
  if (!e.total.fits || !(e.total.step_time.value() > 0)) return r;
  const double fresh = running.total.step_time.value() / e.total.step_time.value();
  if (fresh < kSearchGain) return r;
  Rebalanced out;
  out.plan = std::move(*found);
  out.estimate = e;
  out.predicted_s = e.total.step_time.value();
  out.current_s = running.total.step_time.value();
  return out;
}

Result<HeteroResult> hetero_search(const ModelSpec& model, const MixedCluster& devices, const CostModel& cm,
                                   const SearchOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  Status st = validate(devices);
  if (!st.ok()) return st.error();
  if (!devices.heterogeneous())
    return Error{ErrorKind::kBadInput, "cluster: one kind of GPU and no straggler; the ordinary search plans it"};
  HeteroResult out;
  const ClusterSpec view = devices.as_uniform();
  SearchOptions o = opt;
  o.top_k = std::max(opt.top_k, kStructures);
  // Re-rank (estimate()) no more than a search for kPlaced plans would: the extra structures only
  // need to be good, not exactly ordered.
  if (o.rerank == 0) o.rerank = std::max(o.top_k, 2 * kPlaced);
  // Three independent searches (the cost model is read-only and thread-safe): the fastest subset's
  // and the fastest kind's on their own threads, the one-kind view's here.
  std::future<SubsetResult> subset_future =
      std::async(std::launch::async, [&] { return fastest_subset(model, devices, cm, opt); });
  const GpuSpec* fastest_gpu = &devices.groups[0].gpu;
  for (const ClusterSpec& g : devices.groups)
    if (g.gpu.peak(opt.dtype).value() > fastest_gpu->peak(opt.dtype).value()) fastest_gpu = &g.gpu;
  std::future<std::vector<Plan>> fast_future;
  if (!(fastest_gpu->name == view.gpu.name)) {
    // Structures for the fastest kind too (its peaks, the least memory): a mix leaning on its fast
    // devices may want other degrees than the slowest kind's.
    fast_future = std::async(std::launch::async, [&, fast_gpu = *fastest_gpu] {
      ClusterSpec fast_view = view;
      fast_view.gpu = fast_gpu;
      fast_view.gpu.memory_gib = view.gpu.memory_gib;
      SearchOptions fo = o;
      fo.progress = nullptr;
      auto fr = search(model, fast_view, cm, fo);
      std::vector<Plan> plans;
      if (fr.ok())
        for (Plan& c : fr->top) {
          c.cluster = view;
          plans.push_back(std::move(c));
        }
      return plans;
    });
  }
  auto res = search(model, view, cm, o);
  if (!res.ok()) {
    if (fast_future.valid()) fast_future.wait();
    subset_future.wait();
    return res.error();
  }
  out.stats = res->stats;
  out.closest = res->closest;
  out.min_memory_gib = res->min_memory_gib;

  std::vector<int> identity(devices.groups.size());
  std::iota(identity.begin(), identity.end(), 0);
  if (!res->top.empty()) {
    Plan u = place(res->top[0], devices, identity);
    const HeteroEstimate e = hetero_estimate(u, cm);
    if (e.total.fits) {
      annotate(u, e, cm);
      out.uniform_s = e.total.step_time.value();
      out.uniform = std::move(u);
    }
  }

  std::vector<Plan> candidates = diverse(res->top);
  if (res->best_uniform) candidates.push_back(*res->best_uniform);
  if (fast_future.valid())
    for (Plan& c : diverse(fast_future.get())) candidates.push_back(std::move(c));
  std::vector<std::pair<Plan, HeteroEstimate>> placed;
  for (const Plan& cand : candidates) {
    // Fewer, larger micro-batches give the shares room (a micro-batch of dp samples splits one way).
    // Only where shares could use them: one layout (shares need it) and fewer than 4 samples per
    // replica in a micro-batch.
    std::vector<int> ms{cand.train.micro_batches};
    const int dp = cand.embedding.dp;
    if (dp > 1 && cand.train.pipeline_micro_batch() < 4 * dp && single_layout(cand))
      for (int m = cand.train.micro_batches / 2; m >= 1 && ms.size() < 4; m /= 2)
        if (cand.train.global_batch % m == 0) ms.push_back(m);
    for (const auto& order : group_orders(static_cast<int>(devices.groups.size()))) {
      for (int m : ms) {
        // Fewer micro-batches of the same valid plan: only the batch split (and an interleaved
        // schedule's multiple of pp) can break; the placed plan is validated whole below.
        if (cand.train.schedule == Schedule::kInterleaved && m % cand.train.pp != 0) continue;
        Plan q = cand;
        q.train.micro_batches = m;
        q.train.dp_shares.clear();
        q.train.stage_dp_shares.clear();
        q = place(std::move(q), devices, order);
        fit_shares(q, q.devices->cluster, cm);
        if (o.uneven_stages) {
          recut(q, q.devices->cluster, cm);
          fit_shares(q, q.devices->cluster, cm);
        }
        HeteroEstimate e = hetero_estimate(q, cm);
        ++out.placements;
        if (!e.total.fits) continue;
        annotate(q, e, cm);
        placed.emplace_back(std::move(q), std::move(e));
      }
    }
  }
  std::stable_sort(placed.begin(), placed.end(), [](const auto& a, const auto& b) {
    return a.second.total.step_time < b.second.total.step_time;
  });
  for (auto& [q, e] : placed) {
    if (static_cast<int>(out.top.size()) >= opt.top_k) break;
    bool dup = false;
    for (const Plan& t : out.top) dup = dup || t == q;
    // Shares and cuts are built valid; the whole plan is checked before it is offered.
    if (dup || !validate(q).ok()) continue;
    out.top.push_back(q);
    out.top_estimates.push_back(e);
  }

  const SubsetResult subset = subset_future.get();
  out.fastest_subset = subset.plan;
  out.fastest_subset_s = subset.step_s;
  out.fastest_subset_label = subset.label;
  out.stats.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace weft
