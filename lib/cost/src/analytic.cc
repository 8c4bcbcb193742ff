// weft's analytic cost model: each cost is the layer's compute (layer_compute.cc), its traffic
// (weft/cost/traffic.h) priced with the formulas of collectives.h, and the assembly below. Every
// formula and constant is derived in docs/cost-model.md; the section numbers below refer to it.
#include "weft/cost/analytic.h"

#include <algorithm>
#include <cmath>

#include "layer_compute.h"
#include "weft/cost/assemble.h"
#include "weft/cost/collectives.h"
#include "weft/cost/compute.h"
#include "weft/cost/memory.h"
#include "weft/cost/pricing.h"
#include "weft/cost/schedule.h"
#include "weft/cost/traffic.h"
#include "weft/plan/pipeline_order.h"

namespace weft {

namespace {

// §5.1 Where the fp32 master weights live: torchtitan trains with FSDP2 (fully_shard with
// MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)), whose sharded fp32 parameters are
// the master; Megatron's distributed optimizer and Megatron-FSDP keep a separate one; weft's runtime
// steps on its fp32 parameters, beside a once-per-step compute-dtype cast.
MasterWeights master_weights(const AnalyticOptions& o) {
  if (o.framework == Framework::kWeft) return MasterWeights::kFp32Params;
  const bool fsdp = o.framework == Framework::kTorchtitan || o.framework == Framework::kTorchtitanCompile;
  return fsdp ? MasterWeights::kShardedParams : MasterWeights::kInOptimizer;
}

// The layer's time from its compute and its priced traffic: exposed communication per pass, the
// recompute, ZeRO's per-micro-batch traffic overlapped with the compute, then the host bound
// (§2.4, §3.5, §4).
LayerCost assemble(const LayerStrategy& s, const AnalyticOptions& opt, const TrainSettings& tr, LayerCompute lc,
                   const PricedTraffic& pt) {
  const int micro_batches = tr.micro_batches;
  Pass& f = lc.f;
  Pass& b = lc.b;
  f.tp = pt.fwd.tp, f.uly = pt.fwd.ulysses, f.cp = pt.fwd.cp, f.ep = pt.fwd.ep;
  b.tp = pt.bwd.tp, b.uly = pt.bwd.ulysses, b.cp = pt.bwd.cp, b.ep = pt.bwd.ep;
  if (tr.moe_a2a_overlap && (f.ep > 0 || b.ep > 0)) {
    // §3.4 Megatron-Core's combined 1F1B: the forward of one micro-batch and the backward of
    // another run as one schedule, the forward's dispatch and combine behind the backward's compute
    // and the backward's behind the forward's; what the other pass's compute does not cover stays
    // exposed, and the covered part slows the compute as overlapped traffic does (§3.5). The
    // warm-up forwards and cool-down backwards of a pipeline, which have no partner, are not told
    // apart (at most the in-flight micro-batches of a stage out of m).
    const double fc = f.compute(), bc = b.compute();
    const double hide_f = std::min(f.ep, bc), hide_b = std::min(b.ep, fc);
    f.ep = f.ep - hide_f + (opt.overlap_slowdown - 1.0) * hide_f;
    b.ep = b.ep - hide_b + (opt.overlap_slowdown - 1.0) * hide_b;
  }
  const double grad_sync = pt.grad_sync, mb_rs = pt.reduce_b, mb_ag_f = pt.gather_f, mb_ag_b = pt.gather_b;
  const double host_f = lc.host_f, host_b = lc.host_b;

  // --- recompute (§2.4): full re-runs the forward (with its communication) inside backward;
  // selective re-runs the attention core, or under the op-level policy every other matmul, every
  // elementwise kernel and the tensor-parallel all-gathers (reduce-scatter outputs are kept).
  double recompute = 0;
  if (s.recompute == Recompute::kFull) {
    recompute = f.gpu();
  } else if (s.recompute == Recompute::kSelective && opt.selective == SelectivePolicy::kAlternateMatmuls) {
    recompute = lc.recompute_gemm;
    recompute += f.mem + (s.sp ? 0.5 : 0.0) * f.tp;
  } else if (s.recompute == Recompute::kSelective) {
    recompute = f.core;
  }

  // --- GPU time with ZeRO traffic overlapped, then the host bound
  const double slow = opt.overlap_slowdown;
  const double gpu_f = overlapped(f.gpu(), mb_ag_f, slow);
  const double gpu_b = overlapped(b.gpu() + recompute, mb_ag_b + mb_rs, slow);
  const double fwd = std::max(gpu_f, host_f);
  const double bwd = std::max(gpu_b, host_b);

  LayerTimes lt;
  lt.fwd = fwd;
  lt.bwd = bwd;
  lt.grad_sync = grad_sync;
  lt.recompute = recompute;
  // The W pass's GPU time as priced: its share of a host-bound or ZeRO-slowed backward stays in B.
  lt.wgrad = b.wgrad;
  lt.tp = f.tp + b.tp;
  lt.ulysses = f.uly + b.uly;
  lt.cp = f.cp + b.cp;
  lt.ep = f.ep + b.ep;
  lt.zero3_gather = std::max(0.0, mb_ag_f - f.gpu()) + std::max(0.0, mb_ag_b + mb_rs - b.gpu() - recompute);
  lt.reduce_per_micro_batch = mb_rs;
  lt.micro_batches = micro_batches;
  return layer_cost(lt);
}

}  // namespace

AnalyticCostModel::AnalyticCostModel(AnalyticOptions opt) : opt_(opt) {}
AnalyticCostModel::~AnalyticCostModel() = default;

std::string AnalyticCostModel::source() const { return std::string("analytic, ") + to_string(opt_.framework); }

Bytes AnalyticCostModel::memory_budget(const ClusterSpec& c) const {
  // §5.4 The device less the process reserve and the user's margin (fragmentation is in the peak).
  return weft::memory_budget(c, opt_.memory_margin, opt_.runtime_overhead_gib).budget;
}

double AnalyticCostModel::recompute_flops(const LayerShape& s, Recompute r, double batch, double seq) const {
  if (r != Recompute::kSelective || opt_.selective != SelectivePolicy::kAlternateMatmuls)
    return CostModel::recompute_flops(s, r, batch, seq);
  // Op-level selective checkpointing re-runs the 2nd, 4th, ... matmul of the layer (§2.4), whose
  // FLOPs are 2 per multiply-add of each re-run weight per token.
  const std::vector<LayerMatmul> mm = layer_matmuls(s, 1);
  double per_token = 0;
  for (size_t i = 1; i < mm.size(); i += 2) per_token += 2 * mm[i].n * mm[i].k;
  return per_token * batch * seq;
}

ScheduleTraits AnalyticCostModel::schedule_traits() const {
  return ScheduleTraits{opt_.overlap_grad_sync, opt_.overlap_slowdown};
}

LayerCost AnalyticCostModel::layer(const LayerContext& ctx, const LayerStrategy& s) const {
  const LayerShape& L = ctx.shape();
  const TrainSettings& tr = ctx.train;
  // §2, §4, §6: kernels, host time and optimizer; §3: what the layer sends, priced by the formulas of
  // collectives.h (a ring step hides behind the attention of one block); then the assembly.
  const LayerCompute lc = layer_compute(ctx, s, opt_);
  const double cp = safe(s.cp);
  const PricedTraffic pt =
      price_traffic(layer_traffic(ctx, s), AnalyticPricer(*ctx.cluster, opt_.comm), lc.core_f / cp, lc.core_b / cp);
  LayerCost out = assemble(s, opt_, tr, lc, pt);
  out.optimizer = lc.optimizer;
  out.time.optimizer = out.optimizer;

  // --- memory (§5)
  const HeldParams& hp = lc.held;
  const double dense_local = hp.dense, expert_local = hp.expert;
  const int shard = hp.shard, expert_shard = hp.expert_shard;
  const MasterWeights master = master_weights(opt_);
  const StateBytes sd = sharded_state_bytes(tr.dtype, s.zero, shard, master, tr.optimizer);
  const StateBytes se = sharded_state_bytes(tr.dtype, s.zero, expert_shard, master, tr.optimizer);
  MemoryBreakdown& mem = out.memory;
  mem.weights = Bytes(sd.weights * dense_local + se.weights * expert_local);
  mem.grads = Bytes(sd.grads * dense_local + se.grads * expert_local);
  mem.optimizer = Bytes(sd.optimizer * dense_local + se.optimizer * expert_local);
  mem.activations = layer_activation_bytes(L, s, lc.activations) * micro_batches_in_flight(tr, ctx.stage) +
                    weight_grad_state_bytes(L, s, lc.activations, weight_grad_inputs_held(tr)) *
                        pending_weight_grads(tr, ctx.stage);
  // ZeRO >= 2 holds one layer's gradient (and ZeRO-3 two layers' gathered weights) in full while
  // it runs, once per device: each layer carries its share over the layers of its device group.
  const double per_device_layers = std::max(1.0, static_cast<double>(ctx.model->num_layers()) / std::max(1, tr.pp));
  const Bytes buffers(zero_buffer_bytes_per_param(tr.dtype, s.zero) * (dense_local + expert_local) / per_device_layers);
  // §5.4 The allocator's fragmentation over what the step allocates and frees again: the
  // activations, the buffers above and FSDP's gradients (each step's reduce-scatter outputs).
  const Bytes per_step = mem.activations + buffers + (master == MasterWeights::kShardedParams ? mem.grads : Bytes(0));
  mem.other = buffers + per_step * opt_.allocator_fragmentation;
  // §5.2 Full recompute re-runs one layer's forward inside its backward: that layer's activations
  // for one micro-batch are held at the peak besides every layer's input (Korthikanti et al. 2022,
  // §4.1; measured: GPT-3 1.3B at micro-batch 16 in fp32 on an H100, data/reference/h100), once per
  // device (a transient: not at once with the loss's logits).
  Bytes recomputed(0);
  if (s.recompute == Recompute::kFull) {
    LayerStrategy kept = s;
    kept.recompute = Recompute::kNone;
    recomputed = layer_activation_bytes(L, kept, lc.activations);
  }
  // §5.2 The layer's backward working set on top (the framework weft prices its own; its ring
  // attention's buffers where larger), once per device.
  Bytes working(0);
  if (opt_.backward_transient)
    working = layer_backward_transient_bytes(L, s, lc.activations, !opt_.fused_grad_accumulation);
  if (s.cp > 1 && opt_.framework == Framework::kWeft)
    working = std::max(working, ring_attention_transient_bytes(L, s, lc.activations));
  mem.transient = recomputed + working;
  if (mem.transient.value() > 0) out.transient_share = mem.transient / per_device_layers;
  return out;
}

LayerCost AnalyticCostModel::stage_extra(const StageContext& ctx, const LayerStrategy& emb) const {
  const TrainSettings& tr = ctx.train;
  LayerCost out;
  EdgeCompute ec = edge_compute(ctx, emb, opt_);
  Pass& f = ec.f;
  Pass& b = ec.b;
  const PricedTraffic pt = price_traffic(edge_traffic(ctx, emb), AnalyticPricer(*ctx.cluster, opt_.comm));
  f.tp = pt.fwd.tp;
  b.tp = pt.bwd.tp;
  const double grad_sync = pt.grad_sync;
  out.optimizer = ec.optimizer;
  if (ec.params > 0) {
    const StateBytes sb = sharded_state_bytes(tr.dtype, emb.zero, emb.shard_group(), master_weights(opt_), tr.optimizer);
    out.memory.weights = Bytes(sb.weights * ec.params);
    out.memory.grads = Bytes(sb.grads * ec.params);
    out.memory.optimizer = Bytes(sb.optimizer * ec.params);
  }
  out.memory.activations = Bytes(ec.saved + ec.weight_grad_state * pending_weight_grads(tr, ctx.stage));
  out.memory.transient = Bytes(ec.logits);
  // §5.1 ZeRO-3 gathers the LM head for the loss, which peaks with every layer's activations
  // still held; the embedding is gathered only at the two ends of the step.
  if (emb.zero >= 3 && ctx.last()) {
    const double head = static_cast<double>(ctx.model->vocab) * ctx.model->hidden / std::max(1, emb.tp);
    out.memory.other += Bytes(state_bytes_per_param(tr.dtype).weights * head);
  }
  // §5.4 The allocator's fragmentation over what the step allocates and frees again.
  const bool fsdp_grads = master_weights(opt_) == MasterWeights::kShardedParams && emb.zero >= 2;
  out.memory.other += (out.memory.activations + out.memory.transient + out.memory.other +
                       (fsdp_grads ? out.memory.grads : Bytes(0))) *
                      opt_.allocator_fragmentation;
  // §5.4 NCCL's buffers, once per device (on the first virtual stage of each device group), for
  // the communicators of the stage's layout; a measured runtime overhead counts them already.
  if (ctx.stage < std::max(1, tr.pp) && opt_.runtime_overhead_gib <= 0)
    out.memory.other += nccl_communicator_bytes() * nccl_communicators(emb, tr.pp, ctx.model->tied_embeddings);

  const double host_f =
      opt_.framework_overhead ? (ec.ops_f * opt_.host_op_us + ec.fns_f * opt_.host_function_us) * 1e-6 : 0;
  const double fwd = std::max(f.gpu(), host_f);
  const double bwd = std::max(b.gpu(), host_f);
  out.fwd = Seconds(fwd);
  out.bwd = Seconds(bwd);
  out.grad_sync = Seconds(grad_sync);
  out.time.tp_comm = Seconds(f.tp + b.tp);
  out.time.embedding = Seconds(fwd + bwd - f.tp - b.tp);
  out.time.dp_comm = out.grad_sync;
  out.time.optimizer = out.optimizer;
  return out;
}

Seconds AnalyticCostModel::transition(const LayerContext& ctx, const LayerStrategy& a, const LayerStrategy& b) const {
  // §3.6 Activations between layers are split over the batch by dp and over the sequence by
  // cp * ulysses (* tp with sequence parallelism), replicated otherwise. Moving to a finer split
  // is a local slice; to a coarser one each device gathers what it lacks (and the gradient goes
  // back the other way).
  const ClusterSpec& c = *ctx.cluster;
  const TrainSettings& tr = ctx.train;
  auto batch_split = [](const LayerStrategy& s) { return safe(s.dp); };
  auto seq_split = [](const LayerStrategy& s) { return safe(s.cp) * safe(s.ulysses) * (s.sp ? safe(s.tp) : 1.0); };
  const double ba = batch_split(a), bb = batch_split(b), sa = seq_split(a), sb = seq_split(b);
  if (ba == bb && sa == sb) return Seconds(0);
  const double e = dtype_bytes(tr.dtype);
  const double whole = e * tr.pipeline_micro_batch() * tr.seq * static_cast<double>(ctx.model->hidden);
  const double common = whole / (std::max(ba, bb) * std::max(sa, sb));
  const double need_f = std::max(0.0, whole / (bb * sb) - common);
  const double need_b = std::max(0.0, whole / (ba * sa) - common);
  if (need_f <= 0 && need_b <= 0) return Seconds(0);
  const double na = ba * sa, nb = bb * sb;
  const int ratio = std::max(2, static_cast<int>(std::lround(std::max(na, nb) / std::min(na, nb))));
  const CommGroup g = place_group(c, ratio, std::max(1, ctx.stage_size / ratio));
  const double bw = group_bandwidth(g, c, opt_.comm).value();
  if (bw <= 0) return Seconds(0);
  const double lat = (opt_.comm.call_latency_us + c.intra.latency_us) * 1e-6;
  double t = 0;
  if (need_f > 0) t += lat + need_f / bw;
  if (need_b > 0) t += lat + need_b / bw;
  return Seconds(t);
}

Seconds AnalyticCostModel::p2p(const StageContext& ctx, const LayerStrategy& s) const {
  // §3.7 Activation forward and gradient backward across the boundary after ctx.stage, each tensor
  // parallel rank sending its 1/tp share (Megatron's scatter-gather; re-gathered when the layer has
  // no sequence parallelism).
  return Seconds(price_traffic(p2p_traffic(ctx, s), AnalyticPricer(*ctx.cluster, opt_.comm)).p2p);
}

StepCost AnalyticCostModel::step(const TrainSettings& train, const std::vector<StageSums>& stages) const {
  // §7 Pipeline: the step is the makespan of the event-level schedule (weft/cost/schedule.h):
  // every forward, backward and send of every stage and micro-batch in the order the schedule
  // prescribes, then each device group's gradient syncs (overlapping its last backwards when
  // enabled) and its optimizer update. For equal stages that is the textbook
  // (m + p - 1) * T of GPipe and 1F1B, m * T + (p - 1) * T / v interleaved, and
  // m * T + (p - 1) * (T_F + T_B - T_W) ZB-H1 (B and W of the backward split, StageSums::wgrad).
  // A ZB-H1 backward's B and W both count in the busy time below (bwd = B + W).
  StepCost out;
  const int n = static_cast<int>(stages.size());
  if (n == 0) return out;
  ScheduleSpec spec = schedule_spec(train, n, *this);
  spec.record_events = false;
  const int p = spec.pp;
  std::vector<StageTiming> timing;
  for (const StageSums& s : stages) timing.push_back(stage_timing(s));
  const Result<Simulation> sim = simulate_schedule(spec, timing);
  if (!sim.ok()) throw InputError("pipeline step: " + sim.error().message);
  // train.rounds schedules of spec.micro_batches each: every round but the last fills and drains
  // the pipeline without the gradient reduction and the update, which follow the last.
  const int rounds = std::max(1, train.rounds);
  const double m = static_cast<double>(spec.micro_batches) * rounds;

  // Overlapped sends (interleaved schedule) do not occupy the device.
  const double p2p_busy = spec.overlap_p2p ? 0.0 : 1.0;
  std::vector<double> busy(p, 0.0), opt(p, 0.0);
  auto group = [&](int s) { return stage_device_group(spec.schedule, p, s); };
  for (int s = 0; s < n; ++s) {
    busy[group(s)] += (stages[s].fwd + stages[s].bwd + p2p_busy * stages[s].p2p).value();
    opt[group(s)] += stages[s].optimizer.value();
  }
  int crit = 0, last = 0;
  double pipeline = 0, last_end = -1;
  for (int g = 0; g < p; ++g) {
    if (busy[g] > busy[crit]) crit = g;
    pipeline = std::max(pipeline, sim->compute_end_s[g]);
    const double end = sim->optimizer_start_s[g] + opt[g];
    if (end > last_end) last_end = end, last = g;
  }
  const double step = sim->makespan_s + (rounds - 1) * pipeline;
  pipeline *= rounds;

  out.step_time = Seconds(step);
  out.stage_time.resize(n);
  for (int s = 0; s < n; ++s) {
    out.stage_time[s] = (stages[s].fwd + stages[s].bwd + stages[s].p2p) * m + stages[s].grad_sync + stages[s].optimizer;
  }
  // Breakdown along the busiest device group: its per-micro-batch parts times m, then the bubble
  // (the rest of the pipeline), the exposed gradient reduction and the last group's optimizer.
  TimeBreakdown per_mb;
  Seconds dp_total;
  for (int s = 0; s < n; ++s) {
    if (group(s) != crit) continue;
    per_mb += stages[s].time;
    dp_total += stages[s].time.dp_comm;
  }
  if (spec.overlap_p2p) per_mb.p2p = Seconds(0);  // hidden behind computation
  out.time = per_mb.scaled(m);
  out.time.dp_comm = dp_total;
  out.time.bubble = Seconds(std::max(0.0, pipeline - m * busy[crit]));
  out.time.optimizer = Seconds(opt[last]);
  out.time.dp_exposed = Seconds(std::max(0.0, step - pipeline - opt[last]));
  return out;
}

}  // namespace weft