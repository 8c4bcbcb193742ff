// Galvatron's cost model (commit cea12ff) behind weft's CostModel interface. Formulas:
// reference/galvatron/SEARCH_AND_COST_MODEL.md §2; quirks and their reproduction: docs/galvatron.md.
#include "weft/galvatron/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "weft/core/format.h"

namespace weft::galvatron {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Galvatron's set_cost_models constants.
constexpr double kBctFctCoe = 2.0;          // backward = 2 x forward
constexpr double kContextMb = 1024.0;       // pytorch_context_mem, added to every stage
constexpr double kZeroNoise = 0.003;        // the epsilon in its ZeRO memory ratios
constexpr double kReserveAboveMb = 20 * 1024.0;  // 20 % is reserved as "PyTorch cache" above this

double mib_to_ms_factor(bool mixed) { return mixed ? 2.0 : 4.0; }  // bytes per activation element

LayerCost infeasible() {
  LayerCost c;
  c.fwd = c.bwd = Seconds(kInf);
  c.memory.other = Bytes(kInf);
  return c;
}

// Model states split in mixed-precision Adam proportions (2 B weights, 2 B grads, 12 B states per
// parameter) for display; Galvatron itself keeps one number.
void put_states(MemoryBreakdown& m, double states_mb) {
  m.weights += MiB(states_mb * 2.0 / 16.0);
  m.grads += MiB(states_mb * 2.0 / 16.0);
  m.optimizer += MiB(states_mb * 12.0 / 16.0);
}

}  // namespace

const char* to_string(TpSpMode m) {
  switch (m) {
    case TpSpMode::kAuto: return "auto";
    case TpSpMode::kTpOnly: return "tp_only";
    case TpSpMode::kSpOnly: return "sp_only";
    case TpSpMode::kTpWithSp: return "tp_with_sp";
  }
  return "?";
}

Result<TpSpMode> tp_sp_mode_from_string(const std::string& s) {
  for (TpSpMode m : {TpSpMode::kAuto, TpSpMode::kTpOnly, TpSpMode::kSpOnly, TpSpMode::kTpWithSp})
    if (s == to_string(m)) return m;
  return Error{ErrorKind::kBadInput, "tp_sp_mode: expected auto, tp_only, sp_only or tp_with_sp, got \"" + s + "\""};
}

Result<GStrategy> to_gstrategy(const LayerStrategy& s, int pp) {
  auto bad = [](const std::string& m) { return Error{ErrorKind::kBadInput, m}; };
  if (s.tp > 1 && s.ulysses > 1)
    return bad("tp=" + S(s.tp) + " and ulysses=" + S(s.ulysses) +
               " in one layer: Galvatron uses either tensor or Ulysses sequence parallelism per layer");
  if (s.cp > 1)
    return bad("cp=" + S(s.cp) + ": Galvatron's search disables context parallelism and its cost model has no "
               "context-parallel terms");
  if (s.zero == 1) return bad("zero=1: Galvatron has DDP, ZeRO-2 and ZeRO-3 only");
  if (s.recompute == Recompute::kSelective) return bad("selective recompute: Galvatron checkpoints whole layers only");
  if (s.ep > 1) return bad("ep=" + S(s.ep) + ": expert parallelism is outside Galvatron's dense-layer cost model");
  GStrategy g;
  g.pp = pp;
  g.tp = s.tp;
  g.sp = s.ulysses;
  g.dp = s.dp;
  g.megatron_sp = s.tp > 1 && s.sp;
  g.ckpt = s.recompute == Recompute::kFull;
  g.dp_type = s.zero == 3 ? GStrategy::kZero3 : s.zero == 2 ? GStrategy::kZero2 : GStrategy::kDdp;
  return g;
}

GalvatronCostModel::GalvatronCostModel(Profiles profiles, long long hidden_size, GalvatronOptions opt)
    : prof_(std::move(profiles)), hidden_(hidden_size), opt_(std::move(opt)) {}

// ---------------------------------------------------------------------------------------------
// Galvatron-native pieces

