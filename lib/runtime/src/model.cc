#include "weft/runtime/model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>
#include <map>

#include "weft/core/assert.h"
#include "weft/runtime/data.h"

namespace weft::runtime {

namespace {

constexpr double kNormEps = 1e-5;        // LayerNorm (GPT-2) and RMSNorm (Llama 2) epsilon
constexpr double kRopeTheta = 10000.0;   // RoPE base of GPT-NeoX / Llama (RoFormer, Su et al. 2021)
constexpr double kInitStd = 0.02;        // GPT-2 / Megatron initialisation
constexpr double kPosInitStd = 0.01;     // GPT-2's position table

uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a 64
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

int head_dim(const LayerShape& s) { return s.head_dim > 0 ? s.head_dim : static_cast<int>(s.hidden / s.heads); }

// Ranks of the stage that hold the same tp shard as `rank` under s: the gradient-sum group.
std::vector<int> sync_group(int rank, int S, const LayerStrategy& s) {
  const int base = rank / S * S;
  const int tp = coords_of(rank, S, s).tp;
  std::vector<int> out;
  for (int j = 0; j < S; ++j)
    if (coords_of(base + j, S, s).tp == tp) out.push_back(base + j);
  return out;
}

// Key/value replica group: tp ranks holding the same kv heads when tp > kv heads.
std::vector<int> kvrep_group(int rank, int S, int pp, const LayerStrategy& s, int kv) {
  auto tpg = group_of(rank, S, pp, s, Axis::kTp);
  if (kv % s.tp == 0) return {rank};
  const int per = s.tp / kv;
  const int t = coords_of(rank, S, s).tp;
  std::vector<int> out;
  for (int j = t / per * per; j < (t / per + 1) * per; ++j) out.push_back(tpg[j]);
  return out;
}

struct Builder {
  UnitSpec u;
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

bool has_norm_bias(const ModelSpec& m) { return m.norm == NormKind::kLayerNorm; }

}  // namespace

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (auto d : local_shape) n *= d;
  return n;
}

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

std::vector<UnitSpec> unit_specs(const Plan& p, int rank) {
  const ModelSpec& m = p.model;
  const int S = p.devices_per_stage();
  const int pp = p.train.pp;
  const int stage = rank / S;
  const bool first = stage == 0, last = stage == pp - 1;
  const int64_t V = m.vocab, H = m.hidden;
  const LayerStrategy& emb = p.embedding;
  const RankCoords eco = coords_of(rank, S, emb);
  const int64_t vshard = (V + emb.tp - 1) / emb.tp;
  const int64_t vstart = std::min<int64_t>(V, eco.tp * vshard);
  const int64_t vlen = std::min<int64_t>(V, vstart + vshard) - vstart;
  const bool tied_across = m.tied_embeddings && pp > 1;
  const int L = m.num_layers();
  std::vector<UnitSpec> out;
  std::vector<int> tied_pair;
  if (tied_across) tied_pair = {rank % S, (pp - 1) * S + rank % S};

  if (first) {
    Builder b;
    b.u.name = "wte";
    b.add("embed.wte", {V, H}, 0, vstart, vlen, true, true, kInitStd);
    if (tied_across) b.u.tied_ranks = tied_pair;
    out.push_back(b.finish(emb.zero, sync_group(rank, S, emb)));
    if (m.position == PositionKind::kLearned) {
      Builder w;
      w.u.name = "wpe";
      const int64_t P = m.max_seq > 0 ? m.max_seq : p.train.seq;
      w.add("embed.wpe", {P, H}, -1, 0, 0, true, eco.tp == 0, kPosInitStd);
      out.push_back(w.finish(emb.zero, sync_group(rank, S, emb)));
    }
  }
  const Stage& st = p.stages[stage];
  for (int i = 0; i < st.num_layers(); ++i) {
    const int li = st.first_layer + i;
    const LayerStrategy& s = st.layers[i];
    const LayerShape& sh = m.layer(li);
    const RankCoords co = coords_of(rank, S, s);
    const int tp = s.tp, t = co.tp;
    const int64_t d = head_dim(sh), nh = sh.heads, nkv = sh.kv_heads > 0 ? sh.kv_heads : sh.heads;
    const int64_t nhl = nh / tp;
    int64_t kv0, nkvl;
    bool kv_counted = true;
    if (nkv % tp == 0) {
      nkvl = nkv / tp;
      kv0 = t * nkvl;
    } else {
      nkvl = 1;
      kv0 = t * nkv / tp;
      kv_counted = t % (tp / nkv) == 0;
    }
    const double out_std = kInitStd / std::sqrt(2.0 * L);
    const std::string pre = "layers." + std::to_string(li) + ".";
    const bool rep = t == 0;  // first copy of a tp-replicated parameter
    const bool nb = has_norm_bias(m);
    Builder b;
    b.u.name = "layers." + std::to_string(li);
    b.add(pre + "ln1.weight", {H}, -1, 0, 0, false, rep, -1);
    if (nb) b.add(pre + "ln1.bias", {H}, -1, 0, 0, false, rep, 0);
    b.add(pre + "attn.wq", {nh * d, H}, 0, t * nhl * d, nhl * d, true, true, kInitStd);
    if (sh.bias) b.add(pre + "attn.bq", {nh * d}, 0, t * nhl * d, nhl * d, false, true, 0);
    b.add(pre + "attn.wk", {nkv * d, H}, 0, kv0 * d, nkvl * d, true, kv_counted, kInitStd);
    if (sh.bias) b.add(pre + "attn.bk", {nkv * d}, 0, kv0 * d, nkvl * d, false, kv_counted, 0);
    b.add(pre + "attn.wv", {nkv * d, H}, 0, kv0 * d, nkvl * d, true, kv_counted, kInitStd);
    if (sh.bias) b.add(pre + "attn.bv", {nkv * d}, 0, kv0 * d, nkvl * d, false, kv_counted, 0);
    b.add(pre + "attn.wo", {H, nh * d}, 1, t * nhl * d, nhl * d, true, true, out_std);
    if (sh.bias) b.add(pre + "attn.bo", {H}, -1, 0, 0, false, rep, 0);
    b.add(pre + "ln2.weight", {H}, -1, 0, 0, false, rep, -1);
    if (nb) b.add(pre + "ln2.bias", {H}, -1, 0, 0, false, rep, 0);
    const int64_t F = sh.ffn, Fl = F / tp;
    if (sh.ffn_kind == FfnKind::kGelu) {
      b.add(pre + "mlp.fc1", {F, H}, 0, t * Fl, Fl, true, true, kInitStd);
      if (sh.bias) b.add(pre + "mlp.fc1_bias", {F}, 0, t * Fl, Fl, false, true, 0);
      b.add(pre + "mlp.fc2", {H, F}, 1, t * Fl, Fl, true, true, out_std);
      if (sh.bias) b.add(pre + "mlp.fc2_bias", {H}, -1, 0, 0, false, rep, 0);
    } else {
      b.add(pre + "mlp.gate", {F, H}, 0, t * Fl, Fl, true, true, kInitStd);
      if (sh.bias) b.add(pre + "mlp.gate_bias", {F}, 0, t * Fl, Fl, false, true, 0);
      b.add(pre + "mlp.up", {F, H}, 0, t * Fl, Fl, true, true, kInitStd);
      if (sh.bias) b.add(pre + "mlp.up_bias", {F}, 0, t * Fl, Fl, false, true, 0);
      b.add(pre + "mlp.down", {H, F}, 1, t * Fl, Fl, true, true, out_std);
      if (sh.bias) b.add(pre + "mlp.down_bias", {H}, -1, 0, 0, false, rep, 0);
    }
    out.push_back(b.finish(s.zero, sync_group(rank, S, s)));
  }
  if (last) {
    Builder b;
    b.u.name = "head";
    b.add("head.norm.weight", {H}, -1, 0, 0, false, eco.tp == 0, -1);
    if (has_norm_bias(m)) b.add("head.norm.bias", {H}, -1, 0, 0, false, eco.tp == 0, 0);
    if (!m.tied_embeddings) b.add("head.lm_head", {V, H}, 0, vstart, vlen, true, true, kInitStd);
    out.push_back(b.finish(emb.zero, sync_group(rank, S, emb)));
    if (tied_across) {
      Builder w;
      w.u.name = "wte_copy";
      w.add("embed.wte", {V, H}, 0, vstart, vlen, true, false, kInitStd);
      w.u.tied_ranks = tied_pair;
      out.push_back(w.finish(emb.zero, sync_group(rank, S, emb)));
    }
  }
  return out;
}

std::vector<std::vector<int>> plan_groups(const Plan& p) {
  const int world = p.world_size();
  const int S = p.devices_per_stage();
  const int pp = p.train.pp;
  std::vector<std::vector<int>> out;
  std::vector<int> all;
  for (int r = 0; r < world; ++r) all.push_back(r);
  out.push_back(all);
  auto add_strategy = [&](const LayerStrategy& s, int stage, int kv) {
    for (int j = 0; j < S; ++j) {
      const int r = stage * S + j;
      out.push_back(group_of(r, S, pp, s, Axis::kTp));
      out.push_back(group_of(r, S, pp, s, Axis::kUlysses));
      out.push_back(sync_group(r, S, s));
      if (kv > 0) out.push_back(kvrep_group(r, S, pp, s, kv));
    }
  };
  for (int g = 0; g < pp; ++g) {
    std::vector<int> stage;
    for (int j = 0; j < S; ++j) stage.push_back(g * S + j);
    out.push_back(stage);
    const Stage& st = p.stages[g];
    for (int i = 0; i < st.num_layers(); ++i) {
      const LayerShape& sh = p.model.layer(st.first_layer + i);
      add_strategy(st.layers[i], g, sh.kv_heads > 0 ? sh.kv_heads : sh.heads);
    }
    if (g == 0 || g == pp - 1) add_strategy(p.embedding, g, 0);
  }
  if (p.model.tied_embeddings && pp > 1)
    for (int j = 0; j < S; ++j) out.push_back({j, (pp - 1) * S + j});
  return out;
}

std::vector<std::vector<int>> plan_grad_groups(const Plan& p) {
  const int S = p.devices_per_stage();
  const int pp = p.train.pp;
  std::vector<std::vector<int>> out;
  auto add = [&](const LayerStrategy& s, int stage) {
    if (s.zero >= 3) return;
    for (int j = 0; j < S; ++j) out.push_back(sync_group(stage * S + j, S, s));
  };
  for (int g = 0; g < pp; ++g) {
    for (const LayerStrategy& s : p.stages[g].layers) add(s, g);
    if (g == 0 || g == pp - 1) add(p.embedding, g);
  }
  return out;
}

// ---- Unit ----

int64_t Unit::owned_begin() const { return spec.zero == 0 ? 0 : shard_rank * shard; }
int64_t Unit::owned_len() const { return spec.zero == 0 ? spec.numel : shard; }

std::vector<at::Tensor> Unit::weights(at::Tensor* gathered) {
  if (spec.zero < 3) return leaves;
  at::Tensor full = gather_shard(shard_leaf, *sync);
  if (gathered && sync->size() > 1) *gathered = full;  // size 1: `full` is the shard leaf itself
  std::vector<at::Tensor> out;
  out.reserve(spec.params.size());
  for (const auto& p : spec.params) out.push_back(full.narrow(0, p.offset, p.numel()).view(p.local_shape));
  return out;
}

at::Tensor Unit::release(const at::Tensor& y, const at::Tensor& gathered) {
  if (spec.zero < 3 || !gathered.defined()) return y;
  return release_gathered(y, gathered, shard_leaf, *sync);
}

at::Tensor Unit::owned_params() {
  if (spec.zero == 3) return shard_leaf.detach();
  return flat.narrow(0, owned_begin(), owned_len());
}

at::Tensor Unit::owned_grad() {
  if (spec.zero == 0) return grad.narrow(0, 0, spec.numel);
  return shard_grad;
}

namespace {

// The parts of u's owned range holding parameters with `flag`, as [begin, len) relative to
// owned_begin(), adjacent parts merged.
template <class Flag>
std::vector<std::pair<int64_t, int64_t>> owned_ranges(const Unit& u, Flag flag) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const int64_t lo = u.owned_begin(), hi = lo + u.owned_len();
  for (const ParamSpec& ps : u.spec.params) {
    if (!flag(ps)) continue;
    const int64_t b = std::max(lo, ps.offset), e = std::min(hi, ps.offset + ps.numel());
    if (b >= e) continue;
    if (!out.empty() && out.back().first + out.back().second == b - lo) out.back().second += e - b;
    else out.emplace_back(b - lo, e - b);
  }
  return out;
}

}  // namespace

