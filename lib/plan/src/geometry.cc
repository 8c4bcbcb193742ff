#include "weft/plan/geometry.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "weft/plan/pipeline_order.h"

namespace weft {

namespace {

constexpr double kInitStd = 0.02;     // GPT-2 / Megatron initialisation
constexpr double kPosInitStd = 0.01;  // GPT-2's position table

int head_dim(const LayerShape& s) { return s.head_dim > 0 ? s.head_dim : static_cast<int>(s.hidden / s.heads); }
int kv_heads(const LayerShape& s) { return s.kv_heads > 0 ? s.kv_heads : s.heads; }

std::vector<int> shard_group(int rank, int S, int pp, const LayerStrategy& s) {
  return group_of(rank, S, pp, s, Axis::kShard);
}

// Appends parameters to a unit's flat buffer in order.
struct UnitBuilder {
  UnitSpec u;
  explicit UnitBuilder(std::string name) { u.name = std::move(name); }
  // dim >= 0: the slice [start, start + len) of dimension dim; dim -1: the whole tensor.
  void add(const std::string& name, std::vector<int64_t> full, int dim, int64_t start, int64_t len, bool decay,
           bool counted, double std) {
    ParamSpec p;
    p.name = name;
    p.full_shape = full;
    p.local_shape = full;
    p.shard_dim = dim;
    if (dim >= 0) {
      p.shard_start = start;
      p.shard_len = len;
      p.local_shape[dim] = len;
    } else {
      p.shard_start = 0;
      p.shard_len = full.empty() ? 1 : full[0];
    }
    p.decay = decay;
    p.counted = counted;
    p.init_std = std;
    p.offset = u.numel;
    u.numel += p.numel();
    u.params.push_back(std::move(p));
  }
  UnitSpec finish(int zero, std::vector<int> sync) {
    u.zero = zero;
    u.sync_ranks = std::move(sync);
    const int64_t n = static_cast<int64_t>(u.sync_ranks.size());
    u.padded = (u.numel + n - 1) / n * n;
    return std::move(u);
  }
};

// An FFN of width F split by columns over tp (rank t's slice), names `pre` + gate/up/down (SwiGLU)
// or fc1/fc2 (GELU), with biases where the layer has them.
void add_ffn_params(UnitBuilder& b, const LayerShape& sh, const std::string& pre, int64_t F, int tp, int t,
                    double out_std) {
  const int64_t H = sh.hidden, Fl = F / tp;
  const bool rep = t == 0;
  if (sh.ffn_kind == FfnKind::kGelu) {
    b.add(pre + "fc1", {F, H}, 0, t * Fl, Fl, true, true, kInitStd);
    if (sh.bias) b.add(pre + "fc1_bias", {F}, 0, t * Fl, Fl, false, true, 0);
    b.add(pre + "fc2", {H, F}, 1, t * Fl, Fl, true, true, out_std);
    if (sh.bias) b.add(pre + "fc2_bias", {H}, -1, 0, 0, false, rep, 0);
  } else {
    b.add(pre + "gate", {F, H}, 0, t * Fl, Fl, true, true, kInitStd);
    if (sh.bias) b.add(pre + "gate_bias", {F}, 0, t * Fl, Fl, false, true, 0);
    b.add(pre + "up", {F, H}, 0, t * Fl, Fl, true, true, kInitStd);
    if (sh.bias) b.add(pre + "up_bias", {F}, 0, t * Fl, Fl, false, true, 0);
    b.add(pre + "down", {H, F}, 1, t * Fl, Fl, true, true, out_std);
    if (sh.bias) b.add(pre + "down_bias", {H}, -1, 0, 0, false, rep, 0);
  }
}

// The routed experts of MoE layer li held by `rank` (stage-local index `local` of S): on the
// experts' grid (rank_map.h, etp fastest, then ep, then the expert data-parallel index) ep rank e
// holds experts [e * E / ep, (e + 1) * E / ep), each split by columns over etp as a dense FFN;
// names "layers.<li>.experts.<expert>." + gate/up/down (or fc1/fc2). Experts have no biases here
// (runtime_supports refuses MoE layers with biases).
void add_expert_params(UnitBuilder& b, const ModelSpec& m, int li, const LayerStrategy& s, int local) {
  const LayerShape& sh = m.layer(li);
  const int ep = std::max(1, s.ep), et = s.expert_tp();
  const int e_idx = local % (ep * et) / et, t = local % et;
  const int per = sh.moe.experts / ep;
  LayerShape plain = sh;
  plain.bias = false;
  const double out_std = kInitStd / std::sqrt(2.0 * m.num_layers());
  for (int e = e_idx * per; e < (e_idx + 1) * per; ++e)
    add_ffn_params(b, plain, "layers." + std::to_string(li) + ".experts." + std::to_string(e) + ".", sh.moe.expert_ffn,
                   et, t, out_std);
}

// The parameters of decoder layer li on tensor-parallel rank t of tp (a MoE layer's routed experts
// apart).
void add_layer_params(UnitBuilder& b, const ModelSpec& m, int li, int tp, int t) {
  const LayerShape& sh = m.layer(li);
  const int64_t H = m.hidden;
  const int64_t d = head_dim(sh), nh = sh.heads, nkv = kv_heads(sh);
  const int64_t nhl = nh / tp;
  int64_t kv0, nkvl;
  bool kv_counted = true;
  if (nkv % tp == 0) {
    nkvl = nkv / tp;
    kv0 = t * nkvl;
  } else {  // fewer kv heads than tp: each head on tp / nkv ranks, the first of them counts it
    nkvl = 1;
    kv0 = t * nkv / tp;
    kv_counted = t % (tp / nkv) == 0;
  }
  const double out_std = kInitStd / std::sqrt(2.0 * m.num_layers());
  const std::string pre = "layers." + std::to_string(li) + ".";
  const bool rep = t == 0;  // first copy of a tp-replicated parameter
  const bool nb = m.norm == NormKind::kLayerNorm;
  const bool qkv_bias = sh.bias || sh.qkv_bias;
  b.add(pre + "ln1.weight", {H}, -1, 0, 0, false, rep, -1);
  if (nb) b.add(pre + "ln1.bias", {H}, -1, 0, 0, false, rep, 0);
  b.add(pre + "attn.wq", {nh * d, H}, 0, t * nhl * d, nhl * d, true, true, kInitStd);
  if (qkv_bias) b.add(pre + "attn.bq", {nh * d}, 0, t * nhl * d, nhl * d, false, true, 0);
  b.add(pre + "attn.wk", {nkv * d, H}, 0, kv0 * d, nkvl * d, true, kv_counted, kInitStd);
  if (qkv_bias) b.add(pre + "attn.bk", {nkv * d}, 0, kv0 * d, nkvl * d, false, kv_counted, 0);
  b.add(pre + "attn.wv", {nkv * d, H}, 0, kv0 * d, nkvl * d, true, kv_counted, kInitStd);
  if (qkv_bias) b.add(pre + "attn.bv", {nkv * d}, 0, kv0 * d, nkvl * d, false, kv_counted, 0);
  if (sh.qk_norm && sh.qk_norm_full) {  // a weight per query and key element: split by heads, as wq and wk
    b.add(pre + "attn.q_norm", {nh * d}, 0, t * nhl * d, nhl * d, false, true, -1);
    b.add(pre + "attn.k_norm", {nkv * d}, 0, kv0 * d, nkvl * d, false, kv_counted, -1);
  } else if (sh.qk_norm) {  // shared by the heads: replicated over tp, the gradient summed over it by the runtime
    b.add(pre + "attn.q_norm", {d}, -1, 0, 0, false, rep, -1);
    b.add(pre + "attn.k_norm", {d}, -1, 0, 0, false, rep, -1);
  }
  // GPT-OSS's attention sinks: a logit per head, split by heads as wq (zeros at start).
  if (sh.sinks) b.add(pre + "attn.sinks", {nh}, 0, t * nhl, nhl, false, true, 0);
  b.add(pre + "attn.wo", {H, nh * d}, 1, t * nhl * d, nhl * d, true, true, out_std);
  if (sh.bias) b.add(pre + "attn.bo", {H}, -1, 0, 0, false, rep, 0);
  b.add(pre + "ln2.weight", {H}, -1, 0, 0, false, rep, -1);
  if (nb) b.add(pre + "ln2.bias", {H}, -1, 0, 0, false, rep, 0);
  if (sh.moe.enabled()) {
    // The router (replicated: every rank scores its own tokens; its gradient is summed over tp by
    // the runtime) and the shared experts, one FFN of shared_experts * expert_ffn split over tp as
    // a dense FFN; the routed experts are a unit of their own (add_expert_params).
    b.add(pre + "mlp.router", {sh.moe.experts, H}, -1, 0, 0, true, rep, kInitStd);
    // DeepSeek-V3's balancing bias: a value per expert, replicated like the router, zeros at the
    // start; the runtime moves it after each step (it takes no gradient, so AdamW leaves it as is).
    if (sh.moe.expert_bias) b.add(pre + "mlp.expert_bias", {sh.moe.experts}, -1, 0, 0, false, rep, 0);
    if (sh.moe.shared_experts > 0) add_ffn_params(b, sh, pre + "mlp.shared.", sh.moe.shared_experts * sh.moe.expert_ffn, tp, t, out_std);
    // Qwen2-MoE's gate on the shared experts' output: one vector, replicated like the router.
    if (sh.moe.shared_gate) b.add(pre + "mlp.shared_gate", {1, H}, -1, 0, 0, true, rep, kInitStd);
    return;
  }
  add_ffn_params(b, sh, pre + "mlp.", sh.ffn, tp, t, out_std);
}

}  // namespace

// ---- Activation layouts ----

ActivationLayout layout_of(const LayerStrategy& s, int stage_size) {
  ActivationLayout l;
  const int sp = s.sp ? s.tp : 1;
  l.batch_parts = s.dp;
  l.seq_parts = s.cp * s.ulysses * sp;
  l.cp = s.cp;
  for (int j = 0; j < stage_size; ++j) {
    const RankCoords c = coords_of(j, stage_size, s);
    l.batch_idx.push_back(c.dp);
    l.seq_idx.push_back((c.cp * s.ulysses + c.ulysses) * sp + (s.sp ? c.tp : 0));
  }
  return l;
}

std::vector<SeqRun> seq_runs(int64_t T, int cp, int64_t begin, int64_t len) {
  std::vector<SeqRun> out;
  auto add = [&](int64_t start, int64_t n) {
    if (n <= 0) return;
    if (!out.empty() && out.back().start + out.back().len == start) out.back().len += n;
    else out.push_back({start, n});
  };
  if (cp <= 1) {
    add(begin, len);
    return out;
  }
  const int64_t chunk = T / (2 * cp);
  // Place q of the order is in chunk q / chunk of the order, which is sample chunk c (the first
  // of cp rank c's two) or 2 cp - 1 - c (its second).
  for (int64_t q = begin, end = begin + len; q < end;) {
    const int64_t k = q / chunk, off = q % chunk;
    const int64_t c = k / 2;
    const int64_t sample_chunk = k % 2 == 0 ? c : 2 * cp - 1 - c;
    const int64_t n = std::min(chunk - off, end - q);
    add(sample_chunk * chunk + off, n);
    q += n;
  }
  return out;
}

std::vector<SeqRun> block_runs(const ActivationLayout& l, int rank, int64_t T) {
  const int64_t t = T / l.seq_parts;
  return seq_runs(T, l.cp, l.seq_idx.at(rank) * t, t);
}

LayoutKey layout_key(const LayerStrategy& s) { return {s.tp, s.sp, s.ulysses, s.cp, s.dp}; }

LayerStrategy representative(const LayoutKey& k) {
  LayerStrategy s;
  s.tp = k.tp;
  s.sp = k.sp;
  s.ulysses = k.ulysses;
  s.cp = k.cp;
  s.dp = k.dp;
  return s;
}

// ---- Process groups ----

std::vector<int> kv_replica_group(int rank, int stage_size, int pp, const LayerStrategy& s, int kv) {
  if (kv % s.tp == 0) return {rank};
  const std::vector<int> tpg = group_of(rank, stage_size, pp, s, Axis::kTp);
  const int per = s.tp / kv;
  const int t = coords_of(rank, stage_size, s).tp;
  return {tpg.begin() + t / per * per, tpg.begin() + (t / per + 1) * per};
}

namespace {
// Model chunks per device group: vp (chunk c of group g is stage group_stage(p, g, c), plan.h).
int chunks(const Plan& p) { return std::max(1, p.train.vp); }
// The embedding runs on group 0 (the first stage's), the head on head_group(p) (the last
// stage's): group pp - 1, or group 0 again under zb-v.
bool holds_embedding(const Plan& p, int g) { return g == 0 || g == head_group(p); }
// A tied table is held twice, on groups 0 and head_group(p), when those differ.
bool tied_across(const Plan& p) { return p.model.tied_embeddings && head_group(p) != 0; }
}  // namespace

std::vector<std::vector<int>> process_groups(const Plan& p) {
  const int world = p.world_size();
  const int S = p.devices_per_stage();
  const int pp = p.train.pp;
  std::vector<std::vector<int>> out;
  std::vector<int> all;
  for (int r = 0; r < world; ++r) all.push_back(r);
  out.push_back(all);
  auto add_strategy = [&](const LayerStrategy& s, int stage, int kv, bool moe) {
    for (int j = 0; j < S; ++j) {
      const int r = stage * S + j;
      out.push_back(group_of(r, S, pp, s, Axis::kTp));
      out.push_back(group_of(r, S, pp, s, Axis::kUlysses));
      out.push_back(group_of(r, S, pp, s, Axis::kCp));
      out.push_back(shard_group(r, S, pp, s));
      if (kv > 0) out.push_back(kv_replica_group(r, S, pp, s, kv));
      if (moe)
        for (Axis a : {Axis::kEp, Axis::kEtp, Axis::kEdp}) out.push_back(group_of(r, S, pp, s, a));
    }
  };
  for (int g = 0; g < pp; ++g) {
    std::vector<int> stage;
    for (int j = 0; j < S; ++j) stage.push_back(g * S + j);
    out.push_back(stage);
    for (int c = 0; c < chunks(p); ++c) {
      const Stage& st = p.stages[group_stage(p, g, c)];
      for (int i = 0; i < st.num_layers(); ++i) {
        const LayerShape& sh = p.model.layer(st.first_layer + i);
        add_strategy(st.layers[i], g, kv_heads(sh), sh.moe.enabled());
      }
    }
    if (holds_embedding(p, g)) add_strategy(p.embedding, g, 0, false);
  }
  if (tied_across(p))
    for (int j = 0; j < S; ++j) out.push_back({j, head_group(p) * S + j});
  return out;
}

std::vector<std::vector<int>> grad_groups(const Plan& p) {
  const int S = p.devices_per_stage();
  const int pp = p.train.pp;
  std::vector<std::vector<int>> out;
  auto add = [&](const LayerStrategy& s, int stage, bool moe) {
    if (s.zero >= 3) return;
    for (int j = 0; j < S; ++j) {
      out.push_back(shard_group(stage * S + j, S, pp, s));
      if (moe) out.push_back(group_of(stage * S + j, S, pp, s, Axis::kEdp));
    }
  };
  for (int g = 0; g < pp; ++g) {
    for (int c = 0; c < chunks(p); ++c) {
      const Stage& st = p.stages[group_stage(p, g, c)];
      for (int i = 0; i < st.num_layers(); ++i) add(st.layers[i], g, p.model.layer(st.first_layer + i).moe.enabled());
    }
    if (holds_embedding(p, g)) add(p.embedding, g, false);
  }
  return out;
}

// ---- Parameter units ----

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (auto d : local_shape) n *= d;
  return n;
}