namespace {

// ZeRO memory ratios (MemoryCostModelBase): model states x r(d) for d = sdp.
double zero_ratio(GStrategy::DpType t, int d, int chunks, bool mixed, bool async_reduce) {
  const double x = 1.0 / d + kZeroNoise;
  if (t == GStrategy::kDdp) return 1.0;
  if (chunks == 1) {
    if (t == GStrategy::kZero2) return mixed ? 7.0 / 8 * x + 1.0 / 8 : 3.0 / 4 * x + 1.0 / 4;
    return x;
  }
  if (async_reduce) {
    if (t == GStrategy::kZero2) return mixed ? 6.0 / 8 * x + 2.0 / 8 : 2.0 / 4 * x + 2.0 / 4;
    return mixed ? 7.0 / 8 * x + 1.0 / 8 : 3.0 / 4 * x + 1.0 / 4;
  }
  if (t == GStrategy::kZero2) return mixed ? (7.0 / 8 * x + 1.0 / 8) * 5.0 / 4 : 3.0 / 4 * x + 1.0 / 4;
  return x * 5.0 / 4;
}

}  // namespace

LayerTimeMs GalvatronCostModel::layer_time(const GStrategy& g, int type, int layers_of_type,
                                           const TrainSettings& t) const {
  const bool mixed = prof_.mixed_precision();
  const auto& hw = prof_.hardware;
  LayerTimeMs r;
  const int lbsz = t.global_batch / t.micro_batches / g.dp;  // dp, not sdp (Galvatron's note)
  const double P = prof_.memory.layer_types.at(type).parameter_mb / g.tp;
  const double L = layers_of_type;
  const double S = t.seq;
  const double hidden = static_cast<double>(hidden_);
  // Static time mode: the first profiled batch size in file order (the bsz-1 point).
  const double T = prof_.compute.layer_types.at(type).first();
  // Every term is first computed for the whole layer type (x L) and divided by L at the end; only
  // the pipeline term is not multiplied, so each layer carries 1/L of it.
  r.fct = T * lbsz / g.tp_sp() * L;
  r.bct = r.fct * kBctFctCoe + (g.ckpt ? r.fct : 0.0);

  const int sdp = g.sdp();
  r.dp_msg_mb = 2.0 * (sdp - 1) * (P / sdp) * L;
  if (mixed) r.dp_msg_mb /= 2;
  const double fsdp_msg = r.dp_msg_mb * 0.5;
  if (sdp > 1) {
    const double bw = hw.busbw(sdp, g.tp == 1);  // "{sdp}_0" when tp > 1, else "{sdp}_1"
    r.dc = bw > 0 ? 1.0 / bw : kInf;
  }

  if (g.tp_sp() > 1) {
    double n;
    const CollectiveTable* table = nullptr;
    double scale = 1.0;
    if (g.tp == 1) {  // Ulysses: 2 all-to-alls forward, 2 backward
      n = 4 * L;
      auto it = hw.all2all_ms.find(g.sp);
      if (it != hw.all2all_ms.end()) table = &it->second;
    } else {  // Megatron TP: 6 all-gathers (attention 3, MLP 3)
      n = 6 * L;
      auto it = hw.allreduce_ms.find(g.tp);
      if (it != hw.allreduce_ms.end()) table = &it->second;
      scale = 0.5;  // all-gather time = all-reduce time / 2
    }
    if (g.ckpt) n *= 1.5;
    const double mb = lbsz * S * hidden * mib_to_ms_factor(mixed) / 1048576.0;
    r.tp_comm = table ? table->time_ms(mb) * scale * n : kInf;
  }

  double p2p_msg = 0, p2p_coe = 0;
  if (g.pp > 1) {
    auto it = hw.p2p_bw.find(g.pp);
    p2p_coe = it != hw.p2p_bw.end() ? 1.0 / it->second : kInf;
    p2p_msg = g.pp * 2.0 * lbsz * S * hidden * 4 / 1048576.0;
    if (mixed) p2p_msg /= 2;
  }

  const double coe = hw.overlap_coe;
  auto overlap = [&](double msg) {
    // bct_dp_overlap with dp_overlap_coe = bct_overlap_coe = coe: the overlapped part runs `coe`
    // times slower, the rest at full speed.
    const double dp = msg * r.dc;
    if (msg == 0) return r.bct;
    return std::max(r.bct, dp) + std::min(r.bct, dp) * (coe - 1.0);
  };
  auto result = [&](double factor) {
    double x;
    if (g.tp_sp() == 1 && g.dp > 1) x = r.fct + overlap(r.dp_msg_mb * factor);
    else if (g.dp == 1 && g.tp_sp() > 1) x = r.fct + r.bct + r.tp_comm;  // no gradient sync, even if sdp > 1
    else if (g.dp == 1 && g.tp_sp() == 1) x = r.fct + r.bct;
    else x = r.fct + overlap(r.dp_msg_mb * factor) + r.tp_comm;
    if (g.dp_type == GStrategy::kZero3) x += fsdp_msg * r.dc;  // forward all-gather, kept without sync
    if (g.pp > 1) x += p2p_msg * p2p_coe;
    return x / L;
  };
  r.zero3 = g.dp_type == GStrategy::kZero3 ? fsdp_msg * r.dc / L : 0.0;
  r.p2p = g.pp > 1 ? p2p_msg * p2p_coe / L : 0.0;
  r.sync = result(1.0);
  r.nosync = result(0.0);
  r.fct /= L;
  r.bct /= L;
  r.tp_comm /= L;
  r.dp_msg_mb /= L;
  return r;
}