// ---- Model ----

Model::Model(const Plan& p, int rank, GroupSet& groups, uint64_t seed, at::Device device)
    : plan_(p), device_(device), rank_(rank), S_(p.devices_per_stage()), groups_(groups) {
  const at::TensorOptions on = at::TensorOptions().dtype(at::kFloat).device(device);
  stage_ = rank / S_;
  const int pp = p.train.pp;
  std::vector<int> stage_ranks;
  for (int j = 0; j < S_; ++j) stage_ranks.push_back(stage_ * S_ + j);
  stage_comm_ = &groups.get(stage_ranks);
  emb_co_ = coords_of(rank, S_, p.embedding);
  emb_tp_ = &groups.get(group_of(rank, S_, pp, p.embedding, Axis::kTp));
  layouts_.push_back(layout_of(p.embedding, S_));
  emb_layout_ = &layouts_.back();
  if (stage_ > 0) {
    layouts_.push_back(layout_of(p.stages[stage_ - 1].layers.back(), S_));
    prev_layout_ = &layouts_.back();
  }
  {
    const int64_t V = p.model.vocab;
    const int64_t vshard = (V + p.embedding.tp - 1) / p.embedding.tp;
    vocab_start_ = std::min<int64_t>(V, emb_co_.tp * vshard);
  }

  for (auto& spec : unit_specs(p, rank)) {
    Unit u;
    u.spec = std::move(spec);
    u.sync = &groups.get(u.spec.sync_ranks);
    if (u.spec.zero < 3)
      u.grad_sync = groups.has(u.spec.sync_ranks, Channel::kGrad) ? &groups.get(u.spec.sync_ranks, Channel::kGrad)
                                                                 : u.sync;
    if (!u.spec.tied_ranks.empty()) u.tied = &groups.get(u.spec.tied_ranks);
    u.shard_rank = u.sync->rank();
    u.shard_size = u.sync->size();
    u.shard = u.spec.padded / u.shard_size;
    at::Tensor full_flat = at::zeros({u.spec.padded}, at::kFloat);
    for (const auto& ps : u.spec.params) {
      at::Tensor full;
      if (ps.init_std > 0) {
        auto gen = at::make_generator<at::CPUGeneratorImpl>(mix64(seed ^ name_hash(ps.name)));
        full = at::normal(0.0, ps.init_std, ps.full_shape, gen, at::TensorOptions().dtype(at::kFloat));
      } else if (ps.init_std == 0) {
        full = at::zeros(ps.full_shape, at::kFloat);
      } else {
        full = at::ones(ps.full_shape, at::kFloat);
      }
      at::Tensor local = ps.shard_dim >= 0 ? full.narrow(ps.shard_dim, ps.shard_start, ps.shard_len) : full;
      full_flat.narrow(0, ps.offset, ps.numel()).copy_(local.reshape({-1}));
    }
    full_flat = full_flat.to(device);
    if (u.spec.zero < 3) {
      u.flat = full_flat;
      if (u.spec.zero < 2) u.grad = at::zeros({u.spec.padded}, on);
      for (const auto& ps : u.spec.params) {
        at::Tensor leaf = at::empty({0}, on);
        leaf.set_(u.flat.storage(), ps.offset, ps.local_shape, c10::contiguous_strides(ps.local_shape));
        leaf.requires_grad_(true);
        if (u.grad.defined()) {
          at::Tensor g = at::empty({0}, on);
          g.set_(u.grad.storage(), ps.offset, ps.local_shape, c10::contiguous_strides(ps.local_shape));
          leaf.mutable_grad() = g;
        }
        u.leaves.push_back(leaf);
      }
    } else {
      u.shard_leaf = full_flat.narrow(0, u.shard_rank * u.shard, u.shard).clone().requires_grad_(true);
    }
    if (u.spec.zero >= 1) {
      // ZeRO-1 reduces into the owned slice of its full gradient buffer, which it keeps anyway (as
      // Megatron's distributed optimizer does); ZeRO-2 and 3 keep only the shard.
      u.shard_grad = u.spec.zero == 1 ? u.grad.narrow(0, u.shard_rank * u.shard, u.shard) : at::zeros({u.shard}, on);
      if (u.spec.zero == 3) u.shard_leaf.mutable_grad() = u.shard_grad;
    }
    u.m = at::zeros({u.owned_len()}, on);
    u.v = at::zeros({u.owned_len()}, on);
    u.decay_ranges = owned_ranges(u, [](const ParamSpec& ps) { return ps.decay; });
    // Replicas of a zero-0 unit count its gradient once, on the first.
    if (u.spec.zero > 0 || u.shard_rank == 0)
      u.count_ranges = owned_ranges(u, [](const ParamSpec& ps) { return ps.counted; });
    units_.push_back(std::move(u));
  }

  const Stage& st = p.stages[stage_];
  for (int i = 0; i < st.num_layers(); ++i) {
    LayerCtx L;
    L.index = st.first_layer + i;
    L.st = st.layers[i];
    L.co = coords_of(rank, S_, L.st);
    L.shape = p.model.layer(L.index);
    L.tp = &groups.get(group_of(rank, S_, pp, L.st, Axis::kTp));
    L.ulysses = &groups.get(group_of(rank, S_, pp, L.st, Axis::kUlysses));
    const int nkv = L.shape.kv_heads > 0 ? L.shape.kv_heads : L.shape.heads;
    L.kvrep = &groups.get(kvrep_group(rank, S_, pp, L.st, nkv));
    layouts_.push_back(layout_of(L.st, S_));
    L.layout = &layouts_.back();
    L.heads_local = L.shape.heads / L.st.tp;
    L.kv_local = nkv % L.st.tp == 0 ? nkv / L.st.tp : 1;
    L.ffn_local = L.shape.ffn / L.st.tp;
    const std::string name = "layers." + std::to_string(L.index);
    L.unit = -1;
    for (size_t k = 0; k < units_.size(); ++k)
      if (units_[k].spec.name == name) L.unit = static_cast<int>(k);
    layers_.push_back(L);
  }
}

