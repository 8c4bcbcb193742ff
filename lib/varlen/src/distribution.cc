#include "weft/varlen/distribution.h"

#include <algorithm>
#include <chrono>
#include <set>

namespace weft::varlen {

Result<std::vector<DistributionCandidate>> plan_distribution(const ModelSpec& model, const ClusterSpec& cluster,
                                                             const Batches& batches, const DistributionOptions& o) {
  if (batches.steps.empty()) return Error{ErrorKind::kBadInput, "no batches to plan"};
  const int max_tp = o.max_tp > 0 ? o.max_tp : cluster.gpus_per_node;
  std::vector<DistributionCandidate> out;
  for (int tp = 1; tp <= max_tp && cluster.total_gpus() % tp == 0; tp *= 2) {
    if (model.groups.empty() || model.groups.front().shape.heads % tp != 0) break;
    for (int zero : o.zero) {
      for (Recompute rc : o.recompute) {
        DistributionCandidate c;
        c.tp = tp;
        c.recompute = rc;
        c.zero = zero;
        AnalyticSeqOptions so;
        so.model = o.model;
        so.recompute = rc;
        so.dtype = o.dtype;
        so.tp = tp;
        so.zero = zero;
        so.max_seq = std::max<std::int64_t>(batches.longest, 4096);
        auto cost = analytic_seq_cost(model, cluster, so);
        if (!cost.ok()) {
          c.why = cost.error().message;
          out.push_back(std::move(c));
          continue;
        }
        double total = 0, tokens = 0, mbs = 0;
        std::set<int> sizes;
        bool ok = true;
        for (const std::vector<std::int64_t>& b : batches.steps) {
          const auto t0 = std::chrono::steady_clock::now();
          auto p = plan_step(b, **cost, o.planner);
          const auto t1 = std::chrono::steady_clock::now();
          if (!p.ok()) {
            c.why = p.error().message;
            ok = false;
            break;
          }
          c.plan_ms_max = std::max(c.plan_ms_max, std::chrono::duration<double, std::milli>(t1 - t0).count());
          total += p->time;
          mbs += static_cast<double>(p->micro_batches.size());
          for (std::int64_t s : b) tokens += static_cast<double>(s);
          for (const MicroBatch& mb : p->micro_batches)
            for (const Group& g : mb.groups) sizes.insert(g.size * tp);
        }
        if (ok) {
          const double n = static_cast<double>(batches.steps.size());
          c.fits = true;
          c.mean_step_s = total / n;
          c.tokens_per_s = tokens / total;
          c.mean_micro_batches = mbs / n;
          c.group_gpus.assign(sizes.begin(), sizes.end());
        }
        out.push_back(std::move(c));
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const DistributionCandidate& a, const DistributionCandidate& b) {
    if (a.fits != b.fits) return a.fits;
    return a.fits && a.mean_step_s < b.mean_step_s;
  });
  return out;
}

Result<Plan> distribution_plan(const ModelSpec& model, const ClusterSpec& cluster, const DistributionCandidate& c,
                               int documents, std::int64_t max_seq, DType dtype, const PlannerOptions& planner) {
  if (!c.fits) return Error{ErrorKind::kNoFit, "no plan to write: " + c.why};
  Plan p;
  p.model = model;
  p.cluster = cluster;
  p.train.seq = static_cast<int>(max_seq);
  p.train.global_batch = documents;
  p.train.micro_batches = 1;
  p.train.pp = 1;
  p.train.dtype = dtype;
  p.train.varlen = true;
  p.train.min_group = planner.min_group;
  p.train.max_group = planner.max_group;
  LayerStrategy s;
  s.tp = c.tp;
  s.sp = c.tp > 1;
  s.dp = cluster.total_gpus() / c.tp;
  s.zero = c.zero;
  s.recompute = c.recompute;
  LayerStrategy e = s;
  e.recompute = Recompute::kNone;
  p.embedding = e;
  Stage st;
  st.layers.assign(model.num_layers(), s);
  p.stages.push_back(st);
  p.predicted.step_time_s = c.mean_step_s;
  p.predicted.tokens_per_s = c.tokens_per_s;
  p.predicted.cost_model = "weft";
  p.predicted.source = "analytic, variable-length batch planner (mean over sampled batches)";
  if (Status v = validate(p); !v.ok()) return v.error();
  return p;
}

}  // namespace weft::varlen