MemoryMb GalvatronCostModel::layer_memory(const GStrategy& g, int type, const TrainSettings& t, int stage) const {
  const auto& lm = prof_.memory.layer_types.at(type);
  const int lbsz = t.global_batch / t.micro_batches / g.dp;
  int n = 1;
  if (g.pp > 1) n = t.schedule == Schedule::kGpipe ? t.micro_batches : g.pp - stage;
  MemoryMb m;
  m.states = 4.0 * lm.parameter_mb / g.tp *
             zero_ratio(g.dp_type, g.sdp(), t.micro_batches, prof_.mixed_precision(), opt_.async_grad_reduce);
  if (g.ckpt) {
    m.activation = lm.checkpoint_mb * lbsz * n;
    if (g.sp > 1 || (g.tp > 1 && g.megatron_sp)) m.activation /= g.tp_sp();
  } else {
    m.activation = lm.act(g.tp_sp(), prof_.memory.path) * lbsz * n;
  }
  return m;
}

EmbeddingTimeMs GalvatronCostModel::embedding_time(const GStrategy& g, const TrainSettings& t) const {
  const bool mixed = prof_.mixed_precision();
  const auto& hw = prof_.hardware;
  const int pp = g.pp;
  const int lbsz = t.global_batch / t.micro_batches / g.dp;
  const double fct_all = prof_.compute.other.first() * lbsz / g.tp_sp();
  // Data-parallel coefficient: ms per MB of the group's all-reduce, times (d-1)/d (bus -> algorithm).
  double dp_coe = 0;
  {
    const int d = g.sp == 1 ? g.dp : g.dp * g.sp;
    const bool consecutive = g.sp > 1 || g.tp == 1 || g.dp == 1;
    if (d > 1) {
      const double bw = hw.busbw(d, consecutive);
      dp_coe = bw > 0 ? 1.0 / bw * (d - 1) / d : kInf;
    }
  }
  // Gradient message: the "other" model states / 4 (fp32 parameter MB), halved in mixed precision.
  std::vector<double> msg;
  if (pp == 1) {
    msg.push_back(prof_.memory.pp_off.states(g.tp, prof_.memory.path) / 4);
  } else {
    msg.push_back(prof_.memory.pp_first.states(g.tp, prof_.memory.path) / 4);
    msg.push_back(prof_.memory.pp_last.states(g.tp, prof_.memory.path) / 4);
  }
  if (mixed)
    for (double& x : msg) x /= 2;
  const double ffrac = g.dp_type == GStrategy::kZero3 ? 0.5 : 0.0;
  const double bfrac = g.dp_type == GStrategy::kZero3 ? 1.0 : 0.5;
  // Megatron TP: one all-gather of the activations at each end (two ends on one stage when pp = 1).
  double tp_one = 0;
  if (g.sp == 1 && g.tp > 1) {
    auto it = hw.allreduce_ms.find(g.tp);
    const double mb = lbsz * static_cast<double>(t.seq) * hidden_ * mib_to_ms_factor(mixed) / 1048576.0;
    tp_one = it != hw.allreduce_ms.end() ? it->second.time_ms(mb) * 0.5 : kInf;
  }
  const double coe = hw.overlap_coe;
  auto overlap_time = [&](double fc, double fp, double bc, double bp, double tp) {
    fp *= coe;
    bp *= coe;
    const double f = fp > fc ? fc + (fp - fc) / coe : fc;
    const double b = bp > bc ? bc + (bp - bc) / coe : bc;
    return f + b + tp;
  };
  EmbeddingTimeMs out;
  out.sync.assign(pp, 0.0);
  out.nosync.assign(pp, 0.0);
  const int ends = pp == 1 ? 1 : 2;
  for (int e = 0; e < ends; ++e) {
    const double fct = pp == 1 ? fct_all : fct_all / 2;
    const double tp = pp == 1 ? 2 * tp_one : tp_one;
    const double m = msg[e] * dp_coe;
    const int stage = e == 0 ? 0 : pp - 1;
    out.sync[stage] = overlap_time(m * ffrac, fct, m * bfrac, fct * kBctFctCoe, tp);
    out.nosync[stage] = overlap_time(m * ffrac, fct, m * (bfrac - 0.5), fct * kBctFctCoe, tp);
  }
  return out;
}