Unit* Model::find_unit(const std::string& name) {
  for (auto& u : units_)
    if (u.spec.name == name) return &u;
  return nullptr;
}

const Layout& Model::input_layout() const { return first_stage() ? *emb_layout_ : *prev_layout_; }
const Layout& Model::output_layout() const { return *layers_.back().layout; }

std::vector<int64_t> Model::input_shape() const {
  const Layout& l = input_layout();
  const int64_t B = plan_.train.pipeline_micro_batch();
  return {B / l.batch_parts, plan_.train.seq / l.seq_parts, plan_.model.hidden};
}

TokenBlock Model::token_block() const {
  return {plan_.embedding.dp, emb_co_.dp, plan_.embedding.ulysses, emb_co_.ulysses};
}

int64_t Model::local_param_count() const {
  int64_t n = 0;
  for (const auto& u : units_) n += u.spec.numel;
  return n;
}

at::Tensor Model::norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor* b) const {
  if (plan_.model.norm == NormKind::kLayerNorm)
    return at::layer_norm(x, {x.size(-1)}, w, b ? *b : at::Tensor(), kNormEps);
  return x * at::rsqrt(x.pow(2).mean(-1, true) + kNormEps) * w;
}

at::Tensor Model::embed(const at::Tensor& tokens) {
  const LayerStrategy& e = plan_.embedding;
  Unit* wte = find_unit("wte");
  at::Tensor wte_full, wpe_full;
  at::Tensor w = wte->weights(&wte_full)[0];
  at::Tensor x;
  if (e.tp == 1) {
    x = at::embedding(w, tokens);
  } else {
    const int64_t vlen = w.size(0);
    at::Tensor in = tokens.ge(vocab_start_).logical_and(tokens.lt(vocab_start_ + vlen));
    at::Tensor idx = (tokens - vocab_start_) * in.to(at::kLong);
    x = at::embedding(w, idx) * in.unsqueeze(-1).to(at::kFloat);
    x = e.sp ? reduce_scatter_seq(x, *emb_tp_) : reduce_from(x, *emb_tp_);
  }
  if (plan_.model.position == PositionKind::kLearned) {
    at::Tensor wpe = find_unit("wpe")->weights(&wpe_full)[0];
    if (e.sp && e.tp > 1) wpe = copy_to(wpe, *emb_tp_);
    const int64_t t = x.size(1);
    const int64_t pos0 = emb_layout_->seq_idx[stage_comm_->rank()] * t;
    x = x + wpe.narrow(0, pos0, t).unsqueeze(0);
  }
  // The lookup's backward reads only the indices and the position add's reads nothing saved: the
  // gathered ZeRO-3 tables are not needed again.
  drop_gathered(wte_full);
  drop_gathered(wpe_full);
  return x;
}