std::vector<UnitSpec> unit_specs(const Plan& p, int rank) {
  const ModelSpec& m = p.model;
  const int S = p.devices_per_stage();
  const int pp = p.train.pp;
  const int stage = rank / S;
  const bool first = stage == 0, last = stage == head_group(p);
  const int64_t V = m.vocab, H = m.hidden;
  const LayerStrategy& emb = p.embedding;
  const RankCoords eco = coords_of(rank, S, emb);
  const int64_t vshard = (V + emb.tp - 1) / emb.tp;
  const int64_t vstart = std::min<int64_t>(V, eco.tp * vshard);
  const int64_t vlen = std::min<int64_t>(V, vstart + vshard) - vstart;
  const bool tied = tied_across(p);
  const bool norm_bias = m.norm == NormKind::kLayerNorm;
  std::vector<UnitSpec> out;
  std::vector<int> tied_pair;
  if (tied) tied_pair = {rank % S, head_group(p) * S + rank % S};

  if (first) {
    UnitBuilder b("wte");
    b.add("embed.wte", {V, H}, 0, vstart, vlen, true, true, kInitStd);
    if (tied) b.u.tied_ranks = tied_pair;
    out.push_back(b.finish(emb.zero, shard_group(rank, S, pp, emb)));
    if (m.position == PositionKind::kLearned) {
      UnitBuilder w("wpe");
      const int64_t P = m.max_seq > 0 ? m.max_seq : p.train.seq;
      w.add("embed.wpe", {P, H}, -1, 0, 0, true, eco.tp == 0, kPosInitStd);
      out.push_back(w.finish(emb.zero, shard_group(rank, S, pp, emb)));
    }
  }
  for (int c = 0; c < chunks(p); ++c) {
    const Stage& st = p.stages[group_stage(p, stage, c)];
    for (int i = 0; i < st.num_layers(); ++i) {
      const int li = st.first_layer + i;
      const LayerStrategy& s = st.layers[i];
      UnitBuilder b("layers." + std::to_string(li));
      add_layer_params(b, m, li, s.tp, coords_of(rank, S, s).tp);
      out.push_back(b.finish(s.zero, shard_group(rank, S, pp, s)));
      out.back().chunk = c;
      if (m.layer(li).moe.enabled()) {
        // The routed experts: summed and ZeRO-sharded over the expert data-parallel group.
        UnitBuilder e("layers." + std::to_string(li) + ".experts");
        add_expert_params(e, m, li, s, rank % S);
        out.push_back(e.finish(s.zero, group_of(rank, S, pp, s, Axis::kEdp)));
        out.back().chunk = c;
      }
    }
  }
  if (last) {
    const int lc = stage_chunk(p.train.schedule, pp, static_cast<int>(p.stages.size()) - 1);
    UnitBuilder b("head");
    b.add("head.norm.weight", {H}, -1, 0, 0, false, eco.tp == 0, -1);
    if (norm_bias) b.add("head.norm.bias", {H}, -1, 0, 0, false, eco.tp == 0, 0);
    if (!m.tied_embeddings) b.add("head.lm_head", {V, H}, 0, vstart, vlen, true, true, kInitStd);
    out.push_back(b.finish(emb.zero, shard_group(rank, S, pp, emb)));
    out.back().chunk = lc;
    if (tied) {
      UnitBuilder w("wte_copy");
      w.add("embed.wte", {V, H}, 0, vstart, vlen, true, false, kInitStd);
      w.u.tied_ranks = tied_pair;
      out.push_back(w.finish(emb.zero, shard_group(rank, S, pp, emb)));
      out.back().chunk = lc;
    }
  }
  return out;
}