std::vector<MemoryMb> GalvatronCostModel::embedding_memory(const GStrategy& g, const TrainSettings& t) const {
  const int pp = g.pp;
  const int lbsz = t.global_batch / t.micro_batches / g.dp;
  const double r =
      zero_ratio(g.dp_type, g.sdp(), t.micro_batches, prof_.mixed_precision(), opt_.async_grad_reduce);
  const std::string& path = prof_.memory.path;
  std::vector<MemoryMb> out(pp);
  if (pp == 1) {
    out[0].states = prof_.memory.pp_off.states(g.tp, path) * r;
    out[0].activation = prof_.memory.pp_off.act(g.tp_sp(), path) * lbsz;
  } else {
    const bool gpipe = t.schedule == Schedule::kGpipe;
    out[0].states = prof_.memory.pp_first.states(g.tp, path) * r;
    out[0].activation = prof_.memory.pp_first.act(g.tp_sp(), path) * lbsz * (gpipe ? t.micro_batches : pp);
    out[pp - 1].states = prof_.memory.pp_last.states(g.tp, path) * r;
    out[pp - 1].activation = prof_.memory.pp_last.act(g.tp_sp(), path) * lbsz * (gpipe ? t.micro_batches : 1);
  }
  for (auto& m : out) m.activation += 0;  // the 1024 MB context is added by the caller with the rounding
  return out;
}

int GalvatronCostModel::min_buffer_tp(const TrainSettings& t, int world) const {
  const int stage = world / t.pp;
  const int max_dp = std::min(t.global_batch / t.micro_batches, stage);
  return std::max(1, stage / std::max(1, max_dp));
}

double GalvatronCostModel::global_buffer_mb(const TrainSettings& t, int world, int buffer_tp) const {
  if (buffer_tp <= 0) return 0;
  const double dp_of_buffer = static_cast<double>(world / t.pp) / buffer_tp;
  // The element size is 4 bytes halved when `mixed_precision` is set; the flag is a string there,
  // so it is always truthy and the buffer is always halved (quirk, kept).
  return static_cast<double>(t.global_batch / t.micro_batches) / dp_of_buffer * hidden_ * t.seq * 4 / 1048576.0 / 2;
}

double GalvatronCostModel::pipeline_ms(const std::vector<double>& c, const std::vector<double>& r, int chunks) {
  const int pp = static_cast<int>(c.size());
  double sum = 0, rest = 0;
  for (int i = 0; i < pp; ++i) sum += c[i], rest += i > 0 ? c[i] : 0.0;
  double t = sum + c[pp - 1] * (chunks - 1);
  const double m = std::min(pp - 1, chunks - 1);
  t = std::max(t, std::max(m * c[0] / 3, rest / 3) + std::max(2 * m * c[0] / 3, 2 * rest / 3) +
                      c[0] * std::max(0, chunks + 1 - pp));
  double reduce = -kInf, prefix = 0;
  for (int i = 0; i < pp; ++i) {
    prefix += c[i];
    reduce = std::max(reduce, r[i] - prefix);
  }
  return t + std::max(0.0, reduce);
}

double GalvatronCostModel::inter_layer_s(const GStrategy& a, const GStrategy& b, const TrainSettings& t,
                                         int world) const {
  if (a.tp_sp() == b.tp_sp() || !(a.megatron_sp || b.megatron_sp)) return 0.0;
  const int G = std::max(a.tp_sp(), b.tp_sp());
  const double lbsz = static_cast<double>(t.global_batch) / t.micro_batches / (static_cast<double>(world / t.pp) / G);
  const double bw = prof_.hardware.busbw(G, true);
  const double coe = bw > 0 ? 1.0 / bw : 0.0;
  const double B = prof_.mixed_precision() ? 2 : 4;
  // Bytes times ms/MB times 1e-7: the unit factor Galvatron uses (quirk, kept).
  return (G - 1.0) / G * lbsz * t.seq * hidden_ * B * coe * 1e-7;
}