at::Tensor Model::forward_layers(at::Tensor x) {
  const Layout* cur = &input_layout();
  for (const LayerCtx& L : layers_) {
    x = redistribute(x, *stage_comm_, *cur, *L.layout);
    if (L.st.recompute == Recompute::kFull) {
      const LayerCtx* lp = &L;
      // Recomputed layers gather their ZeRO-3 parameters again inside the recomputation, so the
      // gathered buffer is never kept between forward and backward.
      x = recompute([this, lp](const std::vector<at::Tensor>& in) { return layer_forward(*lp, in[0], false); }, {x});
    } else {
      x = layer_forward(L, x, true);
    }
    cur = L.layout;
  }
  return x;
}

namespace {

at::Tensor causal_attention(const std::vector<at::Tensor>& in) {
  at::Tensor q = in[0].transpose(1, 2), k = in[1].transpose(1, 2), v = in[2].transpose(1, 2);  // [b, h, T, d]
  if (k.size(1) != q.size(1)) {
    k = k.repeat_interleave(q.size(1) / k.size(1), 1);
    v = v.repeat_interleave(q.size(1) / v.size(1), 1);
  }
  const int64_t T = q.size(2);
  at::Tensor s = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(q.size(3))));
  at::Tensor mask = at::ones({T, T}, q.options().dtype(at::kBool)).triu(1);
  s = s.masked_fill(mask, -std::numeric_limits<float>::infinity());
  return at::matmul(at::softmax(s, -1), v).transpose(1, 2);  // [b, T, h, d]
}