std::vector<ParamSpec> model_params(const Plan& p) {
  std::vector<ParamSpec> out;
  std::set<std::string> seen;  // a tied table's copy on the last stage is the same tensor
  const int S = p.devices_per_stage();
  const int pp = p.train.pp;
  // Units in model order: by virtual stage (group_stage of their group and chunk), in each in
  // forward order.
  std::vector<std::pair<int, UnitSpec>> units;
  for (int g = 0; g < pp; ++g) {
    std::vector<std::vector<UnitSpec>> others;  // the other ranks' units, read when some expert lives elsewhere
    for (UnitSpec& u : unit_specs(p, g * S)) {
      const bool experts = u.name.size() > 8 && u.name.compare(u.name.size() - 8, 8, ".experts") == 0;
      if (experts && S > 1) {
        // The routed experts are spread over the expert-parallel ranks: the stage's ranks in order
        // hold them in ascending blocks.
        if (others.empty())
          for (int j = 1; j < S; ++j) others.push_back(unit_specs(p, g * S + j));
        std::set<std::string> have;
        for (const ParamSpec& ps : u.params) have.insert(ps.name);
        for (const auto& rank_units : others)
          for (const UnitSpec& o : rank_units)
            if (o.name == u.name)
              for (const ParamSpec& ps : o.params)
                if (have.insert(ps.name).second) u.params.push_back(ps);
      }
      units.emplace_back(group_stage(p, g, u.chunk), std::move(u));
    }
  }
  std::stable_sort(units.begin(), units.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [stage, u] : units)
    for (ParamSpec& ps : u.params)
      if (seen.insert(ps.name).second) out.push_back(std::move(ps));
  return out;
}

}  // namespace weft