long long GalvatronCostModel::reserve_mb(const ClusterSpec& c) const {
  const double M = c.gpu.memory_gib * 1024.0;
  return M > kReserveAboveMb ? static_cast<long long>(0.2 * M) : 0;
}

// ---------------------------------------------------------------------------------------------
// The CostModel interface

bool GalvatronCostModel::allowed(const GStrategy& g, const TrainSettings& t, int world, std::string* why) const {
  auto no = [&](const std::string& m) {
    if (why) *why = m;
    return false;
  };
  if (t.schedule == Schedule::kZbV) return no("Galvatron has no zero-bubble (zb-v) schedule");
  if (t.schedule == Schedule::kInterleaved || t.vp != 1) return no("Galvatron has no interleaved schedule");
  if (t.schedule == Schedule::kZbH1 && t.pp > 1) return no("Galvatron has no zero-bubble (zb-h1) schedule");
  if (t.micro_batches < t.pp) return no("chunks < pp (Galvatron asserts chunks >= pp)");
  if (!opt_.strict_space) return true;
  if (g.tp > 1 && g.megatron_sp != opt_.sequence_parallel)
    return no(std::string("Megatron TP with sequence parallelism ") + (g.megatron_sp ? "on" : "off") +
              " while Galvatron's switch is " + (opt_.sequence_parallel ? "on" : "off"));
  if (g.dp == 1 && g.dp_type != GStrategy::kDdp) return no("ZeRO with dp = 1 (Galvatron uses DDP there)");
  if (g.dp > 1) {
    const bool ddp_default = opt_.default_dp_type == "ddp";
    if (g.dp_type == GStrategy::kDdp && !ddp_default) return no("DDP with dp > 1 under default_dp_type zero2");
    if (g.dp_type == GStrategy::kZero2 && ddp_default) return no("ZeRO-2 under default_dp_type ddp");
  }
  if (opt_.mode == TpSpMode::kTpOnly && g.sp > 1) return no("Ulysses in a tp_only task");
  if (opt_.mode == TpSpMode::kSpOnly && g.tp > 1) return no("Megatron TP in an sp_only task");
  if (opt_.mode != TpSpMode::kAuto && opt_.mode != TpSpMode::kSpOnly && opt_.global_buffer_tp > 0 &&
      g.tp_sp() > std::max(opt_.global_buffer_tp, min_buffer_tp(t, world)))
    return no("tp_sp above the task's buffer tp");
  return true;
}

int GalvatronCostModel::interface_buffer_tp(const TrainSettings& t, int world) const {
  if (opt_.mode == TpSpMode::kSpOnly) return 0;
  const int lo = min_buffer_tp(t, world);
  if (opt_.mode != TpSpMode::kAuto && opt_.global_buffer_tp > 0) return std::max(lo, opt_.global_buffer_tp);
  return std::max(lo, std::min(world / t.pp, opt_.max_tp_deg));  // upper bound over the tasks
}

LayerCost GalvatronCostModel::layer(const LayerContext& ctx, const LayerStrategy& s) const {
  auto gs = to_gstrategy(s, ctx.train.pp);
  if (!gs.ok()) return infeasible();
  const GStrategy& g = *gs;
  const int world = ctx.cluster->total_gpus();
  if (!allowed(g, ctx.train, world, nullptr)) return infeasible();
  const int type = ctx.model->group_of(ctx.layer);
  if (type >= static_cast<int>(prof_.compute.layer_types.size())) return infeasible();
  const int count = ctx.model->groups.at(type).count;
  const LayerTimeMs t = layer_time(g, type, count, ctx.train);
  if (!std::isfinite(t.sync)) return infeasible();
  const MemoryMb m = layer_memory(g, type, ctx.train, ctx.device_group());

  LayerCost c;
  c.fwd = ms(t.fct);
  c.bwd = ms(t.nosync - t.fct);
  c.grad_sync = ms(t.sync - t.nosync);
  c.time.compute = ms(t.fct * 3);
  c.time.recompute = ms(t.bct - 2 * t.fct);
  if (g.tp > 1) c.time.tp_comm = ms(t.tp_comm);
  else c.time.ulysses_comm = ms(t.tp_comm);
  c.time.zero3_gather = ms(t.zero3);
  c.time.p2p = ms(t.p2p);
  c.time.dp_comm = ms(t.dp_msg_mb * t.dc);
  put_states(c.memory, m.states);
  c.memory.activations = MiB(m.activation);
  // The DP counts each layer as ceil(states + activation) MB.
  c.memory.other = MiB(std::ceil(m.total()) - m.total());
  return c;
}