// Rotary embedding (rotate-half form) for positions [pos0, pos0 + t) of x [b, t, h, d].
at::Tensor rope(const at::Tensor& x, int64_t pos0) {
  const int64_t t = x.size(1), d = x.size(3), half = d / 2;
  const at::TensorOptions f64 = x.options().dtype(at::kDouble);
  at::Tensor inv = at::pow(kRopeTheta, -at::arange(0, half, f64) * 2.0 / static_cast<double>(d));
  at::Tensor ang = at::outer(at::arange(pos0, pos0 + t, f64), inv);  // [t, half]
  at::Tensor emb = at::cat({ang, ang}, -1);
  at::Tensor c = emb.cos().to(at::kFloat).view({1, t, 1, d});
  at::Tensor s = emb.sin().to(at::kFloat).view({1, t, 1, d});
  at::Tensor rot = at::cat({-x.narrow(3, half, d - half), x.narrow(3, 0, half)}, -1);
  return x * c + rot * s;
}

struct Idx {
  std::map<std::string, int> m;
  explicit Idx(const UnitSpec& u) {
    for (size_t i = 0; i < u.params.size(); ++i) {
      const std::string& n = u.params[i].name;
      m[n.substr(n.find('.', n.find('.') + 1) + 1)] = static_cast<int>(i);
    }
  }
  bool has(const std::string& k) const { return m.count(k) > 0; }
  int operator[](const std::string& k) const {
    auto it = m.find(k);
    WEFT_ASSERT(it != m.end(), "layer parameter " + k + " missing");
    return it->second;
  }
};

}  // namespace

