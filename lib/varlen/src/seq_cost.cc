#include "weft/varlen/seq_cost.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "weft/cost/estimate.h"
#include "weft/search/uniform.h"

namespace weft::varlen {
namespace {

// solver.py's optimizer_param_dict (PKU-DAIR/Hetu-Galvatron, branch flexsp, commit b4666892):
// measured by FlexSP's authors on A100-40GB-class GPUs, 8 per node.
const FlexspConstants kFlexsp[] = {
    {"gpt-7b", 4.4804, 5.128e-6, 0.1839576, 629.36, 4096, 32},
    {"gpt-13b", 4.2204, 9.2852e-6, 0.3060189, 1132.56, 5120, 40},
    {"gpt-30b", 3.4174, 1.54262e-5, 0.8035742, 2789.36, 6656, 60},
};

class FlexspSeqCost final : public SeqCost {
 public:
  FlexspSeqCost(const FlexspConstants& c, int gpus, double memory_limit_gib) : c_(c), gpus_(gpus) {
    // Model states: 16 bytes per parameter (bf16 weights and gradients, fp32 master and Adam moments)
    // sharded over every GPU; parameters 12 L H^2 for the layers and 2 x 50257 x H for untied
    // embeddings of GPT-2's vocabulary (FlexSP's gpt_hf models).
    const double params = 12.0 * c.layers * double(c.hidden) * c.hidden + 2.0 * 50257 * c.hidden;
    states_bytes_ = 16.0 * params / std::max(1, gpus);
    budget_bytes_ = memory_limit_gib * 1024.0 * 1024 * 1024 - states_bytes_;
    per_token_bytes_ = c.act_per_token_mb * 1024.0 * 1024;
  }
  std::string name() const override { return "flexsp (" + c_.model + ")"; }
  double seq_time(double s, int d) const override {
    const double compute_ms = (c_.alpha1 * s * s + c_.alpha2 * s) / d;
    // 4 all-to-alls per layer, forward and backward, of L H s bf16 values: MB / d / (GB/s) = ms.
    const double a2a_ms = d > 1 ? (4.0 * 2 * c_.layers * double(c_.hidden) * s * 2 / (1 << 20)) / d / flexsp_a2a_gbps(d) : 0;
    return (compute_ms + a2a_ms) * 1e-3;
  }
  double group_overhead(int) const override { return c_.beta_ms * 1e-3; }
  double capacity_tokens() const override { return std::max(0.0, budget_bytes_ / per_token_bytes_); }
  double bytes_per_token() const override { return per_token_bytes_; }
  double activation_budget_bytes() const override { return budget_bytes_; }
  int gpus() const override { return gpus_; }

 private:
  FlexspConstants c_;
  int gpus_;
  double states_bytes_ = 0, budget_bytes_ = 0, per_token_bytes_ = 0;
};

}  // namespace

std::vector<std::string> flexsp_models() {
  std::vector<std::string> out;
  for (const FlexspConstants& c : kFlexsp) out.push_back(c.model);
  return out;
}

Result<FlexspConstants> flexsp_constants(const std::string& model) {
  for (const FlexspConstants& c : kFlexsp)
    if (c.model == model) return c;
  std::string names;
  for (const std::string& n : flexsp_models()) names += (names.empty() ? "" : ", ") + n;
  return Error{ErrorKind::kBadInput, "--model " + model + ": --cost-model flexsp has constants for " + names +
                                         " only (FlexSP's published models)"};
}

double flexsp_a2a_gbps(int d) {
  if (d <= 2) return 119.54;
  if (d <= 4) return 104.07;
  if (d <= 8) return 96.5;
  if (d <= 16) return 10.33;
  if (d <= 32) return 5.94;
  return 4.87;
}

std::unique_ptr<SeqCost> flexsp_seq_cost(const FlexspConstants& c, int gpus, double memory_limit_gib) {
  return std::make_unique<FlexspSeqCost>(c, gpus, memory_limit_gib);
}

namespace {

class AnalyticSeqCost final : public SeqCost {
 public:
  struct Curve {
    std::vector<double> s, per_token;  // grid lengths and (time - overhead) / length there
    double overhead = 0;
  };
  std::string name_;
  int gpus_ = 0;
  std::vector<int> sizes_;
  std::vector<Curve> curves_;  // by size index
  double capacity_ = 0, per_token_bytes_ = 0, budget_bytes_ = 0, step_overhead_ = 0;