LayerCost GalvatronCostModel::stage_extra(const StageContext& ctx, const LayerStrategy& emb) const {
  const int world = ctx.cluster->total_gpus();
  const int stage = ctx.stage;
  const double buffer = std::floor(global_buffer_mb(ctx.train, world, interface_buffer_tp(ctx.train, world)));
  LayerCost c;
  const bool end = stage == 0 || stage == ctx.train.pp - 1;
  if (!end) {
    c.memory.other = MiB(kContextMb + buffer);
    return c;
  }
  auto gs = to_gstrategy(emb, ctx.train.pp);
  if (!gs.ok() || !allowed(*gs, ctx.train, world, nullptr) || gs->ckpt) return infeasible();
  const EmbeddingTimeMs t = embedding_time(*gs, ctx.train);
  const std::vector<MemoryMb> m = embedding_memory(*gs, ctx.train);
  const double nosync = t.nosync[stage];
  if (!std::isfinite(nosync)) return infeasible();
  const double fct = prof_.compute.other.first() * (ctx.train.global_batch / ctx.train.micro_batches / gs->dp) /
                     gs->tp_sp() / (ctx.train.pp == 1 ? 1 : 2);
  c.fwd = ms(std::min(fct, nosync));
  c.bwd = ms(nosync) - c.fwd;
  // Only the no-sync embedding time enters pipeline_costmodel: its gradient sync is never charged.
  c.time.embedding = ms(nosync);
  put_states(c.memory, m[stage].states);
  c.memory.activations = MiB(m[stage].activation);
  const double total = m[stage].total() + kContextMb;
  c.memory.other = MiB(kContextMb + (std::ceil(total) - total) + buffer);
  return c;
}

Seconds GalvatronCostModel::transition(const LayerContext&, const LayerStrategy&, const LayerStrategy&) const {
  return Seconds(0);
}

Seconds GalvatronCostModel::p2p(const StageContext&, const LayerStrategy&) const { return Seconds(0); }

StepCost GalvatronCostModel::step(const TrainSettings& train, const std::vector<StageSums>& stages) const {
  const int n = static_cast<int>(stages.size());
  std::vector<double> c(n), r(n);
  for (int i = 0; i < n; ++i) {
    const auto& s = stages[i];
    c[i] = (s.fwd + s.bwd + s.p2p).value();
    r[i] = c[i] - s.time.embedding.value() + s.grad_sync.value();
  }
  StepCost out;
  if (n == 0) return out;
  const int chunks = train.micro_batches;
  out.step_time = Seconds(pipeline_ms(c, r, chunks));  // the formula is unit-free: seconds in, seconds out
  double reduce = 0, prefix = 0;
  for (int i = 0; i < n; ++i) {
    prefix += c[i];
    reduce = std::max(reduce, r[i] - prefix);
    out.stage_time.push_back(Seconds(c[i] * chunks) + stages[i].grad_sync);
  }
  // Per-step breakdown: the last stage's micro-batch work times chunks (the term that dominates the
  // formula), the exposed reduction, and the rest as bubble.
  out.time = stages[n - 1].time.scaled(chunks);
  out.time.dp_exposed = Seconds(reduce);
  const Seconds busy = Seconds(c[n - 1] * chunks + reduce);
  out.time.bubble = out.step_time > busy ? out.step_time - busy : Seconds(0);
  return out;
}

Bytes GalvatronCostModel::memory_budget(const ClusterSpec& cl) const {
  const double M = std::floor(cl.gpu.memory_gib * 1024.0);
  return MiB(M - static_cast<double>(reserve_mb(cl)) - 1);
}

// ---------------------------------------------------------------------------------------------
// Exact plan accounting

