// A layer's traffic, term by term (docs/cost-model.md §3 and §5.3; docs/profiles.md for the
// runtime's extras). Byte counts keep the arithmetic of the formulas they came from, so that the
// cost models pricing them reproduce their figures bit for bit.
#include "weft/cost/traffic.h"

#include <algorithm>
#include <numeric>

#include "weft/cost/memory.h"
#include "weft/spec/counts.h"

namespace weft {

double moe_copies_per_crossing(const MoeSpec& moe, const CommGroup& g) {
  if (!moe.enabled() || !g.spans_nodes() || moe.top_k <= 0) return 1;
  const double E = moe.experts, k = moe.top_k;
  const double per_node = E * g.ranks_per_node / g.size;  // experts on one node of the group
  // P(none of a token's k distinct experts is on a given node) = C(E - per_node, k) / C(E, k).
  double none = 1;
  for (int i = 0; i < moe.top_k; ++i) none *= std::max(0.0, (E - per_node - i) / (E - i));
  const double crossings = 1 - none;
  return crossings > 0 ? k * per_node / E / crossings : 1;
}

namespace {

double safe(int x) { return static_cast<double>(std::max(1, x)); }

CollectiveCall call(Collective k, Bytes bytes, const CommGroup& g, double times = 1) {
  return CollectiveCall{k, bytes, g, times};
}

// Appends transfers to a list.
struct Builder {
  LayerTraffic& out;
  void add(CommAxis axis, Phase phase, Overlap overlap, double repeat, const CallList& calls) {
    out.transfers.push_back(Transfer{axis, phase, overlap, repeat, calls});
  }
  // The same calls in forward and again in backward.
  void both(CommAxis axis, double repeat, const CallList& calls) {
    add(axis, Phase::kForward, Overlap::kNone, repeat, calls);
    add(axis, Phase::kBackward, Overlap::kNone, repeat, calls);
  }
};

// The two ranks of a pipeline boundary or a tied-embedding pair: on one node or on two.
CommGroup pair_group(bool cross_nodes) {
  CommGroup pair;
  pair.size = 2;
  pair.ranks_per_node = cross_nodes ? 1 : 2;
  return pair;
}

}  // namespace

double kv_heads_held(const LayerShape& L, const LayerStrategy& s) {
  const int tp = std::max(1, s.tp), kv = L.kv_heads > 0 ? L.kv_heads : std::max(1, L.heads);
  return kv % tp == 0 ? kv / tp : 1;
}

double ulysses_kv_heads(const LayerShape& L, const LayerStrategy& s) {
  const long long held = static_cast<long long>(kv_heads_held(L, s)), u = std::max(1, s.ulysses);
  return static_cast<double>(held % u == 0 ? held : std::lcm(held, u));
}

const char* to_string(CommAxis a) {
  switch (a) {
    case CommAxis::kTensor: return "tensor";
    case CommAxis::kUlysses: return "ulysses";
    case CommAxis::kContext: return "context";
    case CommAxis::kExpert: return "expert";
    case CommAxis::kData: return "data";
    case CommAxis::kPipeline: return "pipeline";
  }
  return "?";
}

TrafficOptions runtime_traffic(DType wire) {
  return TrafficOptions{.dtype = wire,
                        .replicated_grad_sums = true,
                        .zero3_backward_gather = true,  // the runtime frees gathered weights after a
                                                        // layer's forward and gathers them again
                        .per_tensor_edges = true,
                        .layout_p2p = true};
}

HeldParams held_params(const LayerShape& L, const LayerStrategy& s) {
  const double t = safe(s.tp), ep = safe(s.ep);
  const LayerParams lp = layer_params(L);
  const double expert_total = L.moe.enabled() ? L.moe.experts * expert_params(L) : 0.0;
  const double hidden = static_cast<double>(L.hidden);
  // Replicated over tp, not split: the biases added after a row-parallel GEMM (the attention output
  // projection's, and the dense FFN's output bias), and with more tp ranks than kv heads the K/V
  // projections of the one kv head each rank holds beyond its 1/tp share.
  const double blocks = L.kind == LayerKind::kCrossDecoder ? 2 : 1;
  const double row_biases = L.bias ? hidden * (blocks + (L.moe.enabled() ? 0 : 1)) : 0.0;
  const double kv_extra = blocks * 2.0 * L.head_dim * (hidden + (L.bias ? 1 : 0)) *
                          (kv_heads_held(L, s) - (L.kv_heads > 0 ? L.kv_heads : L.heads) / t);
  // Multi-head latent attention's down projections and latent norms, whole on every rank.
  const double replicated = blocks * attention_replicated_params(L);
  HeldParams h;
  h.dense = (lp.attention + lp.ffn - expert_total - row_biases - replicated) / t + lp.norms + row_biases + kv_extra +
            replicated;
  h.expert = expert_total / (safe(s.expert_tp()) * ep);
  h.shard = s.shard_group();
  h.expert_shard = std::max(1, s.expert_shard_group());
  return h;
}

LayerTraffic layer_traffic(const LayerContext& ctx, const LayerStrategy& s, const TrafficOptions& o) {
  const LayerShape& L = ctx.shape();
  const ClusterSpec& c = *ctx.cluster;
  const TrainSettings& tr = ctx.train;
  const DType dtype = o.dtype.value_or(tr.dtype);
  const double e = dtype_bytes(dtype);
  const double t = safe(s.tp), u = safe(s.ulysses), cp = safe(s.cp), dp = safe(s.dp);
  const double samples = tr.pipeline_micro_batch() / dp;
  const double tokens = samples * tr.seq / (u * cp);
  const double h = static_cast<double>(L.hidden);
  const AttentionWidths aw = attention_widths(L);
  const double q = aw.q;
  const double kv = static_cast<double>(L.kv_heads) * L.head_dim;  // K's width (and V's without MLA)
  const double blocks = L.kind == LayerKind::kCrossDecoder ? 2 : 1;
  const bool moe = L.moe.enabled();
  LayerTraffic out;
  Builder b{out};

  // §3.1 Tensor parallel: per attention block and FFN one all-reduce, or with sequence parallelism
  // an all-gather + reduce-scatter pair; the same again in backward. The runtime also sums the
  // gradients of weights replicated over the group.
  if (s.tp > 1) {
    const CommGroup g = place_group(c, s.tp, 1);
    const Bytes act(e * tokens * h);
    const CallList per = s.sp ? CallList{call(Collective::kAllGather, act, g), call(Collective::kReduceScatter, act, g)}
                              : CallList{call(Collective::kAllReduce, act, g)};
    // A MoE layer's FFN: the shared experts' pair; the routed experts' exchange is §3.4's (the
    // same pair over tp where the experts' grid is tp's and the tokens stay put: ep 1, etp tp).
    const bool expert_pair = moe && s.ep == 1 && s.expert_tp() == s.tp;
    b.both(CommAxis::kTensor, blocks + (!moe || expert_pair || L.moe.shared_experts > 0 ? 1 : 0), per);
    if (o.replicated_grad_sums) {
      if (s.sp) {  // norm weights and biases, copied to every rank of the group
        const double norm_tensors = (ctx.model->norm == NormKind::kLayerNorm ? 2.0 : 1.0) * (blocks + 1);
        const double bias_tensors = L.bias ? blocks + 1 : 0.0;
        b.add(CommAxis::kTensor, Phase::kBackward, Overlap::kNone, norm_tensors + bias_tensors,
              {call(Collective::kAllReduce, Bytes(e * h), g)});
      }
      if (L.kv_heads % s.tp != 0) {  // K/V weights replicated over a kv group (tp > kv heads)
        const int rep = s.tp / std::max(1, L.kv_heads);
        if (rep > 1) {
          const Bytes kv_weights(e * 2 * L.head_dim * h * (L.bias ? 1.0 + 1.0 / h : 1.0));
          b.add(CommAxis::kTensor, Phase::kBackward, Overlap::kNone, blocks,
                {call(Collective::kAllReduce, kv_weights, place_group(c, rep, 1))});
        }
      }
    }
  }
  // §3.2 Ulysses: all-to-all of Q, K, V in and of the context out, per attention block. K and V
  // move as whole heads: a rank holding fewer kv heads than the Ulysses degree sends copies
  // (lcm(kv heads held, ulysses) heads).
  if (s.ulysses > 1) {
    const CommGroup g = place_group(c, s.ulysses, s.tp);
    const double kv_sent = ulysses_kv_heads(L, s) * L.head_dim;
    // Q in and the context out; K and V in (MLA: V of v_head_dim per head).
    const double v_sent = L.mla.enabled() ? ulysses_kv_heads(L, s) * L.mla.v_head_dim : kv_sent;
    b.both(CommAxis::kUlysses, blocks,
           {call(Collective::kAllToAll, Bytes(e * tokens * (q + aw.ctx) / (2 * t)), g, 2),
            call(Collective::kAllToAll, Bytes(e * tokens * (kv_sent + v_sent) / 2), g, 2)});
  }
  // §3.3 Context parallel: cp - 1 ring steps pass the K,V block on, each behind the attention of
  // the block in hand; backward passes K,V and their gradients.
  if (s.cp > 1) {
    const CommGroup g = place_group(c, s.cp, s.tp * s.ulysses);
    const Bytes kv_bytes(e * tokens * (kv + aw.v) / t);
    b.add(CommAxis::kContext, Phase::kForward, Overlap::kRingStep, blocks * (cp - 1),
          {call(Collective::kSendRecv, kv_bytes, g)});
    b.add(CommAxis::kContext, Phase::kBackward, Overlap::kRingStep, blocks * (cp - 1),
          {call(Collective::kSendRecv, kv_bytes * 2.0, g)});
  }
  // §3.4 Expert parallel, as Megatron-LM's all-to-all dispatcher: each rank dispatches the routed
  // copies of its tp-th of the tokens (its sequence shard) by an all-to-all over the ep group
  // (stride etp on the experts' grid), then the etp group all-gathers what its ranks received;
  // combine is the reverse (reduce-scatter, all-to-all); backward the same again. With ep 1 the etp
  // group gathers the tokens themselves (one copy each). Without sequence parallelism the tp ranks
  // hold the whole sequence: the experts' output is all-gathered back over tp in each pass.
  if (moe) {
    const int et = s.expert_tp();
    const double own = tokens / t;  // tokens a rank dispatches
    // Uneven routing (train.moe_imbalance): the busiest rank receives that many times the mean, and
    // the exchange lasts as long as its part.
    const double busiest = tr.busiest_expert_rank(s.ep);
    if (s.ep > 1) {
      CommGroup g = place_group(c, s.ep, et);
      if (tr.moe_dispatcher != MoeDispatcher::kAllToAll) g.copies_per_crossing = moe_copies_per_crossing(L.moe, g);
      b.both(CommAxis::kExpert, 1, {call(Collective::kAllToAll, Bytes(e * own * L.moe.top_k * h * busiest), g, 2)});
    }
    if (et > 1 && !(s.ep == 1 && et == s.tp)) {
      const double rows = s.ep > 1 ? own * L.moe.top_k * et * busiest : own * et;
      const CommGroup g = place_group(c, et, 1);
      b.both(CommAxis::kExpert, 1,
             {call(Collective::kAllGather, Bytes(e * rows * h), g), call(Collective::kReduceScatter, Bytes(e * rows * h), g)});
    }
    if (s.tp > 1 && !s.sp && !(s.ep == 1 && et == s.tp))
      b.both(CommAxis::kExpert, 1, {call(Collective::kAllGather, Bytes(e * tokens * h), place_group(c, s.tp, 1))});
  }

  // §3.5 Data parallel / ZeRO over the ranks holding this shard; experts over their expert
  // data-parallel group (devices / (etp * ep), stride etp * ep).
  const HeldParams hp = held_params(L, s);
  const StateBytes per_param = state_bytes_per_param(dtype, tr.optimizer);
  const double wbytes = per_param.weights, gbytes = per_param.grads;
  const CommGroup dgroup = place_group(c, hp.shard, s.tp);
  const CommGroup egroup = place_group(c, hp.expert_shard, s.expert_tp() * s.ep);
  auto dense_and_experts = [&](Collective k, double bytes_per_param) {
    CallList calls{call(k, Bytes(bytes_per_param * hp.dense), dgroup)};
    if (moe) calls.push_back(call(k, Bytes(bytes_per_param * hp.expert), egroup));
    return calls;
  };
  const auto step = [&](Collective k, double bpp) {
    b.add(CommAxis::kData, Phase::kStep, Overlap::kBackward, 1, dense_and_experts(k, bpp));
  };
  const auto each = [&](Phase ph, Collective k, double bpp) {
    b.add(CommAxis::kData, ph, Overlap::kCompute, 1, dense_and_experts(k, bpp));
  };
  switch (s.zero) {
    case 0: step(Collective::kAllReduce, gbytes); break;
    case 1:
      step(Collective::kReduceScatter, gbytes);
      step(Collective::kAllGather, wbytes);
      break;
    case 2:
      each(Phase::kBackward, Collective::kReduceScatter, gbytes);
      step(Collective::kAllGather, wbytes);
      break;
    default:
      each(Phase::kBackward, Collective::kReduceScatter, gbytes);
      each(Phase::kForward, Collective::kAllGather, wbytes);
      if (o.zero3_backward_gather || s.recompute == Recompute::kFull)
        each(Phase::kBackward, Collective::kAllGather, wbytes);
      break;
  }
  return out;
}

InlineList<double, 4> edge_param_buckets(const StageContext& ctx, const LayerStrategy& emb, const TrafficOptions& o) {
  const ModelSpec& model = *ctx.model;
  const double t = safe(emb.tp);
  const double h = static_cast<double>(model.hidden), vocab = static_cast<double>(model.vocab);
  const bool learned = model.position == PositionKind::kLearned;
  // The last stage keeps its own copy of a tied table unless the first stage's is on its device
  // group (zb-v puts both on group 0).
  const bool tied_copy = model.tied_embeddings && !ctx.first() &&
                         stage_group(ctx.train, 0) != stage_group(ctx.train, ctx.num_stages - 1);
  if (!o.per_tensor_edges) {
    double params = 0;
    if (ctx.first()) params += vocab * h / t + (learned ? model.max_seq * h : 0.0);
    if (ctx.last()) {
      params += h * (model.norm == NormKind::kLayerNorm ? 2 : 1);
      if (!model.tied_embeddings || tied_copy) params += vocab * h / t;  // head (or its tied copy)
    }
    if (params > 0) return {params};
    return {};
  }
  InlineList<double, 4> units;
  if (ctx.first()) {
    units.push_back(vocab * h / t);
    if (learned) units.push_back((model.max_seq > 0 ? model.max_seq : ctx.train.seq) * h);
  }
  if (ctx.last()) {
    double head = (model.norm == NormKind::kLayerNorm ? 2.0 : 1.0) * h;
    if (!model.tied_embeddings) head += vocab * h / t;
    units.push_back(head);
    if (tied_copy) units.push_back(vocab * h / t);  // the tied copy
  }
  return units;
}

LayerTraffic edge_traffic(const StageContext& ctx, const LayerStrategy& emb, const TrafficOptions& o) {
  LayerTraffic out;
  Builder b{out};
  if (!ctx.first() && !ctx.last()) return out;
  const ModelSpec& model = *ctx.model;
  const ClusterSpec& c = *ctx.cluster;
  const TrainSettings& tr = ctx.train;
  const DType dtype = o.dtype.value_or(tr.dtype);
  const double e = dtype_bytes(dtype);
  const double t = safe(emb.tp), u = safe(emb.ulysses), cp = safe(emb.cp), dp = safe(emb.dp);
  const double samples = tr.pipeline_micro_batch() / dp;
  const double tokens = samples * tr.seq / (u * cp);
  const double h = static_cast<double>(model.hidden), vocab = static_cast<double>(model.vocab);
  const CommGroup tg = place_group(c, emb.tp, 1);
  const Bytes act(e * tokens * h);
  const double norm_tensors = model.norm == NormKind::kLayerNorm ? 2.0 : 1.0;
  auto tensor = [&](Phase ph, const CallList& calls) { b.add(CommAxis::kTensor, ph, Overlap::kNone, 1, calls); };

  if (ctx.first() && emb.tp > 1) {  // vocab-parallel lookup: partial rows summed (reduce-scattered with SP)
    tensor(Phase::kForward, {call(emb.sp ? Collective::kReduceScatter : Collective::kAllReduce, act, tg)});
    if (emb.sp) tensor(Phase::kBackward, {call(Collective::kAllGather, act, tg)});
    if (emb.sp && o.replicated_grad_sums && model.position == PositionKind::kLearned) {
      const double P = model.max_seq > 0 ? model.max_seq : tr.seq;  // the replicated position table
      tensor(Phase::kBackward, {call(Collective::kAllReduce, Bytes(e * P * h), tg)});
    }
  }
  if (ctx.last() && emb.tp > 1) {
    // input copied to (or with SP gathered on) every rank; max, exp-sum and target logit summed
    if (emb.sp) {
      tensor(Phase::kForward, {call(Collective::kAllGather, act, tg)});
      CallList back{call(Collective::kReduceScatter, act, tg)};
      if (o.replicated_grad_sums) back.push_back(call(Collective::kAllReduce, Bytes(e * h), tg, norm_tensors));
      tensor(Phase::kBackward, back);
    } else {
      tensor(Phase::kBackward, {call(Collective::kAllReduce, act, tg)});
    }
    tensor(Phase::kForward, {call(Collective::kAllReduce, Bytes(4 * tokens), tg, 3)});
  }

  // Gradient reduction of each bucket: without per_tensor_edges once per step, all-reduced (ZeRO 0)
  // or reduce-scattered and the weights all-gathered; per tensor as for layers (§3.5).
  const StateBytes sb = state_bytes_per_param(dtype, tr.optimizer);
  const int shard = emb.shard_group();
  const CommGroup dg = place_group(c, shard, emb.tp);
  auto data = [&](Phase ph, Overlap ov, const CallList& calls) { b.add(CommAxis::kData, ph, ov, 1, calls); };
  const InlineList<double, 4> buckets = edge_param_buckets(ctx, emb, o);
  for (double n : buckets) {
    const CollectiveCall ar = call(Collective::kAllReduce, Bytes(sb.grads * n), dg);
    const CollectiveCall rs = call(Collective::kReduceScatter, Bytes(sb.grads * n), dg);
    const CollectiveCall ag = call(Collective::kAllGather, Bytes(sb.weights * n), dg);
    const int zero = o.per_tensor_edges ? emb.zero : std::min(emb.zero, 1);
    switch (zero) {
      case 0: data(Phase::kStep, Overlap::kBackward, {ar}); break;
      case 1: data(Phase::kStep, Overlap::kBackward, {rs, ag}); break;
      case 2:
        data(Phase::kBackward, Overlap::kCompute, {rs});
        data(Phase::kStep, Overlap::kBackward, {ag});
        break;
      default:
        data(Phase::kForward, Overlap::kCompute, {ag});
        data(Phase::kBackward, Overlap::kCompute, {rs});
        break;
    }
  }
  // Tied embeddings split over the first and last stage: their gradients are summed between the
  // two (Megatron's embedding group); under zb-v both are on device group 0, one table.
  if (!buckets.empty() && model.tied_embeddings && ctx.num_stages > 1 &&
      stage_group(tr, 0) != stage_group(tr, ctx.num_stages - 1)) {
    const int span = ctx.stage_size * std::max(0, tr.pp - 1);
    double bytes = sb.grads * vocab * h / t;
    if (o.per_tensor_edges && emb.zero >= 2) bytes = bytes / safe(shard);
    data(Phase::kStep, Overlap::kBackward, {call(Collective::kAllReduce, Bytes(bytes), pair_group(span >= c.gpus_per_node))});
  }
  return out;
}

LayerTraffic p2p_traffic(const StageContext& ctx, const LayerStrategy& s, const TrafficOptions& o) {
  LayerTraffic out;
  Builder b{out};
  if (ctx.num_stages <= 1) return out;
  const ClusterSpec& c = *ctx.cluster;
  const TrainSettings& tr = ctx.train;
  const DType dtype = o.dtype.value_or(tr.dtype);
  const int S = std::max(1, ctx.stage_size), G = std::max(1, c.gpus_per_node);
  const int g1 = stage_group(tr, ctx.stage), g2 = stage_group(tr, ctx.stage + 1);
  if (g1 == g2) return out;  // a hand-off within the device group (zb-v's turn): nothing sent
  const CommGroup pair = pair_group(S >= G || (g1 * S) / G != (g2 * S) / G);
  CallList calls;
  if (o.layout_p2p) {
    // The boundary layer's output block: batch split by dp, sequence by ulysses (x tp with SP).
    const int seq_parts = s.ulysses * (s.sp ? s.tp : 1);
    const double block = dtype_bytes(dtype) * tr.pipeline_micro_batch() / s.dp * tr.seq / seq_parts *
                         static_cast<double>(ctx.model->hidden);
    calls.push_back(call(Collective::kSendRecv, Bytes(block), pair));
  } else {
    const double e = dtype_bytes(dtype);
    const double tokens = tr.pipeline_micro_batch() / safe(s.dp) * tr.seq / (safe(s.ulysses) * safe(s.cp));
    const double full = e * tokens * static_cast<double>(ctx.model->hidden);
    calls.push_back(call(Collective::kSendRecv, Bytes(full / safe(s.tp)), pair));
    if (s.tp > 1 && !s.sp) calls.push_back(call(Collective::kAllGather, Bytes(full), place_group(c, s.tp, 1)));
  }
  b.both(CommAxis::kPipeline, 1, calls);
  return out;
}

}  // namespace weft
