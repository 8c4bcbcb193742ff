// CalibratedCostModel: measured compute and collectives put into weft's analytic cost model. Its
// communication is the analytic model's traffic description (weft/cost/traffic.h) with the options
// of weft's runtime (lib/runtime: model.cc, ops.cc, optim.cc, pipeline_executor.cc), the program the profiles
// measured, priced by the hardware profile's tables; docs/profiles.md lists it term by term.
#include "weft/calibration/calibrated.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "weft/cost/assemble.h"
#include "weft/cost/estimate.h"
#include "weft/cost/memory.h"
#include "weft/cost/pricing.h"
#include "weft/cost/traffic.h"
#include "weft/plan/geometry.h"
#include "weft/spec/counts.h"

namespace weft {

namespace {

double safe(int x) { return static_cast<double>(std::max(1, x)); }

AnalyticOptions adjusted(AnalyticOptions o, const std::optional<HardwareProfile>& hw,
                         const std::optional<ModelProfile>& mp) {
  if (hw) {
    if (hw->overlap.group_size > 0) o.overlap_slowdown = hw->overlap.compute_slowdown;
    if (hw->machine.runtime_overhead_gib > 0) o.runtime_overhead_gib = hw->machine.runtime_overhead_gib;
  }
  if (mp) o.overlap_grad_sync = mp->runtime.grad_sync_overlaps_backward;
  return o;
}

// Model-state memory of the analytic figures (which assumed `plan` bytes per parameter) rescaled to
// the runtime's measured bytes per parameter, when the profile has them (> 0).
void rescale_states(MemoryBreakdown& m, double measured_bytes_per_param, DType plan) {
  if (measured_bytes_per_param <= 0) return;
  const StateBytes ab = state_bytes_per_param(plan);
  const double k = measured_bytes_per_param / (ab.weights + ab.grads + ab.optimizer);
  m.weights *= k;
  m.grads *= k;
  m.optimizer *= k;
}

std::string layer_label(const LayerContext& ctx, const LayerStrategy& s) {
  return "layer " + std::to_string(ctx.layer) + " (" + label(s) + ")";
}

}  // namespace

CalibratedCostModel::CalibratedCostModel(std::optional<HardwareProfile> hw, std::optional<ModelProfile> mp,
                                         const ModelSpec& model, const ClusterSpec& cluster, AnalyticOptions base)
    : hw_(std::move(hw)), mp_(std::move(mp)), analytic_(adjusted(base, hw_, mp_)), cluster_(cluster) {
  bool all_layers = mp_.has_value(), any_layer = false;
  if (mp_) {
    for (const auto& g : model.groups) {
      const bool found = mp_->find(g.shape, model) != nullptr;
      all_layers = all_layers && found;
      any_layer = any_layer || found;
    }
  }
  const bool edges = mp_ && mp_->covers_edges(model) && !mp_->embedding.empty() && !mp_->head.empty();
  bool comm = false;
  if (hw_)
    for (const auto& e : hw_->collectives) comm = comm || e.kind == Collective::kAllReduce;
  if (all_layers && edges && comm) source_ = "measured";
  else if (any_layer || edges || hw_) source_ = "mixed";
  else source_ = "analytic";
}

DType CalibratedCostModel::wire_dtype(const TrainSettings& tr) const {
  // The runtime that measured the model profile computes in its own dtype (weft's CPU build: fp32
  // whatever the plan says), so its activations, gradients and messages have that element size.
  if (mp_) {
    auto d = dtype_from_string(mp_->runtime.dtype);
    if (d.ok()) return d.value();
  }
  return tr.dtype;
}

namespace {

// ZeRO-3's own work on one rank (views of the gathered parameters and their gradients), forward and
// backward seconds: the zero-3 samples minus the zero-0 ones at the same point; nullopt without
// both.
std::optional<std::pair<double, double>> zero3_own_work(const std::vector<PhaseSample>& v, int tp, double samples,
                                                        double seq) {
  const auto z3 = interpolate(v, tp, Recompute::kNone, samples, seq, 3);
  const auto z0 = interpolate(v, tp, Recompute::kNone, samples, seq, 0);
  if (!z3 || !z0) return std::nullopt;
  return std::pair{std::max(0.0, z3->forward_s - z0->forward_s), std::max(0.0, z3->backward_s - z0->backward_s)};
}

}  // namespace

double CalibratedCostModel::sharing(const ClusterSpec& c) const {
  if (!hw_) return 1.0;
  return hw_->sharing_slowdown(std::min(c.gpus_per_node, c.total_gpus()));
}

ProfilePricer CalibratedCostModel::pricer(const ClusterSpec& c) const {
  return ProfilePricer(hw_ ? &*hw_ : nullptr, c, analytic_.options().comm, notes_);
}

void CalibratedCostModel::note(const std::string& line) const {
  if (notes_) notes_->push_back(line);
}

Seconds CalibratedCostModel::collective(Collective k, Bytes bytes, const CommGroup& g, const ClusterSpec& c,
                                        bool* measured) const {
  return pricer(c).price(k, bytes, g, measured);
}

CalibratedCostModel::Compute CalibratedCostModel::measured_compute(const LayerContext& ctx, const LayerStrategy& s) const {
  Compute out;
  const LayerShape& L = ctx.shape();
  if (!mp_) {
    out.why = "no model profile";
    return out;
  }
  if (s.cp > 1) {
    out.why = "context parallelism is not profiled";
    return out;
  }
  if (L.moe.enabled()) {
    out.why = "MoE layers are not profiled";
    return out;
  }
  const LayerProfile* lp = mp_->find(L, *ctx.model);
  if (!lp) {
    out.why = "the model profile has no layer of group " + ctx.model->groups[ctx.model->group_of(ctx.layer)].name +
              "'s shape";
    return out;
  }
  // A Ulysses group of u ranks does the same per-rank work as tensor parallelism over t*u: heads
  // split t*u ways in attention, the GEMMs' FLOPs split t*u ways (docs/profiles.md).
  const int tp_eff = s.tp * s.ulysses;
  const double samples = ctx.train.pipeline_micro_batch() / safe(s.dp);
  const double seq = ctx.train.seq;
  auto pc = interpolate(lp->samples, tp_eff, s.recompute, samples, seq);
  if (!pc) {
    out.why = "no tp=" + std::to_string(tp_eff) + " recompute=" + to_string(s.recompute) + " samples for group " +
              lp->group;
    return out;
  }
  const double share = sharing(*ctx.cluster);
  out.measured = true;
  out.fwd = pc->forward_s * share;
  out.bwd = pc->backward_s * share;
  if (s.recompute != Recompute::kNone) {
    if (auto none = interpolate(lp->samples, tp_eff, Recompute::kNone, samples, seq))
      out.recompute = std::max(0.0, pc->backward_s - none->backward_s) * share;
  }
  // ZeRO-3: the runtime's own work on the gathered parameters' views and their gradients,
  // measured as the difference between the zero-3 and zero-0 samples (a full recompute gathers,
  // and so pays the forward part, again).
  if (s.zero == 3) {
    if (auto own = zero3_own_work(lp->samples, tp_eff, samples, seq)) {
      const double f = own->first * share, b = own->second * share;
      out.fwd += f;
      out.bwd += b + (s.recompute == Recompute::kFull ? f : 0.0);
    } else {
      out.why = "no zero=3 samples for tp=" + std::to_string(tp_eff) + " (ZeRO-3's own compute left out)";
    }
  }
  // The profile measured the layer on a t*u shard without sequence splitting; rescale its saved
  // activations by the analytic model's ratio for the strategy actually used.
  LayerStrategy measured_as;
  measured_as.tp = tp_eff;
  measured_as.recompute = s.recompute;
  ActivationOptions ao;
  ao.samples = samples;
  ao.seq = seq;
  ao.elem_bytes = dtype_bytes(wire_dtype(ctx.train));
  ao.flash_attention = false;  // weft's runtime materialises the score matrix
  const double ref = layer_activation_bytes(L, measured_as, ao).value();
  ActivationOptions busiest = ao;  // the busiest expert rank's copies (train.moe_imbalance)
  busiest.expert_rows = ctx.train.busiest_expert_rank(s.ep);
  const double act = layer_activation_bytes(L, s, busiest).value();
  out.act = pc->activation_bytes * (ref > 0 ? act / ref : 1.0);
  out.weight_grad_state = weight_grad_state_bytes(L, s, ao, weight_grad_inputs_held(ctx.train)).value();
  if (pc->extrapolated)
    out.why = (out.why.empty() ? "" : out.why + "; ") + "extrapolated beyond the profiled micro-batch / sequence range";
  return out;
}

LayerCost CalibratedCostModel::layer(const LayerContext& ctx, const LayerStrategy& s) const {
  const LayerCost a = analytic_.layer(ctx, s);
  const LayerShape& L = ctx.shape();
  if (L.moe.enabled()) {  // expert routing and parallelism: the analytic model alone
    note(layer_label(ctx, s) + ": analytic (MoE layers are not profiled)");
    return a;
  }
  const ClusterSpec& c = *ctx.cluster;
  const TrainSettings& tr = ctx.train;

  // --- compute: measured, or the analytic model's (split 1 : 2 between forward and backward)
  const Compute m = measured_compute(ctx, s);
  double comp_f = 0, comp_b = 0, recompute = 0;
  if (m.measured) {
    comp_f = m.fwd;
    comp_b = m.bwd;
    recompute = m.recompute;
    if (!m.why.empty()) note(layer_label(ctx, s) + ": compute " + m.why);
  } else {
    const double total = a.time.compute.value();
    comp_f = total / 3;
    comp_b = total - comp_f + a.time.recompute.value();
    recompute = a.time.recompute.value();
    note(layer_label(ctx, s) + ": compute analytic: " + m.why);
  }

  // --- communication: the runtime's traffic priced with the profile's tables. Context
  // parallelism, which weft's runtime does not run, keeps the analytic figures (and so do experts).
  LayerTraffic runtime;
  for (const Transfer& t : layer_traffic(ctx, s, runtime_traffic(wire_dtype(tr))).transfers)
    if (t.axis != CommAxis::kContext) runtime.transfers.push_back(t);
  const PricedTraffic pt = price_traffic(runtime, pricer(c));
  const double tp_f = pt.fwd.tp, tp_b = pt.bwd.tp, uly = pt.fwd.ulysses;
  const double cp_comm = a.time.cp_comm.value(), ep_comm = a.time.ep_comm.value();
  if (s.cp > 1) note(layer_label(ctx, s) + ": context-parallel communication analytic");
  const double grad_sync = pt.grad_sync, mb_rs = pt.reduce_b, ag_f = pt.gather_f, ag_b = pt.gather_b;
  const double local = held_params(L, s).dense;
  const int shard = s.shard_group();

  // --- assemble. A full recompute re-runs the forward's collectives inside backward.
  const double rc_comm = s.recompute == Recompute::kFull ? tp_f + uly : 0.0;
  const double comm_f = tp_f + uly + cp_comm / 2 + ep_comm / 2;
  const double comm_b = tp_b + uly + cp_comm / 2 + ep_comm / 2 + rc_comm;
  // The profiled runtime overlaps its bucketed gradient reductions (ZeRO 0-2) with backward when
  // grad_sync_overlaps_backward; ZeRO-3's gathers and reduce-scatters block (docs/runtime.md).
  const bool overlap = analytic_.options().overlap_grad_sync && s.zero < 3;
  const double slow = analytic_.options().overlap_slowdown;
  double fwd = 0, bwd = 0;
  if (overlap) {
    fwd = overlapped(comp_f + comm_f, ag_f, slow);
    bwd = overlapped(comp_b + comm_b, mb_rs + ag_b, slow);
  } else {
    fwd = comp_f + comm_f + ag_f;
    bwd = comp_b + comm_b + mb_rs + ag_b;
  }

  LayerTimes lt;
  lt.fwd = fwd;
  lt.bwd = bwd;
  lt.grad_sync = grad_sync;
  lt.recompute = recompute;
  // The weight-gradient share of the backward: the analytic model's, scaled as the backward is.
  lt.wgrad = a.bwd.value() > 0 ? a.wgrad.value() * bwd / a.bwd.value() : 0.0;
  lt.tp = tp_f + tp_b + (s.recompute == Recompute::kFull ? tp_f : 0.0);
  lt.ulysses = 2 * uly + (s.recompute == Recompute::kFull ? uly : 0.0);
  lt.cp = cp_comm;
  lt.ep = ep_comm;
  lt.zero3_gather = overlap ? std::max(0.0, fwd - comp_f - comm_f) + std::max(0.0, bwd - comp_b - comm_b)
                            : ag_f + ag_b + mb_rs;
  lt.reduce_per_micro_batch = mb_rs;
  lt.micro_batches = tr.micro_batches;
  LayerCost out = layer_cost(lt);
  TimeBreakdown& tb = out.time;

  // --- optimizer: the runtime's measured per-step cost per updated parameter
  const double opt_params = local / (s.zero >= 1 ? safe(shard) : 1.0);
  if (mp_ && mp_->runtime.optimizer_s_per_param > 0) {
    out.optimizer = Seconds(mp_->runtime.optimizer_s_per_param * opt_params * sharing(c));
  } else {
    out.optimizer = a.optimizer;
    note(layer_label(ctx, s) + ": optimizer analytic");
  }
  tb.optimizer = out.optimizer;

  // --- memory: the analytic model's states (rescaled to the runtime's measured bytes per
  // parameter), measured activations times the micro-batches in flight
  out.memory = a.memory;
  if (mp_) rescale_states(out.memory, mp_->runtime.state_bytes_per_param, tr.dtype);
  if (m.measured)
    out.memory.activations = Bytes(m.act * micro_batches_in_flight(tr, ctx.stage) +
                                   m.weight_grad_state * pending_weight_grads(tr, ctx.stage));
  return out;
}

LayerCost CalibratedCostModel::stage_extra(const StageContext& ctx, const LayerStrategy& emb) const {
  const LayerCost a = analytic_.stage_extra(ctx, emb);
  if (!ctx.first() && !ctx.last()) return a;
  const ModelSpec& model = *ctx.model;
  const ClusterSpec& c = *ctx.cluster;
  const TrainSettings& tr = ctx.train;
  const std::string what = std::string(ctx.first() ? "embedding" : "") + (ctx.first() && ctx.last() ? " and " : "") +
                           (ctx.last() ? "head" : "");
  if (!mp_ || !mp_->covers_edges(model)) {
    note(what + ": analytic (" + (mp_ ? "the model profile is of another vocabulary / width" : "no model profile") +
                    ")");
    return a;
  }
  const double u = safe(emb.ulysses), cp = safe(emb.cp), dp = safe(emb.dp);
  const double samples = tr.pipeline_micro_batch() / dp;
  const double seq_local = tr.seq / (u * cp);  // the embedding and head work token by token
  std::optional<PhaseCost> E, H;
  if (ctx.first()) E = interpolate(mp_->embedding, emb.tp, Recompute::kNone, samples, seq_local);
  if (ctx.last()) H = interpolate(mp_->head, emb.tp, Recompute::kNone, samples, seq_local);
  if ((ctx.first() && !E) || (ctx.last() && !H)) {
    note(what + ": analytic (no tp=" + std::to_string(emb.tp) + " samples)");
    return a;
  }
  if ((E && E->extrapolated) || (H && H->extrapolated))
    note(what + ": extrapolated beyond the profiled micro-batch / sequence range");
  const double share = sharing(c);

  // ZeRO-3's own compute on the gathered views: zero-3 minus zero-0 samples.
  auto zero3_extra = [&](const std::vector<PhaseSample>& v, double& f, double& b) {
    if (emb.zero != 3) return;
    const auto own = zero3_own_work(v, emb.tp, samples, seq_local);
    if (!own) {
      note(what + ": no zero=3 samples (ZeRO-3's own compute left out)");
      return;
    }
    f += own->first * share;
    b += own->second * share;
  };
  double fwd = 0, bwd = 0, saved = 0;
  if (E) {
    zero3_extra(mp_->embedding, fwd, bwd);
    fwd += E->forward_s * share;
    bwd += E->backward_s * share;
    saved += E->activation_bytes;
  }
  if (H) {
    zero3_extra(mp_->head, fwd, bwd);
    fwd += H->forward_s * share;
    bwd += H->backward_s * share;
    saved += H->activation_bytes;
  }

  // Communication: the runtime's (vocab-parallel lookup and loss, each parameter tensor's gradient
  // reduction at the strategy's ZeRO stage, the tied table's two copies summed), profile-priced.
  const TrafficOptions to = runtime_traffic(wire_dtype(tr));
  double params = 0;
  for (double n : edge_param_buckets(ctx, emb, to)) params += n;
  const PricedTraffic pt = price_traffic(edge_traffic(ctx, emb, to), pricer(c));
  const double tp_f = pt.fwd.tp, tp_b = pt.bwd.tp, mb_f = pt.gather_f, mb_b = pt.reduce_b;
  const double grad_sync = pt.grad_sync;
  const int shard = emb.shard_group();

  LayerCost out;
  const bool overlap = analytic_.options().overlap_grad_sync && emb.zero < 3;  // as for layers
  const double slow = analytic_.options().overlap_slowdown;
  out.fwd = Seconds(overlap ? overlapped(fwd + tp_f, mb_f, slow) : fwd + tp_f + mb_f);
  out.bwd = Seconds(overlap ? overlapped(bwd + tp_b, mb_b, slow) : bwd + tp_b + mb_b);
  out.grad_sync = Seconds(grad_sync);
  out.time.tp_comm = Seconds(tp_f + tp_b);
  out.time.zero3_gather = Seconds(std::max(0.0, (out.fwd + out.bwd).value() - fwd - bwd - tp_f - tp_b));
  out.time.embedding = Seconds(fwd + bwd);
  out.time.dp_comm = Seconds(grad_sync + std::max(1, tr.micro_batches) * (emb.zero == 2 ? mb_b : 0.0));
  const double opt_params = params / (emb.zero >= 1 ? safe(shard) : 1.0);
  if (mp_->runtime.optimizer_s_per_param > 0) out.optimizer = Seconds(mp_->runtime.optimizer_s_per_param * opt_params * share);
  else out.optimizer = a.optimizer;
  out.time.optimizer = out.optimizer;

  out.memory = a.memory;
  rescale_states(out.memory, mp_->runtime.state_bytes_per_param, tr.dtype);
  // Measured activations include the logits and the loss's saved softmax, which the analytic model
  // books as its transient; keep `other` (NCCL's buffers, ZeRO-3's gathered head). A measured
  // runtime overhead is a reserve of the budget (memory_budget, as the analytic model's).
  out.memory.activations = Bytes(saved * micro_batches_in_flight(tr, ctx.stage));
  if (H) out.memory.transient = Bytes(0);
  return out;
}

Seconds CalibratedCostModel::transition(const LayerContext& ctx, const LayerStrategy& a, const LayerStrategy& b) const {
  // runtime/ops.cc redistribute: unless the source layout is replicated (a local slice), every
  // rank all-gathers the stage's blocks over the stage group; backward moves the gradient back
  // the same way (from b's layout).
  const int S = std::max(1, ctx.stage_size);
  const ActivationLayout la = layout_of(a, S), lb = layout_of(b, S);
  if (la == lb) return Seconds(0);
  const ClusterSpec& c = *ctx.cluster;
  const TrainSettings& tr = ctx.train;
  const double whole = dtype_bytes(wire_dtype(tr)) * tr.pipeline_micro_batch() * tr.seq * static_cast<double>(ctx.model->hidden);
  const CommGroup g = place_group(c, S, 1);
  double t = 0;
  if (!la.replicated())
    t += pricer(c).price(Collective::kAllGather, Bytes(whole / (la.batch_parts * la.seq_parts) * S), g)
             .value();
  if (!lb.replicated())
    t += pricer(c).price(Collective::kAllGather, Bytes(whole / (lb.batch_parts * lb.seq_parts) * S), g)
             .value();
  return Seconds(t);
}

Seconds CalibratedCostModel::p2p(const StageContext& ctx, const LayerStrategy& s) const {
  // runtime/pipeline_executor.cc: each rank sends its output block (the boundary layer's layout) to the rank
  // S ahead, and receives the gradient of it back.
  const TrafficOptions o = runtime_traffic(wire_dtype(ctx.train));
  return Seconds(price_traffic(p2p_traffic(ctx, s, o), pricer(*ctx.cluster)).p2p);
}

StepCost CalibratedCostModel::step(const TrainSettings& train, const std::vector<StageSums>& stages) const {
  StepCost sc = analytic_.step(train, stages);
  // More ranks than the node computes at full speed (compute_sharing > 1, e.g. 4 ranks on 2 CPU
  // cores): every compute time above is slowed by the sharing measured with all ranks busy. A
  // pipeline's ranks are not all busy -- while one device group waits in its bubble the others
  // get its share of the node -- so the node's work is conserved rather than the per-rank speed:
  // the step is at least the mean device group's work (its stages' m * (fwd + bwd + p2p), sync
  // and update, all at the shared speed) and at least the schedule at full speed (step / sharing);
  // the larger of the two replaces the schedule's makespan when it is shorter.
  const double share = sharing(cluster_);
  const int p = std::max(1, std::min(train.pp, static_cast<int>(stages.size())));
  if (share > 1.0 && p > 1) {
    double mean = 0;  // over device groups: every stage's busy time, divided by the groups
    for (const Seconds& t : sc.stage_time) mean += t.value() / p;
    const double conserved = std::max(mean, sc.step_time.value() / share);
    if (conserved < sc.step_time.value()) {
      const Seconds absorbed = sc.step_time - Seconds(conserved);
      sc.step_time = Seconds(conserved);
      // Out of the bubble first, the rest out of the compute that ran faster than shared.
      const Seconds from_bubble = std::min(absorbed, sc.time.bubble);
      sc.time.bubble -= from_bubble;
      sc.time.compute = std::max(Seconds(0), sc.time.compute - (absorbed - from_bubble));
    }
  }
  // Once per step the runtime all-reduces the loss and the gradient-norm sum (two doubles) over the
  // world; it waits for every rank, so it adds to the step.
  const CommGroup world = place_group(cluster_, cluster_.total_gpus(), 1);
  const Seconds tail = collective(Collective::kAllReduce, Bytes(16), world, cluster_);
  sc.step_time += tail;
  sc.time.dp_exposed += tail;
  return sc;
}

Bytes CalibratedCostModel::memory_budget(const ClusterSpec& c) const { return analytic_.memory_budget(c); }

std::vector<std::string> CalibratedCostModel::coverage(const Plan& p) const {
  std::vector<std::string> notes;
  CalibratedCostModel noting(*this);  // this model, writing its fall-backs into `notes`
  noting.notes_ = &notes;
  const int n = static_cast<int>(p.stages.size());
  for (int s = 0; s < n; ++s) {
    const Stage& st = p.stages[s];
    const StageContext sctx = stage_context(p, s);
    LayerContext lctx;
    static_cast<StageContext&>(lctx) = sctx;
    for (int i = 0; i < st.num_layers(); ++i) {
      lctx.layer = st.first_layer + i;
      (void)noting.layer(lctx, st.layers[i]);
      if (i > 0) (void)noting.transition(lctx, st.layers[i - 1], st.layers[i]);
    }
    (void)noting.stage_extra(sctx, p.embedding);
    if (s + 1 < n) (void)noting.p2p(sctx, st.layers.back());
  }
  // One line per distinct fall-back, in first-seen order.
  std::vector<std::string> out;
  for (const auto& line : notes)
    if (std::find(out.begin(), out.end(), line) == out.end()) out.push_back(line);
  return out;
}

Result<std::unique_ptr<CostModel>> make_calibrated_cost_model(const std::string& hardware_profile_path,
                                                              const std::string& model_profile_path,
                                                              const ModelSpec& model, const ClusterSpec& cluster) {
  std::optional<HardwareProfile> hw;
  std::optional<ModelProfile> mp;
  if (!hardware_profile_path.empty()) {
    auto r = read_hardware_profile(hardware_profile_path);
    if (!r.ok()) return r.error();
    hw = std::move(r).value();
  }
  if (!model_profile_path.empty()) {
    auto r = read_model_profile(model_profile_path);
    if (!r.ok()) return r.error();
    mp = std::move(r).value();
  }
  return std::unique_ptr<CostModel>(std::make_unique<CalibratedCostModel>(std::move(hw), std::move(mp), model, cluster));
}

Result<ClusterSpec> read_profile_cluster(const std::string& hardware_profile_path) {
  auto r = read_hardware_profile(hardware_profile_path);
  if (!r.ok()) return r.error();
  auto c = cluster_from_hardware_profile(r.value());
  if (!c.ok()) return c.error().with_context(hardware_profile_path);
  return c;
}

}  // namespace weft