  std::string name() const override { return name_; }
  const Curve& curve(int d) const {
    for (size_t k = 0; k < sizes_.size(); ++k)
      if (sizes_[k] >= d) return curves_[k];
    return curves_.back();
  }
  double seq_time(double s, int d) const override {
    const Curve& c = curve(d);
    const std::vector<double>& x = c.s;
    const std::vector<double>& y = c.per_token;
    double r;
    if (s <= x.front()) {
      r = y.front();
    } else if (s >= x.back()) {
      // Beyond the grid the time per token grows linearly in the length (attention).
      const size_t n = x.size();
      const double slope = (y[n - 1] - y[n - 2]) / (x[n - 1] - x[n - 2]);
      r = y.back() + std::max(0.0, slope) * (s - x.back());
    } else {
      size_t k = 1;
      while (x[k] < s) ++k;
      const double w = (std::log2(s) - std::log2(x[k - 1])) / (std::log2(x[k]) - std::log2(x[k - 1]));
      r = y[k - 1] + w * (y[k] - y[k - 1]);
    }
    return std::max(0.0, r) * s;
  }
  double group_overhead(int d) const override { return curve(d).overhead; }
  double step_overhead() const override { return step_overhead_; }
  double capacity_tokens() const override { return capacity_; }
  double bytes_per_token() const override { return per_token_bytes_; }
  double activation_budget_bytes() const override { return budget_bytes_; }
  int gpus() const override { return gpus_; }
};

}  // namespace

Result<std::unique_ptr<SeqCost>> analytic_seq_cost(const ModelSpec& model, const ClusterSpec& cluster,
                                                   const AnalyticSeqOptions& o) {
  auto out = std::make_unique<AnalyticSeqCost>();
  const int tp = std::max(1, o.tp);
  if (cluster.total_gpus() % tp != 0)
    return Error{ErrorKind::kBadInput, "tp " + std::to_string(tp) + " does not divide " +
                                           std::to_string(cluster.total_gpus()) + " GPUs"};
  const int n = cluster.total_gpus() / tp;  // units of tp GPUs
  out->gpus_ = n;
  out->name_ = "weft (" + model.name + (tp > 1 ? ", tp " + std::to_string(tp) : "") +
               (o.zero != 3 ? ", ZeRO-" + std::to_string(o.zero) : "") + ")";
  if (o.zero < 1 || o.zero > 3)
    return Error{ErrorKind::kBadInput, "ZeRO stage " + std::to_string(o.zero) + ": variable-length plans shard over "
                                       "every GPU with ZeRO 1, 2 or 3"};
  if (model.groups.empty()) return Error{ErrorKind::kBadInput, "--model " + model.name + ": no layers"};
  const LayerShape& shape = model.groups.front().shape;
  const AnalyticCostModel cm(o.model);
  const int top = static_cast<int>(std::min<std::int64_t>(std::max<std::int64_t>(o.max_seq, 4096), 1 << 22));
  ModelSpec m = model;
  if (m.position == PositionKind::kLearned) m.max_seq = std::max(m.max_seq, 2 * top);
  auto cost_of = [&](int d, int s) -> Result<Estimate> {
    LayerStrategy st;
    st.tp = tp;
    st.sp = tp > 1;
    st.ulysses = 1;
    auto heads_ok = [&](int u) {
      const int tu = tp * u;
      return shape.heads % tu == 0 && (shape.kv_heads % tu == 0 || tu % shape.kv_heads == 0);
    };
    while (st.ulysses * 2 <= d && heads_ok(st.ulysses * 2)) st.ulysses *= 2;
    st.cp = d / st.ulysses;
    st.dp = n / d;
    st.zero = o.zero;
    st.recompute = o.recompute;
    TrainSettings t;
    t.seq = s;
    t.global_batch = n / d;
    t.micro_batches = 1;
    t.dtype = o.dtype;
    auto plan = make_uniform_plan(m, cluster, t, st, embedding_for(st));
    if (!plan.ok()) return plan.error();
    return estimate(*plan, cm);
  };
  // Memory: the peak of one GPU holding a whole sequence (d = 1) at two lengths of the grid, as a
  // line in the length.
  constexpr int s1 = 1024, s2 = 4096;
  Estimate e1, e2;
  for (int d = 1; d <= n; d *= 2) {
    if (n % d != 0) continue;
    AnalyticSeqCost::Curve c;
    for (int s = std::max(128, d); s < 2 * top; s *= 2) {
      auto e = cost_of(d, s);
      if (!e.ok()) return e.error().with_context("--cost-model weft, a group of " + std::to_string(d) + " GPUs");
      const TimeBreakdown& b = e->breakdown;
      const double per_mb = e->step_time.value() - b.optimizer.value();
      const double layers = b.compute.value() + b.recompute.value() + b.ulysses_comm.value() + b.cp_comm.value() +
                            b.embedding.value();
      // ZeRO 1/2 reduce gradients once per step: their exposed reduction is the step's overhead.
      const double once = o.zero < 3 ? b.dp_exposed.value() : 0.0;
      if (c.s.empty()) c.overhead = std::max(0.0, per_mb - layers - once);
      if (c.s.empty() && d == 1) out->step_overhead_ = once;
      c.s.push_back(s);
      c.per_token.push_back(layers / s);
      if (d == 1 && s == s1) e1 = *e;
      if (d == 1 && s == s2) e2 = *e;
    }
    out->sizes_.push_back(d);
    out->curves_.push_back(std::move(c));
  }
  const double slope = (e2.peak_memory.value() - e1.peak_memory.value()) / (s2 - s1);
  const double fixed = e1.peak_memory.value() - slope * s1;
  out->per_token_bytes_ = slope;
  out->budget_bytes_ = e1.memory_budget.value() - fixed;
  out->capacity_ = slope > 0 ? std::max(0.0, out->budget_bytes_ / slope) : 0;
  return std::unique_ptr<SeqCost>(std::move(out));
}

namespace {

class CappedSeqCost final : public SeqCost {
 public:
  CappedSeqCost(std::shared_ptr<const SeqCost> c, double tokens) : c_(std::move(c)), tokens_(tokens) {}
  std::string name() const override { return c_->name(); }
  double seq_time(double tokens, int d) const override { return c_->seq_time(tokens, d); }
  double group_overhead(int d) const override { return c_->group_overhead(d); }
  double step_overhead() const override { return c_->step_overhead(); }
  double capacity_tokens() const override { return std::min(tokens_, c_->capacity_tokens()); }
  double bytes_per_token() const override { return c_->bytes_per_token(); }
  double activation_budget_bytes() const override { return capacity_tokens() * c_->bytes_per_token(); }
  int gpus() const override { return c_->gpus(); }

 private:
  std::shared_ptr<const SeqCost> c_;
  double tokens_;
};

}  // namespace

std::unique_ptr<SeqCost> capped_seq_cost(std::shared_ptr<const SeqCost> cost, double tokens) {
  return std::make_unique<CappedSeqCost>(std::move(cost), tokens);
}

}  // namespace weft::varlen