at::Tensor Model::attention(const LayerCtx& L, const std::vector<at::Tensor>& w, const at::Tensor& h) {
  const Idx I(units_[L.unit].spec);
  const int64_t b = h.size(0), t = h.size(1), d = head_dim(L.shape);
  auto kv_param = [&](const std::string& k) { return copy_to(w[I[k]], *L.kvrep); };
  at::Tensor q = at::linear(h, w[I["attn.wq"]], I.has("attn.bq") ? w[I["attn.bq"]] : at::Tensor());
  at::Tensor k = at::linear(h, kv_param("attn.wk"), I.has("attn.bk") ? kv_param("attn.bk") : at::Tensor());
  at::Tensor v = at::linear(h, kv_param("attn.wv"), I.has("attn.bv") ? kv_param("attn.bv") : at::Tensor());
  q = q.view({b, t, L.heads_local, d});
  k = k.view({b, t, L.kv_local, d});
  v = v.view({b, t, L.kv_local, d});
  if (plan_.model.position == PositionKind::kRope) {
    const int64_t pos0 = static_cast<int64_t>(L.co.ulysses) * t;
    q = rope(q, pos0);
    k = rope(k, pos0);
  }
  const int u = L.ulysses->size();
  if (u > 1) {
    if (L.kv_local % u != 0) {
      k = k.repeat_interleave(L.heads_local / L.kv_local, 2);
      v = v.repeat_interleave(L.heads_local / L.kv_local, 2);
    }
    q = seq_to_heads(q, *L.ulysses);
    k = seq_to_heads(k, *L.ulysses);
    v = seq_to_heads(v, *L.ulysses);
  }
  at::Tensor ctx = L.st.recompute == Recompute::kSelective ? recompute(causal_attention, {q, k, v})
                                                            : causal_attention({q, k, v});
  if (u > 1) ctx = heads_to_seq(ctx, *L.ulysses);
  return at::linear(ctx.reshape({b, t, L.heads_local * d}), w[I["attn.wo"]]);
}