Result<GalvatronEstimate> GalvatronCostModel::estimate_plan(const Plan& p) const {
  return catch_errors([&]() -> GalvatronEstimate {
    const TrainSettings& t = p.train;
    const int world = p.world_size();
    const int pp = t.pp;
    require(t.schedule != Schedule::kZbV, "train.schedule: Galvatron has no zero-bubble (zb-v) schedule");
    require(t.schedule != Schedule::kInterleaved && t.vp == 1,
            "train.schedule: Galvatron has no interleaved schedule (vp=" + S(t.vp) + ")");
    require(t.micro_batches >= pp, "train.micro_batches: Galvatron needs chunks >= pp (chunks=" +
                                       S(t.micro_batches) + ", pp=" + S(pp) + ")");
    require(static_cast<int>(p.stages.size()) == pp, "stages: " + S(p.stages.size()) + " stages for pp=" + S(pp));
    require(p.model.groups.size() <= prof_.compute.layer_types.size(),
            "model: " + S(p.model.groups.size()) + " layer groups but the computation profile " +
                prof_.compute.path + " has " + S(prof_.compute.layer_types.size()) + " layer types");
    require(t.seq == prof_.compute.seq, "train.seq: " + S(t.seq) + " but the profiles are for sequence length " +
                                            S(prof_.compute.seq));

    // Convert every strategy; collect what the tasks depend on.
    bool any_ulysses = false, any_tp = false;
    int tp_sp_max = 1;
    int sp_flag = -1;  // Megatron-SP is one global flag in Galvatron
    auto convert = [&](const LayerStrategy& s, const std::string& where) {
      auto g = to_gstrategy(s, pp);
      if (!g.ok()) throw InputError(where + ": " + g.error().message);
      any_ulysses = any_ulysses || g->sp > 1;
      any_tp = any_tp || g->tp > 1;
      tp_sp_max = std::max(tp_sp_max, g->tp_sp());
      if (g->tp > 1) {
        if (sp_flag >= 0 && sp_flag != static_cast<int>(g->megatron_sp))
          throw InputError(where + ".sp: Megatron sequence parallelism is one global switch in Galvatron; the plan "
                                   "mixes tp layers with and without it");
        sp_flag = g->megatron_sp;
      }
      return *g;
    };
    std::vector<std::vector<GStrategy>> gs(pp);
    for (int s = 0; s < pp; ++s)
      for (int i = 0; i < p.stages[s].num_layers(); ++i)
        gs[s].push_back(convert(p.stages[s].layers[i], "stages[" + S(s) + "].layers[" + S(i) + "]"));
    const GStrategy ge = convert(p.embedding, "embedding");
    require(!ge.ckpt, "embedding.recompute: Galvatron does not checkpoint the embedding / LM head");

    // Time: independent of the task.
    std::vector<double> c(pp), r(pp);
    const EmbeddingTimeMs et = embedding_time(ge, t);
    GalvatronEstimate e;
    e.stages.resize(pp);
    for (int s = 0; s < pp; ++s) {
      auto& f = e.stages[s];
      for (int i = 0; i < p.stages[s].num_layers(); ++i) {
        const int layer = p.stages[s].first_layer + i;
        const int type = p.model.group_of(layer);
        const LayerTimeMs lt = layer_time(gs[s][i], type, p.model.groups[type].count, t);
        f.layers_nosync_ms += lt.nosync;
        f.layers_sync_ms += lt.sync;
        f.layers_mb += static_cast<long long>(std::ceil(layer_memory(gs[s][i], type, t, s).total()));
      }
      f.embedding_ms = et.nosync[s];
      c[s] = f.layers_nosync_ms + f.embedding_ms;
      r[s] = f.layers_sync_ms;
    }
    for (double x : c)
      if (!std::isfinite(x))
        throw InputError("galvatron profiles: a bandwidth or collective table this plan needs is missing from " +
                         prof_.hardware.allreduce_path + " / " + prof_.hardware.sp_time_path + " / " +
                         prof_.hardware.p2p_path);
    e.iteration_s = pipeline_ms(c, r, t.micro_batches) / 1000.0;
    e.samples_per_s = t.global_batch / e.iteration_s;

    // Memory: the task decides the buffer. Galvatron's task order is tp_only, sp_only, tp_with_sp and
    // buffer sizes ascending; with equal times the first task that holds the plan wins.
    e.memory_mb = static_cast<long long>(std::floor(p.cluster.gpu.memory_gib * 1024.0));
    e.reserve_mb = reserve_mb(p.cluster);
    e.budget_mb = e.memory_mb - e.reserve_mb;
    const std::vector<MemoryMb> em = embedding_memory(ge, t);
    std::vector<TpSpMode> modes;
    if (opt_.mode != TpSpMode::kAuto) {
      modes.push_back(opt_.mode);
    } else {
      if (!any_ulysses) modes.push_back(TpSpMode::kTpOnly);
      if (!any_tp) modes.push_back(TpSpMode::kSpOnly);
      modes.push_back(TpSpMode::kTpWithSp);
    }
    const int buffer_tp = std::max({min_buffer_tp(t, world), tp_sp_max, opt_.global_buffer_tp});
    std::optional<GalvatronEstimate> fallback;
    for (TpSpMode mode : modes) {
      GalvatronEstimate trial = e;
      trial.mode = mode;
      trial.buffer_tp = mode == TpSpMode::kSpOnly ? 0 : buffer_tp;
      const long long buffer = static_cast<long long>(global_buffer_mb(t, world, trial.buffer_tp));
      trial.fits = true;
      for (int s = 0; s < pp; ++s) {
        auto& f = trial.stages[s];
        f.embedding_mb = static_cast<long long>(std::ceil(em[s].total() + kContextMb));
        f.buffer_mb = buffer;
        f.used_mb = f.layers_mb + f.embedding_mb + f.buffer_mb;
        f.galvatron_mb = f.used_mb + trial.reserve_mb;
        f.fits = f.used_mb <= trial.budget_mb - 1;
        trial.fits = trial.fits && f.fits;
      }
      if (trial.fits) return trial;
      if (!fallback) fallback = trial;
    }
    e = *fallback;
    return e;
  });
}

