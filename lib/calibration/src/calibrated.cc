// CalibratedCostModel: measured compute and collectives put into weft's analytic cost model. The
// collective schedule below is that of weft's runtime (lib/runtime: model.cc, ops.cc, optim.cc,
// trainer.cc), the program the profiles measured; docs/profiles.md lists it term by term.
#include "weft/calibration/calibrated.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "weft/cost/estimate.h"
#include "weft/cost/memory.h"
#include "weft/plan/rank_map.h"
#include "weft/spec/counts.h"

namespace weft {

namespace {

double safe(int x) { return static_cast<double>(std::max(1, x)); }

// Compute `compute` that overlaps communication `comm`: the hidden part slows the compute by
// `slowdown`, the rest of the communication is exposed (the analytic model's rule, §3.5).
double overlapped(double compute, double comm, double slowdown) {
  const double hidden = std::min(compute, comm);
  return compute + (slowdown - 1.0) * hidden + std::max(0.0, comm - compute);
}

AnalyticOptions adjusted(AnalyticOptions o, const std::optional<HardwareProfile>& hw,
                         const std::optional<ModelProfile>& mp) {
  if (hw) {
    if (hw->overlap.group_size > 0) o.overlap_slowdown = hw->overlap.compute_slowdown;
    if (hw->machine.runtime_overhead_gib > 0) o.runtime_overhead_gib = hw->machine.runtime_overhead_gib;
  }
  if (mp) o.overlap_grad_sync = mp->runtime.grad_sync_overlaps_backward;
  return o;
}

void note(std::vector<std::string>* notes, const std::string& s) {
  if (notes) notes->push_back(s);
}

// How weft's runtime lays a stage's activations out under s (runtime/model.cc layout_of): batch
// block by dp, sequence block by ulysses (x tp with sequence parallelism), per stage rank.
struct Layout {
  int batch_parts = 1, seq_parts = 1;
  std::vector<int> batch_idx, seq_idx;
  bool operator==(const Layout&) const = default;
  bool replicated() const { return batch_parts == 1 && seq_parts == 1; }
};

Layout layout_of(const LayerStrategy& s, int S) {
  Layout l;
  const int sp = s.sp ? s.tp : 1;
  l.batch_parts = s.dp;
  l.seq_parts = s.ulysses * sp;
  for (int j = 0; j < S; ++j) {
    const RankCoords c = coords_of(j, S, s);
    l.batch_idx.push_back(c.dp);
    l.seq_idx.push_back(c.ulysses * sp + (s.sp ? c.tp : 0));
  }
  return l;
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

Seconds CalibratedCostModel::collective(Collective k, Bytes bytes, const CommGroup& g, const ClusterSpec& c,
                                        bool* measured) const {
  return collective_noted(k, bytes, g, c, measured, nullptr);
}

Seconds CalibratedCostModel::collective_noted(Collective k, Bytes bytes, const CommGroup& g, const ClusterSpec& c,
                                              bool* measured, std::vector<std::string>* notes) const {
  if (measured) *measured = false;
  if (bytes.value() <= 0 || (k != Collective::kSendRecv && g.size <= 1)) {
    if (measured) *measured = true;  // nothing to price
    return Seconds(0);
  }
  const Placement pl = g.spans_nodes() ? Placement::kInterNode : Placement::kIntraNode;
  const int size = k == Collective::kSendRecv ? 2 : g.size;
  if (hw_) {
    if (const CollectiveEntry* e = hw_->find(k, size, pl, k == Collective::kSendRecv ? 0 : g.ranks_per_node)) {
      if (measured) *measured = true;
      return e->time(bytes);
    }
  }
  note(notes, std::string(profile_name(k)) + " over " + std::to_string(size) + " ranks (" + to_string(pl) +
                  "): analytic, " + (hw_ ? "not in the hardware profile" : "no hardware profile"));
  return collective_time(k, bytes, g, c, analytic_.options().comm);
}

CalibratedCostModel::Compute CalibratedCostModel::layer_compute(const LayerContext& ctx, const LayerStrategy& s) const {
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
  const double act = layer_activation_bytes(L, s, ao).value();
  out.act = pc->activation_bytes * (ref > 0 ? act / ref : 1.0);
  if (pc->extrapolated)
    out.why = (out.why.empty() ? "" : out.why + "; ") + "extrapolated beyond the profiled micro-batch / sequence range";
  return out;
}

LayerCost CalibratedCostModel::layer(const LayerContext& ctx, const LayerStrategy& s) const {
  return layer_noted(ctx, s, nullptr);
}

LayerCost CalibratedCostModel::layer_noted(const LayerContext& ctx, const LayerStrategy& s,
                                           std::vector<std::string>* notes) const {
  const LayerCost a = analytic_.layer(ctx, s);
  const LayerShape& L = ctx.shape();
  if (L.moe.enabled()) {  // expert routing and parallelism: the analytic model alone
    note(notes, layer_label(ctx, s) + ": analytic (MoE layers are not profiled)");
    return a;
  }
  const ClusterSpec& c = *ctx.cluster;
  const TrainSettings& tr = ctx.train;
  const double e = dtype_bytes(wire_dtype(tr));
  const double t = safe(s.tp), u = safe(s.ulysses), cp = safe(s.cp), dp = safe(s.dp);
  const double samples = tr.pipeline_micro_batch() / dp;
  const double tokens = samples * tr.seq / (u * cp);
  const double h = static_cast<double>(L.hidden);
  const double q = static_cast<double>(L.heads) * L.head_dim;
  const double kv = static_cast<double>(L.kv_heads) * L.head_dim;
  const double blocks = L.kind == LayerKind::kCrossDecoder ? 2 : 1;
  auto coll = [&](Collective k, double bytes, const CommGroup& g) {
    return collective_noted(k, Bytes(bytes), g, c, nullptr, notes).value();
  };

  // --- compute: measured, or the analytic model's (split 1 : 2 between forward and backward)
  const Compute m = layer_compute(ctx, s);
  double comp_f = 0, comp_b = 0, recompute = 0;
  if (m.measured) {
    comp_f = m.fwd;
    comp_b = m.bwd;
    recompute = m.recompute;
    if (!m.why.empty()) note(notes, layer_label(ctx, s) + ": compute " + m.why);
  } else {
    const double total = a.time.compute.value();
    comp_f = total / 3;
    comp_b = total - comp_f + a.time.recompute.value();
    recompute = a.time.recompute.value();
    note(notes, layer_label(ctx, s) + ": compute analytic: " + m.why);
  }

  // --- tensor parallel: per attention block and FFN, forward an all-reduce (reduce_from) or with
  // sequence parallelism an all-gather + reduce-scatter, backward the conjugates. With sequence
  // parallelism the replicated norm weights and biases (copy_to) sum their gradients; key/value
  // weights replicated over a kv group (tp > kv heads) too.
  double tp_f = 0, tp_b = 0;
  if (s.tp > 1) {
    const CommGroup g = place_group(c, s.tp, 1);
    const double act = e * tokens * h;
    const double per = s.sp ? coll(Collective::kAllGather, act, g) + coll(Collective::kReduceScatter, act, g)
                            : coll(Collective::kAllReduce, act, g);
    tp_f = (blocks + 1) * per;
    tp_b = tp_f;
    if (s.sp) {
      const double norm_tensors = (ctx.model->norm == NormKind::kLayerNorm ? 2.0 : 1.0) * (blocks + 1);
      const double bias_tensors = L.bias ? blocks + 1 : 0.0;
      tp_b += (norm_tensors + bias_tensors) * coll(Collective::kAllReduce, e * h, g);
    }
    if (L.kv_heads % s.tp != 0) {
      const int rep = s.tp / std::max(1, L.kv_heads);
      if (rep > 1) {
        const CommGroup kg = place_group(c, rep, 1);
        tp_b += blocks * coll(Collective::kAllReduce, e * 2 * L.head_dim * h * (L.bias ? 1.0 + 1.0 / h : 1.0), kg);
      }
    }
  }
  // --- Ulysses: all-to-all of q, k, v in and of the context out, per attention block; backward alike.
  double uly = 0;
  if (s.ulysses > 1) {
    const CommGroup g = place_group(c, s.ulysses, s.tp);
    uly = blocks * (2 * coll(Collective::kAllToAll, e * tokens * q / t, g) +
                    2 * coll(Collective::kAllToAll, e * tokens * kv / t, g));
  }
  // --- context and expert parallelism: not run by weft's runtime; the analytic figures.
  const double cp_comm = a.time.cp_comm.value(), ep_comm = a.time.ep_comm.value();
  if (s.cp > 1) note(notes, layer_label(ctx, s) + ": context-parallel communication analytic");

  // --- data parallel / ZeRO over the dp x ulysses x cp ranks holding this tp shard (runtime/optim.cc):
  //   zero 0: all-reduce of the gradients after the last micro-batch
  //   zero 1: reduce-scatter of the gradients, then all-gather of the updated parameters
  //   zero 2: reduce-scatter after every micro-batch, all-gather after the update
  //   zero 3: parameters all-gathered in every forward (and again in a full recompute), gradients
  //           reduce-scattered in every backward
  const LayerParams lp = layer_params(L);
  const double local = (lp.attention + lp.ffn) / t + lp.norms;
  const StateBytes sb = state_bytes_per_param(wire_dtype(tr));
  const int shard = s.shard_group();
  const CommGroup dg = place_group(c, shard, s.tp);
  double grad_sync = 0, mb_rs = 0, ag_f = 0, ag_b = 0;
  switch (s.zero) {
    case 0: grad_sync = coll(Collective::kAllReduce, sb.grads * local, dg); break;
    case 1:
      grad_sync = coll(Collective::kReduceScatter, sb.grads * local, dg) + coll(Collective::kAllGather, sb.weights * local, dg);
      break;
    case 2:
      mb_rs = coll(Collective::kReduceScatter, sb.grads * local, dg);
      grad_sync = coll(Collective::kAllGather, sb.weights * local, dg);
      break;
    default:
      mb_rs = coll(Collective::kReduceScatter, sb.grads * local, dg);
      ag_f = coll(Collective::kAllGather, sb.weights * local, dg);
      ag_b = s.recompute == Recompute::kFull ? ag_f : 0.0;
      break;
  }

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

  LayerCost out;
  out.fwd = Seconds(fwd);
  out.bwd = Seconds(bwd);
  out.grad_sync = Seconds(grad_sync);
  TimeBreakdown& tb = out.time;
  tb.recompute = Seconds(recompute);
  tb.tp_comm = Seconds(tp_f + tp_b + (s.recompute == Recompute::kFull ? tp_f : 0.0));
  tb.ulysses_comm = Seconds(2 * uly + (s.recompute == Recompute::kFull ? uly : 0.0));
  tb.cp_comm = Seconds(cp_comm);
  tb.ep_comm = Seconds(ep_comm);
  tb.zero3_gather = Seconds(overlap ? std::max(0.0, fwd - comp_f - comm_f) + std::max(0.0, bwd - comp_b - comm_b)
                                    : ag_f + ag_b + mb_rs);
  tb.compute = Seconds(std::max(0.0, fwd + bwd - tb.recompute.value() - tb.tp_comm.value() - tb.ulysses_comm.value() -
                                         cp_comm - ep_comm - tb.zero3_gather.value()));
  tb.dp_comm = Seconds(grad_sync + std::max(1, tr.micro_batches) * mb_rs);

  // --- optimizer: the runtime's measured per-step cost per updated parameter
  const double opt_params = local / (s.zero >= 1 ? safe(shard) : 1.0);
  if (mp_ && mp_->runtime.optimizer_s_per_param > 0) {
    out.optimizer = Seconds(mp_->runtime.optimizer_s_per_param * opt_params * sharing(c));
  } else {
    out.optimizer = a.optimizer;
    note(notes, layer_label(ctx, s) + ": optimizer analytic");
  }
  tb.optimizer = out.optimizer;

  // --- memory: the analytic model's states (rescaled to the runtime's measured bytes per
  // parameter), measured activations times the micro-batches in flight
  out.memory = a.memory;
  if (mp_ && mp_->runtime.state_bytes_per_param > 0) {
    const StateBytes ab = state_bytes_per_param(tr.dtype);  // what the analytic figures assumed
    const double k = mp_->runtime.state_bytes_per_param / (ab.weights + ab.grads + ab.optimizer);
    out.memory.weights *= k;
    out.memory.grads *= k;
    out.memory.optimizer *= k;
  }
  if (m.measured) out.memory.activations = Bytes(m.act * micro_batches_in_flight(tr, ctx.stage));
  return out;
}

LayerCost CalibratedCostModel::stage_extra(const StageContext& ctx, const LayerStrategy& emb) const {
  return stage_extra_noted(ctx, emb, nullptr);
}

LayerCost CalibratedCostModel::stage_extra_noted(const StageContext& ctx, const LayerStrategy& emb,
                                                 std::vector<std::string>* notes) const {
  const LayerCost a = analytic_.stage_extra(ctx, emb);
  if (!ctx.first() && !ctx.last()) return a;
  const ModelSpec& model = *ctx.model;
  const ClusterSpec& c = *ctx.cluster;
  const TrainSettings& tr = ctx.train;
  const std::string what = std::string(ctx.first() ? "embedding" : "") + (ctx.first() && ctx.last() ? " and " : "") +
                           (ctx.last() ? "head" : "");
  if (!mp_ || !mp_->covers_edges(model)) {
    note(notes, what + ": analytic (" + (mp_ ? "the model profile is of another vocabulary / width" : "no model profile") +
                    ")");
    return a;
  }
  const double e = dtype_bytes(wire_dtype(tr));
  const double t = safe(emb.tp), u = safe(emb.ulysses), cp = safe(emb.cp), dp = safe(emb.dp);
  const double samples = tr.pipeline_micro_batch() / dp;
  const double seq_local = tr.seq / (u * cp);  // the embedding and head work token by token
  const double tokens = samples * seq_local;
  const double h = static_cast<double>(model.hidden), vocab = static_cast<double>(model.vocab);
  std::optional<PhaseCost> E, H;
  if (ctx.first()) E = interpolate(mp_->embedding, emb.tp, Recompute::kNone, samples, seq_local);
  if (ctx.last()) H = interpolate(mp_->head, emb.tp, Recompute::kNone, samples, seq_local);
  if ((ctx.first() && !E) || (ctx.last() && !H)) {
    note(notes, what + ": analytic (no tp=" + std::to_string(emb.tp) + " samples)");
    return a;
  }
  if ((E && E->extrapolated) || (H && H->extrapolated))
    note(notes, what + ": extrapolated beyond the profiled micro-batch / sequence range");
  auto coll = [&](Collective k, double bytes, const CommGroup& g) {
    return collective_noted(k, Bytes(bytes), g, c, nullptr, notes).value();
  };
  const double share = sharing(c);
  const CommGroup tg = place_group(c, emb.tp, 1);
  const double act = e * tokens * h;
  const bool sp = emb.sp && emb.tp > 1;

  // ZeRO-3's own compute on the gathered views: zero-3 minus zero-0 samples.
  auto zero3_extra = [&](const std::vector<PhaseSample>& v, double& f, double& b) {
    if (emb.zero != 3) return;
    const auto own = zero3_own_work(v, emb.tp, samples, seq_local);
    if (!own) {
      note(notes, what + ": no zero=3 samples (ZeRO-3's own compute left out)");
      return;
    }
    f += own->first * share;
    b += own->second * share;
  };
  double fwd = 0, bwd = 0, tp_f = 0, tp_b = 0, saved = 0, params = 0;
  std::vector<double> units;  // parameter buckets the runtime reduces separately
  if (E) {
    zero3_extra(mp_->embedding, fwd, bwd);
    fwd += E->forward_s * share;
    bwd += E->backward_s * share;
    saved += E->activation_bytes;
    if (emb.tp > 1) {  // vocab-parallel lookup: partial rows summed (reduce-scattered with SP)
      tp_f += sp ? coll(Collective::kReduceScatter, act, tg) : coll(Collective::kAllReduce, act, tg);
      if (sp) tp_b += coll(Collective::kAllGather, act, tg);
      if (sp && model.position == PositionKind::kLearned) {  // the replicated position table's gradient
        const double P = model.max_seq > 0 ? model.max_seq : tr.seq;
        tp_b += coll(Collective::kAllReduce, e * P * h, tg);
      }
    }
    units.push_back(vocab * h / t);
    if (model.position == PositionKind::kLearned) units.push_back((model.max_seq > 0 ? model.max_seq : tr.seq) * h);
  }
  if (H) {
    zero3_extra(mp_->head, fwd, bwd);
    fwd += H->forward_s * share;
    bwd += H->backward_s * share;
    saved += H->activation_bytes;
    const double norm_tensors = model.norm == NormKind::kLayerNorm ? 2.0 : 1.0;
    if (emb.tp > 1) {
      // input gathered (SP) or copied to every rank; max, exp-sum and target logit all-reduced
      if (sp) {
        tp_f += coll(Collective::kAllGather, act, tg);
        tp_b += coll(Collective::kReduceScatter, act, tg) + norm_tensors * coll(Collective::kAllReduce, e * h, tg);
      } else {
        tp_b += coll(Collective::kAllReduce, act, tg);
      }
      tp_f += 3 * coll(Collective::kAllReduce, 4 * tokens, tg);
    }
    double head = norm_tensors * h;
    if (!model.tied_embeddings) head += vocab * h / t;
    units.push_back(head);
    if (model.tied_embeddings && !ctx.first()) units.push_back(vocab * h / t);  // the tied copy
  }
  for (double n : units) params += n;

  // Gradient reduction of each bucket (runtime/optim.cc), and the tied table's two copies summed.
  const StateBytes sb = state_bytes_per_param(wire_dtype(tr));
  const int shard = emb.shard_group();
  const CommGroup dg = place_group(c, shard, emb.tp);
  // Per bucket, as for layers: zero 0 all-reduce; zero 1 reduce-scatter + all-gather; zero 2
  // reduce-scatter every micro-batch + all-gather; zero 3 all-gather every forward, reduce-scatter
  // every backward.
  double grad_sync = 0, mb_f = 0, mb_b = 0;
  for (double n : units) {
    switch (emb.zero) {
      case 0: grad_sync += coll(Collective::kAllReduce, sb.grads * n, dg); break;
      case 1:
        grad_sync += coll(Collective::kReduceScatter, sb.grads * n, dg) + coll(Collective::kAllGather, sb.weights * n, dg);
        break;
      case 2:
        mb_b += coll(Collective::kReduceScatter, sb.grads * n, dg);
        grad_sync += coll(Collective::kAllGather, sb.weights * n, dg);
        break;
      default:
        mb_f += coll(Collective::kAllGather, sb.weights * n, dg);
        mb_b += coll(Collective::kReduceScatter, sb.grads * n, dg);
        break;
    }
  }
  if (model.tied_embeddings && ctx.num_stages > 1) {
    const int span = ctx.stage_size * std::max(0, tr.pp - 1);
    CommGroup pair;
    pair.size = 2;
    pair.ranks_per_node = span >= c.gpus_per_node ? 1 : 2;
    grad_sync += coll(Collective::kAllReduce, sb.grads * vocab * h / t / (emb.zero >= 2 ? safe(shard) : 1.0), pair);
  }

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
  if (mp_->runtime.state_bytes_per_param > 0) {
    const StateBytes ab = state_bytes_per_param(tr.dtype);  // what the analytic figures assumed
    const double k = mp_->runtime.state_bytes_per_param / (ab.weights + ab.grads + ab.optimizer);
    out.memory.weights *= k;
    out.memory.grads *= k;
    out.memory.optimizer *= k;
  }
  // Measured activations include the logits and the loss's saved softmax, which the analytic model
  // books under `other`; keep only its runtime overhead there.
  out.memory.activations = Bytes(saved * micro_batches_in_flight(tr, ctx.stage));
  const double overhead = analytic_.options().runtime_overhead_gib;
  if (overhead > 0) {
    out.memory.other = ctx.stage < std::max(1, tr.pp) ? GiB(overhead) : Bytes(0);
  } else if (H) {
    out.memory.other = Bytes(std::max(0.0, a.memory.other.value() - (e + 4) * tokens * vocab / t));
  }
  return out;
}

Seconds CalibratedCostModel::transition(const LayerContext& ctx, const LayerStrategy& a, const LayerStrategy& b) const {
  return transition_noted(ctx, a, b, nullptr);
}

Seconds CalibratedCostModel::transition_noted(const LayerContext& ctx, const LayerStrategy& a, const LayerStrategy& b,
                                              std::vector<std::string>* notes) const {
  // runtime/ops.cc redistribute: unless the source layout is replicated (a local slice), every
  // rank all-gathers the stage's blocks over the stage group; backward moves the gradient back
  // the same way (from b's layout).
  const int S = std::max(1, ctx.stage_size);
  const Layout la = layout_of(a, S), lb = layout_of(b, S);
  if (la == lb) return Seconds(0);
  const ClusterSpec& c = *ctx.cluster;
  const TrainSettings& tr = ctx.train;
  const double whole = dtype_bytes(wire_dtype(tr)) * tr.pipeline_micro_batch() * tr.seq * static_cast<double>(ctx.model->hidden);
  const CommGroup g = place_group(c, S, 1);
  double t = 0;
  if (!la.replicated())
    t += collective_noted(Collective::kAllGather, Bytes(whole / (la.batch_parts * la.seq_parts) * S), g, c, nullptr, notes)
             .value();
  if (!lb.replicated())
    t += collective_noted(Collective::kAllGather, Bytes(whole / (lb.batch_parts * lb.seq_parts) * S), g, c, nullptr, notes)
             .value();
  return Seconds(t);
}

Seconds CalibratedCostModel::p2p(const StageContext& ctx, const LayerStrategy& s) const {
  return p2p_noted(ctx, s, nullptr);
}

Seconds CalibratedCostModel::p2p_noted(const StageContext& ctx, const LayerStrategy& s,
                                       std::vector<std::string>* notes) const {
  // runtime/trainer.cc: each rank sends its output block (the boundary layer's layout) to the rank
  // S ahead, and receives the gradient of it back.
  if (ctx.num_stages <= 1) return Seconds(0);
  const ClusterSpec& c = *ctx.cluster;
  const TrainSettings& tr = ctx.train;
  const int pp = std::max(1, tr.pp), S = std::max(1, ctx.stage_size), G = std::max(1, c.gpus_per_node);
  const int g1 = ctx.stage % pp, g2 = (ctx.stage + 1) % pp;
  const bool cross = S >= G || (g1 * S) / G != (g2 * S) / G;
  const Layout l = layout_of(s, S);
  const double block = dtype_bytes(wire_dtype(tr)) * tr.pipeline_micro_batch() / l.batch_parts * tr.seq / l.seq_parts *
                       static_cast<double>(ctx.model->hidden);
  CommGroup pair;
  pair.size = 2;
  pair.ranks_per_node = cross ? 1 : 2;
  return collective_noted(Collective::kSendRecv, Bytes(block), pair, c, nullptr, notes) * 2.0;
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
  const int n = static_cast<int>(p.stages.size());
  for (int s = 0; s < n; ++s) {
    const Stage& st = p.stages[s];
    const StageContext sctx = stage_context(p, s);
    LayerContext lctx;
    static_cast<StageContext&>(lctx) = sctx;
    for (int i = 0; i < st.num_layers(); ++i) {
      lctx.layer = st.first_layer + i;
      (void)layer_noted(lctx, st.layers[i], &notes);
      if (i > 0) (void)transition_noted(lctx, st.layers[i - 1], st.layers[i], &notes);
    }
    (void)stage_extra_noted(sctx, p.embedding, &notes);
    if (s + 1 < n) (void)p2p_noted(sctx, st.layers.back(), &notes);
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