at::Tensor Model::layer_forward(const LayerCtx& L, const at::Tensor& x0, bool release) {
  at::Tensor gathered;
  std::vector<at::Tensor> w = units_[L.unit].weights(&gathered);
  const Idx I(units_[L.unit].spec);
  const bool tp = L.st.tp > 1, sp = L.st.sp && tp;
  auto rep = [&](const std::string& k) { return sp ? copy_to(w[I[k]], *L.tp) : w[I[k]]; };
  auto enter = [&](const at::Tensor& h) { return !tp ? h : sp ? gather_seq(h, *L.tp) : copy_to(h, *L.tp); };
  auto leave = [&](const at::Tensor& h) { return !tp ? h : sp ? reduce_scatter_seq(h, *L.tp) : reduce_from(h, *L.tp); };
  const bool nb = I.has("ln1.bias");

  at::Tensor ln1b = nb ? rep("ln1.bias") : at::Tensor();
  at::Tensor h = norm(x0, rep("ln1.weight"), nb ? &ln1b : nullptr);
  at::Tensor a = leave(attention(L, w, enter(h)));
  if (I.has("attn.bo")) a = a + rep("attn.bo");
  at::Tensor x = x0 + a;

  at::Tensor ln2b = nb ? rep("ln2.bias") : at::Tensor();
  h = enter(norm(x, rep("ln2.weight"), nb ? &ln2b : nullptr));
  at::Tensor o;
  if (L.shape.ffn_kind == FfnKind::kGelu) {
    at::Tensor f = at::linear(h, w[I["mlp.fc1"]], I.has("mlp.fc1_bias") ? w[I["mlp.fc1_bias"]] : at::Tensor());
    o = leave(at::linear(at::gelu(f, "tanh"), w[I["mlp.fc2"]]));
    if (I.has("mlp.fc2_bias")) o = o + rep("mlp.fc2_bias");
  } else {
    at::Tensor g = at::linear(h, w[I["mlp.gate"]], I.has("mlp.gate_bias") ? w[I["mlp.gate_bias"]] : at::Tensor());
    at::Tensor up = at::linear(h, w[I["mlp.up"]], I.has("mlp.up_bias") ? w[I["mlp.up_bias"]] : at::Tensor());
    o = leave(at::linear(at::silu(g) * up, w[I["mlp.down"]]));
    if (I.has("mlp.down_bias")) o = o + rep("mlp.down_bias");
  }
  w.clear();
  return release ? units_[L.unit].release(x + o, gathered) : x + o;
}