Result<Estimate> GalvatronCostModel::estimate(const Plan& p) const {
  auto g = estimate_plan(p);
  if (!g.ok()) return g.error();
  // Breakdowns and stage times from the interface, with the task fixed to the plan's own and every
  // strategy the formulas cover admitted.
  GalvatronOptions o = opt_;
  o.mode = g->mode;
  o.global_buffer_tp = g->buffer_tp;
  o.strict_space = false;
  const GalvatronCostModel exact(prof_, hidden_, o);
  Estimate e = weft::estimate(p, exact);
  e.step_time = Seconds(g->iteration_s);
  e.fits = g->fits;
  e.memory_budget = MiB(static_cast<double>(g->budget_mb - 1));
  e.peak_memory = Bytes(0);
  for (size_t s = 0; s < g->stages.size() && s < e.stages.size(); ++s) {
    const auto& f = g->stages[s];
    MemoryBreakdown& m = e.stages[s].memory;
    // Replace the interface's upper-bound buffer by the plan's own.
    m.other = MiB(static_cast<double>(f.used_mb)) - (m.weights + m.grads + m.optimizer + m.activations);
    e.stages[s].fits = f.fits;
    e.peak_memory = std::max(e.peak_memory, MiB(static_cast<double>(f.used_mb)));
  }
  const double tokens = static_cast<double>(p.train.global_batch) * p.train.seq;
  e.tokens_per_s = tokens / g->iteration_s;
  return e;
}

Json to_json(const GalvatronEstimate& e) {
  Json j;
  j["iteration_time_s"] = e.iteration_s;
  j["samples_per_s"] = e.samples_per_s;
  j["tp_sp_mode"] = to_string(e.mode);
  j["global_buffer_tp"] = e.buffer_tp;
  j["memory_constraint_mb"] = e.memory_mb;
  j["reserve_mb"] = e.reserve_mb;
  j["budget_mb"] = e.budget_mb;
  j["fits"] = e.fits;
  Json stages = Json::array();
  for (size_t s = 0; s < e.stages.size(); ++s) {
    const auto& f = e.stages[s];
    stages.push_back(Json{{"index", s},
                          {"memory_mb", f.galvatron_mb},
                          {"used_mb", f.used_mb},
                          {"layers_mb", f.layers_mb},
                          {"embedding_mb", f.embedding_mb},
                          {"buffer_mb", f.buffer_mb},
                          {"layers_nosync_ms", f.layers_nosync_ms},
                          {"layers_sync_ms", f.layers_sync_ms},
                          {"embedding_ms", f.embedding_ms},
                          {"fits", f.fits}});
  }
  j["stages"] = std::move(stages);
  return j;
}

}  // namespace weft::galvatron