at::Tensor Model::head_loss(const at::Tensor& x_in, const at::Tensor& targets) {
  const LayerStrategy& e = plan_.embedding;
  const bool tp = e.tp > 1, sp = e.sp && tp;
  at::Tensor x = redistribute(x_in, *stage_comm_, output_layout(), *emb_layout_);
  Unit* head = find_unit("head");
  at::Tensor head_full, table_full;
  std::vector<at::Tensor> w = head->weights(&head_full);
  auto rep = [&](const at::Tensor& t) { return sp ? copy_to(t, *emb_tp_) : t; };
  const bool nb = plan_.model.norm == NormKind::kLayerNorm;
  at::Tensor nbias = nb ? rep(w[1]) : at::Tensor();
  at::Tensor h = norm(x, rep(w[0]), nb ? &nbias : nullptr);
  if (tp) h = sp ? gather_seq(h, *emb_tp_) : copy_to(h, *emb_tp_);
  at::Tensor W;
  Unit* table = nullptr;
  if (!plan_.model.tied_embeddings) W = w.back();
  else if ((table = find_unit("wte_copy"))) W = table->weights(&table_full)[0];
  else W = (table = find_unit("wte"))->weights(&table_full)[0];
  at::Tensor logits = at::matmul(h, W.t());
  logits = logits.reshape({-1, logits.size(-1)});
  at::Tensor loss = vocab_parallel_cross_entropy(logits, targets.reshape({-1}), vocab_start_, *emb_tp_).sum();
  w.clear();
  W = at::Tensor();
  loss = head->release(loss, head_full);
  return table ? table->release(loss, table_full) : loss;
}

}  // namespace weft::runtime
