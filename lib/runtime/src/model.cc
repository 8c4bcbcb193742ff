#include "weft/runtime/model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/version.h>

#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <tuple>

#include "weft/core/assert.h"
#include "weft/runtime/data.h"

namespace weft::runtime {

namespace {


uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a 64
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

int head_dim(const LayerShape& s) { return s.head_dim > 0 ? s.head_dim : static_cast<int>(s.hidden / s.heads); }

}  // namespace

// ---- Unit ----

int64_t Unit::owned_begin() const { return spec.zero == 0 ? 0 : shard_rank * shard; }
int64_t Unit::owned_len() const { return spec.zero == 0 ? spec.numel : shard; }

std::vector<at::Tensor> Unit::weights(at::Tensor* gathered) {
  // The parameters of spec as views of a flat buffer of the unit, by one split of the buffer (gaps
  // and the tail as pieces of their own): its backward writes the buffer's gradient once, where a
  // narrow per parameter would write a whole-buffer gradient per parameter and add them up
  // (parameters x buffer of traffic: 0.6 s of a 384-tensor MoE layer's ZeRO-3 backward on an H100,
  // data/reference/h100).
  auto split = [&](const at::Tensor& buf) {
    std::vector<int64_t> sizes;
    std::vector<size_t> piece_of;
    int64_t at = 0;
    for (const auto& p : spec.params) {
      if (p.offset > at) sizes.push_back(p.offset - at);
      piece_of.push_back(sizes.size());
      sizes.push_back(p.numel());
      at = p.offset + p.numel();
    }
    if (buf.size(0) > at) sizes.push_back(buf.size(0) - at);
    const std::vector<at::Tensor> pieces = buf.split_with_sizes(sizes);
    std::vector<at::Tensor> out;
    out.reserve(spec.params.size());
    for (size_t i = 0; i < spec.params.size(); ++i) out.push_back(pieces[piece_of[i]].view(spec.params[i].local_shape));
    return out;
  };
  if (spec.zero == 3 && sync->size() > 1) {
    at::Tensor full = gather_shard(shard_leaf, *sync, compute);
    if (gathered) *gathered = full;
    return split(full);
  }
  // The parameters are all local: the leaves, or the whole unit in the shard of a one-rank ZeRO-3.
  const bool whole = spec.zero == 3;
  const at::Tensor& base = whole ? shard_leaf : flat;
  if (base.scalar_type() == compute) return whole ? split(shard_leaf) : leaves;
  if (cast_version == static_cast<int64_t>(base._version()) && !cast.empty()) return cast;
  // The casts are differentiable (their backward hands fp32 gradients to the parameters) and keep
  // nothing for it, so one cast serves every micro-batch and recomputation of the step; made with
  // grad mode on even inside a forward without it (a full recompute's first pass), so that the
  // backward's pass can use them.
  cast.clear();  // the previous values' copies go before the new ones are made
  at::AutoGradMode grad_on(true);
  if (whole) {
    cast = split(shard_leaf.to(compute));
  } else {
    for (const auto& l : leaves) cast.push_back(l.to(compute));
  }
  cast_version = static_cast<int64_t>(base._version());
  return cast;
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

Model::Model(const Plan& p, int rank, GroupSet& groups, uint64_t seed, at::Device device, at::ScalarType dtype,
             at::ScalarType compute)
    : plan_(p),
      device_(device),
      dtype_(dtype),
      compute_(compute == at::ScalarType::Undefined ? dtype : compute),
      rank_(rank),
      S_(p.devices_per_stage()),
      groups_(groups) {
  const at::TensorOptions on = at::TensorOptions().dtype(dtype).device(device);
  stage_ = rank / S_;
  moe_loss_scale_ = 1.0 / std::max(1, p.train.micro_batches);
  const int pp = p.train.pp;
  std::vector<int> stage_ranks;
  for (int j = 0; j < S_; ++j) stage_ranks.push_back(stage_ * S_ + j);
  stage_comm_ = &groups.get(stage_ranks);
  emb_co_ = coords_of(rank, S_, p.embedding);
  emb_tp_ = &groups.get(group_of(rank, S_, pp, p.embedding, Axis::kTp));
  layouts_.push_back(group_layout(p.embedding, stage_));
  emb_layout_ = &layouts_.back();
  for (int c = 0; c < chunks(); ++c) {
    const int vs = group_stage(p, stage_, c);
    prev_layouts_.push_back(nullptr);
    if (vs == 0) continue;
    layouts_.push_back(group_layout(p.stages[vs - 1].layers.back(), stage_group(p, vs - 1)));
    prev_layouts_.back() = &layouts_.back();
  }
  {
    const int64_t V = p.model.vocab;
    const int64_t vshard = (V + p.embedding.tp - 1) / p.embedding.tp;
    vocab_start_ = std::min<int64_t>(V, emb_co_.tp * vshard);
  }

  for (auto& spec : unit_specs(p, rank)) {
    Unit u;
    u.spec = std::move(spec);
    u.compute = compute_;
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
    full_flat = full_flat.to(device, dtype);
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

  for (int c = 0; c < chunks(); ++c) {
    const Stage& st = p.stages[group_stage(p, stage_, c)];
    for (int i = 0; i < st.num_layers(); ++i) {
      LayerCtx L;
      L.chunk = c;
      L.index = st.first_layer + i;
      L.st = st.layers[i];
      L.co = coords_of(rank, S_, L.st);
      L.shape = p.model.layer(L.index);
      L.tp = &groups.get(group_of(rank, S_, pp, L.st, Axis::kTp));
      L.ulysses = &groups.get(group_of(rank, S_, pp, L.st, Axis::kUlysses));
      const int nkv = L.shape.kv_heads > 0 ? L.shape.kv_heads : L.shape.heads;
      L.kvrep = &groups.get(kv_replica_group(rank, S_, pp, L.st, nkv));
      L.cp = &groups.get(group_of(rank, S_, pp, L.st, Axis::kCp));
      layouts_.push_back(group_layout(L.st, stage_));
      L.layout = &layouts_.back();
      L.heads_local = L.shape.heads / L.st.tp;
      L.kv_local = nkv % L.st.tp == 0 ? nkv / L.st.tp : 1;
      L.ffn_local = L.shape.ffn / L.st.tp;
      const std::string name = "layers." + std::to_string(L.index);
      L.unit = -1;
      for (size_t k = 0; k < units_.size(); ++k) {
        if (units_[k].spec.name == name) L.unit = static_cast<int>(k);
        if (units_[k].spec.name == name + ".experts") L.expert_unit = static_cast<int>(k);
      }
      if (L.shape.moe.enabled()) {
        L.ep = &groups.get(group_of(rank, S_, pp, L.st, Axis::kEp));
        L.etp = &groups.get(group_of(rank, S_, pp, L.st, Axis::kEtp));
        L.experts_local = L.shape.moe.experts / L.ep->size();
        L.expert0 = L.ep->rank() * L.experts_local;
        L.stats = static_cast<int>(moe_stats_.size());
        MoeLayerStats st;
        st.layer = L.index;
        st.tokens.assign(static_cast<size_t>(L.shape.moe.experts), 0);
        moe_stats_.push_back(std::move(st));
      }
      layers_.push_back(L);
    }
  }
}

Unit* Model::find_unit(const std::string& name) {
  for (auto& u : units_)
    if (u.spec.name == name) return &u;
  return nullptr;
}

const ActivationLayout& Model::input_layout(int chunk) const {
  const ActivationLayout* prev = prev_layouts_.at(chunk);
  return prev ? *prev : *emb_layout_;
}
const ActivationLayout& Model::output_layout(int chunk) const {
  const ActivationLayout* out = nullptr;
  for (const LayerCtx& L : layers_)
    if (L.chunk == chunk) out = L.layout;
  return out ? *out : input_layout(chunk);
}

namespace {

// Rows [first, first + second) of micro-batch k held by batch block `idx` of layout l (its own
// rows under train.stage_dp_shares, else the plan's shares).
std::pair<int64_t, int64_t> batch_rows(const Plan& p, const ActivationLayout& l, int idx, int k) {
  int64_t offset = 0;
  if (!l.rows.empty()) {
    for (int i = 0; i < idx; ++i) offset += l.rows[i];
    return {offset, l.rows[idx]};
  }
  for (int i = 0; i < idx; ++i) offset += p.train.replica_rows(l.batch_parts, i, k);
  return {offset, p.train.replica_rows(l.batch_parts, idx, k)};
}

}  // namespace

ActivationLayout Model::group_layout(const LayerStrategy& s, int group) const {
  ActivationLayout l = layout_of(s, S_);
  if (!plan_.train.stage_dp_shares.empty()) l.rows = plan_.train.stage_dp_shares.at(group);
  return l;
}

std::vector<int64_t> Model::input_shape(int chunk, int k) const {
  const ActivationLayout& l = input_layout(chunk);
  const int64_t rows = batch_rows(plan_, l, l.batch_idx[stage_comm_->rank()], k).second;
  return {rows, plan_.train.seq / l.seq_parts, plan_.model.hidden};
}

TokenBlock Model::token_block() const {
  const LayerStrategy& e = plan_.embedding;
  // The embedding's tp ranks read the same tokens (Megatron-SP cuts their output afterwards).
  TokenBlock b{e.dp, emb_co_.dp, e.cp * e.ulysses, emb_co_.cp * e.ulysses + emb_co_.ulysses, {}};
  const int64_t T = plan_.train.seq, t = T / b.seq_parts;
  b.runs = seq_runs(T, e.cp, b.seq_idx * t, t);
  return b;
}

std::pair<int64_t, int64_t> Model::micro_batch_rows(int k) const {
  const LayerStrategy& e = plan_.embedding;
  const auto [offset, rows] = batch_rows(plan_, *emb_layout_, emb_co_.dp, k);
  return {plan_.train.micro_batch_offset(e.dp, k) + offset, rows};
}

namespace {
// Positions [1, t] of the sample positions `runs` (t in all).
at::Tensor positions(const std::vector<SeqRun>& runs, const at::TensorOptions& o) {
  std::vector<at::Tensor> parts;
  for (const SeqRun& r : runs) parts.push_back(at::arange(r.start, r.start + r.len, o.dtype(at::kLong)));
  return (parts.size() == 1 ? parts[0] : at::cat(parts)).unsqueeze(0);
}
}  // namespace

int64_t Model::local_param_count() const {
  int64_t n = 0;
  for (const auto& u : units_) n += u.spec.numel;
  return n;
}

at::Tensor Model::norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor* b) const {
  if (plan_.model.norm == NormKind::kLayerNorm)
    return at::layer_norm(x, {x.size(-1)}, w, b ? *b : at::Tensor(), plan_.model.norm_eps);
  return x * at::rsqrt(x.pow(2).mean(-1, true) + plan_.model.norm_eps) * w;
}

Status Model::set_documents(const at::Tensor& doc_ids) {
  if (!doc_ids.defined()) {
    doc_ids_ = doc_pos_ = at::Tensor();
    return {};
  }
  if (plan_.train.pp * plan_.train.vp != 1)
    return Error{ErrorKind::kBadInput, "packed documents: the plan has " + std::to_string(plan_.train.pp * plan_.train.vp) +
                                           " stages; documents run on single-stage plans only"};
  int cp = plan_.embedding.cp;
  for (const LayerCtx& L : layers_) cp = std::max(cp, L.st.cp);
  if (cp > 1)
    return Error{ErrorKind::kBadInput, "packed documents: the plan has cp " + std::to_string(cp) +
                                           "; documents run with cp 1 (their attention mask is not cut by the ring)"};
  if (seq_group_ && (doc_ids.dim() != 2 || doc_ids.size(1) % seq_group_->size() != 0))
    return Error{ErrorKind::kBadInput, "packed documents: document ids must be [samples, a multiple of the " +
                                           std::to_string(seq_group_->size()) + " ranks of the sequence group]"};
  if (!seq_group_ && (doc_ids.dim() != 2 || doc_ids.size(1) != plan_.train.seq))
    return Error{ErrorKind::kBadInput, "packed documents: document ids must be [samples, " +
                                           std::to_string(plan_.train.seq) + "], got " + std::to_string(doc_ids.dim()) +
                                           " dimensions"};
  at::Tensor ids = doc_ids.to(device_, at::kLong);
  const int64_t T = ids.size(1);
  at::Tensor idx = at::arange(T, ids.options()).unsqueeze(0).expand_as(ids);
  // A document starts where the id changes; each token's position is its distance to that start.
  at::Tensor starts = at::ones_like(ids, ids.options().dtype(at::kBool));
  if (T > 1) starts.narrow(1, 1, T - 1).copy_(ids.narrow(1, 1, T - 1).ne(ids.narrow(1, 0, T - 1)));
  at::Tensor start_of = std::get<0>(at::cummax(at::where(starts, idx, at::zeros_like(idx)), 1));
  doc_ids_ = ids;
  doc_pos_ = idx - start_of;
  return {};
}

Status Model::set_sequence_group(Comm* group) {
  if (group && group->size() > 1) {
    if (plan_.train.pp * plan_.train.vp != 1 || plan_.embedding.ulysses != 1)
      return Error{ErrorKind::kBadInput, "variable-length steps run plans of one stage with Ulysses 1"};
    for (const LayerCtx& L : layers_) {
      if (L.st.ulysses != 1 || L.st.tp != plan_.embedding.tp || (L.st.tp > 1 && L.st.sp != plan_.embedding.sp))
        return Error{ErrorKind::kBadInput, "variable-length steps: layer " + std::to_string(L.index) + " has tp " +
                                               std::to_string(L.st.tp) + " and Ulysses " + std::to_string(L.st.ulysses) +
                                               "; the sequence groups replace Ulysses and need the embedding's tp and sp"};
      if (L.heads_local % group->size() != 0)
        return Error{ErrorKind::kBadInput, "variable-length steps: a sequence group of " + std::to_string(group->size()) +
                                               " ranks does not divide layer " + std::to_string(L.index) + "'s " +
                                               std::to_string(L.heads_local) + " attention heads per tp rank"};
    }
  }
  seq_group_ = group;
  return {};
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
    x = at::embedding(w, idx) * in.unsqueeze(-1).to(w.scalar_type());
    x = e.sp ? reduce_scatter_seq(x, *emb_tp_) : reduce_from(x, *emb_tp_);
  }
  if (plan_.model.position == PositionKind::kLearned) {
    at::Tensor wpe = find_unit("wpe")->weights(&wpe_full)[0];
    if (e.sp && e.tp > 1) wpe = copy_to(wpe, *emb_tp_);
    const int64_t t = x.size(1);
    // A sequence group's rank r holds block r of the sample; with Megatron-SP its tp ranks cut it
    // again. Otherwise the embedding's layout says which positions (two mirrored chunks under cp).
    const bool sp = e.sp && e.tp > 1;
    if (seq_group_) {
      const int64_t pos0 = (seq_group_->rank() * (sp ? e.tp : 1) + (sp ? emb_co_.tp : 0)) * t;
      if (doc_pos_.defined())
        x = x + at::embedding(wpe, doc_pos_.narrow(1, pos0, t));
      else
        x = x + wpe.narrow(0, pos0, t).unsqueeze(0);
    } else {
      const std::vector<SeqRun> runs = block_runs(*emb_layout_, stage_comm_->rank(), plan_.train.seq);
      if (doc_pos_.defined())
        x = x + at::embedding(wpe, doc_pos_.narrow(1, runs[0].start, t));  // cp 1 (set_documents): one run
      else if (runs.size() == 1)
        x = x + wpe.narrow(0, runs[0].start, t).unsqueeze(0);
      else
        x = x + at::embedding(wpe, positions(runs, tokens.options()));
    }
  }
  // The lookup's backward reads only the indices and the position add's reads nothing saved: the
  // gathered ZeRO-3 tables are not needed again.
  drop_gathered(wte_full);
  drop_gathered(wpe_full);
  return x;
}

at::Tensor Model::forward_layers(at::Tensor x, int chunk) {
  const ActivationLayout* cur = &input_layout(chunk);
  for (const LayerCtx& L : layers_) {
    if (L.chunk != chunk) continue;
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

// Rotary embedding (rotate-half form, as GPT-NeoX and Hugging Face's Llama apply it) of x [b, t, h, d]
// with base `theta` (the model's rope_theta) at positions [pos0, pos0 + t), or at the positions
// `pos` [b, t] when given (packed documents).
at::Tensor rope(const at::Tensor& x, double theta, int64_t pos0, const at::Tensor& pos = at::Tensor()) {
  const int64_t b = x.size(0), t = x.size(1), d = x.size(3), half = d / 2;
  const at::TensorOptions f64 = x.options().dtype(at::kDouble);
  at::Tensor inv = at::pow(theta, -at::arange(0, half, f64) * 2.0 / static_cast<double>(d));
  at::Tensor p = pos.defined() ? pos.to(at::kDouble) : at::arange(pos0, pos0 + t, f64).unsqueeze(0);  // [1 or b, t]
  at::Tensor ang = p.unsqueeze(-1) * inv;  // [1 or b, t, half]
  at::Tensor emb = at::cat({ang, ang}, -1);
  const int64_t rows = pos.defined() ? b : 1;
  at::Tensor c = emb.cos().to(x.scalar_type()).view({rows, t, 1, d});
  at::Tensor s = emb.sin().to(x.scalar_type()).view({rows, t, 1, d});
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

// An FFN's matrices on h, as a dense layer, a MoE layer's shared experts and each routed expert run
// them: GELU (fc1, fc2) or SwiGLU (gate, up, down), the column-parallel matrices with their biases
// where the unit has them (names under `pre`), without the output's reduction and bias.
at::Tensor ffn_core(FfnKind kind, const at::Tensor& h, const std::vector<at::Tensor>& w, const Idx& I,
                    const std::string& pre) {
  auto weight = [&](const char* k) { return w[I[pre + k]]; };
  auto bias = [&](const char* k) { return I.has(pre + k) ? w[I[pre + k]] : at::Tensor(); };
  if (kind == FfnKind::kGelu)
    return at::linear(at::gelu(at::linear(h, weight("fc1"), bias("fc1_bias")), "tanh"), weight("fc2"));
  at::Tensor g = at::linear(h, weight("gate"), bias("gate_bias"));
  at::Tensor up = at::linear(h, weight("up"), bias("up_bias"));
  return at::linear(at::silu(g) * up, weight("down"));
}

}  // namespace

at::Tensor Model::attention(const LayerCtx& L, const std::vector<at::Tensor>& w, const at::Tensor& h) {
  const Idx I(units_[L.unit].spec);
  const int64_t b = h.size(0), t = h.size(1), d = head_dim(L.shape);
  // K/V weights (and biases) held by every rank of a kv-replica group (tp > kv heads) see different
  // data on each: their gradients are summed over the group, in one all-reduce of all of them.
  at::Tensor wk = w[I["attn.wk"]], wv = w[I["attn.wv"]];
  at::Tensor bk = I.has("attn.bk") ? w[I["attn.bk"]] : at::Tensor(), bv = I.has("attn.bv") ? w[I["attn.bv"]] : at::Tensor();
  if (L.kvrep->size() > 1) {
    std::vector<at::Tensor> parts{wk.reshape({-1}), wv.reshape({-1})};
    if (bk.defined()) parts.insert(parts.end(), {bk, bv});
    std::vector<int64_t> sizes;
    for (const auto& t : parts) sizes.push_back(t.numel());
    const std::vector<at::Tensor> summed = copy_to(at::cat(parts), *L.kvrep).split_with_sizes(sizes);
    wk = summed[0].view(wk.sizes());
    wv = summed[1].view(wv.sizes());
    if (bk.defined()) bk = summed[2], bv = summed[3];
  }
  at::Tensor q = at::linear(h, w[I["attn.wq"]], I.has("attn.bq") ? w[I["attn.bq"]] : at::Tensor());
  at::Tensor k = at::linear(h, wk, bk);
  at::Tensor v = at::linear(h, wv, bv);
  if (L.shape.qk_norm_full) {
    // OLMoE's RMSNorm of all heads' queries at once and of all keys at once: a tp rank holds its
    // heads' part of each, so the squares are summed over tp (forward and backward: each rank's
    // part of the sum feeds every rank's norm), and each rank scales its part by its weights.
    const double nq = static_cast<double>(L.shape.heads) * d, nk = static_cast<double>(L.shape.kv_heads) * d;
    at::Tensor ss = at::cat({q.pow(2).sum(-1, true), k.pow(2).sum(-1, true)}, -1);
    if (L.st.tp > 1) ss = copy_to(reduce_from(ss, *L.tp), *L.tp);
    const double eps = plan_.model.norm_eps;
    q = q * at::rsqrt(ss.narrow(-1, 0, 1) / nq + eps) * w[I["attn.q_norm"]];
    k = k * at::rsqrt(ss.narrow(-1, 1, 1) / nk + eps) * w[I["attn.k_norm"]];
  }
  q = q.view({b, t, L.heads_local, d});
  k = k.view({b, t, L.kv_local, d});
  v = v.view({b, t, L.kv_local, d});
  if (I.has("attn.q_norm") && !L.shape.qk_norm_full) {
    // Qwen3's per-head RMSNorm of queries and keys, before RoPE. One weight vector serves every
    // head, and a tp rank holds some heads (or a copy of a kv head): the gradients are summed over
    // tp (each copy of a kv head collects only its own query heads' part).
    at::Tensor qn = w[I["attn.q_norm"]], kn = w[I["attn.k_norm"]];
    if (L.st.tp > 1) {
      const std::vector<at::Tensor> both = copy_to(at::cat({qn, kn}), *L.tp).split_with_sizes({qn.numel(), kn.numel()});
      qn = both[0], kn = both[1];
    }
    q = norm(q, qn, nullptr);
    k = norm(k, kn, nullptr);
  }
  if (plan_.model.position == PositionKind::kRope) {
    // h is this rank's Ulysses block (after the tp gather of Megatron-SP): block co.cp * u +
    // co.ulysses of the cp order (geometry.h).
    const int64_t blk = seq_group_ ? seq_group_->rank() : static_cast<int64_t>(L.co.cp) * L.st.ulysses + L.co.ulysses;
    const std::vector<SeqRun> runs = seq_runs(plan_.train.seq, L.st.cp, blk * t, t);
    const int64_t pos0 = runs[0].start;
    at::Tensor pos;
    if (doc_pos_.defined()) pos = doc_pos_.narrow(1, pos0, t);  // cp 1: one run
    else if (runs.size() > 1) pos = positions(runs, h.options()).expand({b, t});
    q = rope(q, plan_.model.rope_theta, pos0, pos);
    k = rope(k, plan_.model.rope_theta, pos0, pos);
  }
  Comm& U = seq_group_ ? *seq_group_ : *L.ulysses;
  const int u = U.size();
  if (u > 1) {
    if (L.kv_local % u != 0) {
      // Fewer local kv heads than Ulysses ranks: copy each so that every rank receives whole heads,
      // the fewest copies that do (lcm(kv, u) heads; their query groups stay aligned).
      const int64_t copies = std::lcm(L.kv_local, static_cast<int64_t>(u)) / L.kv_local;
      k = k.repeat_interleave(copies, 2);
      v = v.repeat_interleave(copies, 2);
    }
    q = seq_to_heads(q, U);
    k = seq_to_heads(k, U);
    v = seq_to_heads(v, U);
  }
  std::vector<at::Tensor> in = {q, k, v};
  const bool sinks = I.has("attn.sinks");
  if (sinks) {
    // The sink logits of this rank's heads: its tp heads, and of those its Ulysses share.
    at::Tensor sk = w[I["attn.sinks"]];
    if (u > 1) sk = sk.narrow(0, static_cast<int64_t>(U.rank()) * (sk.size(0) / u), sk.size(0) / u);
    in.push_back(sk);
  }
  if (doc_ids_.defined()) in.push_back(doc_ids_);
  const int64_t window = L.shape.window;
  TensorFn attend = [window, sinks](const std::vector<at::Tensor>& x) { return banded_sink_attention(x, window, sinks); };
  if (L.cp->size() > 1) {
    Comm* ring = L.cp;
    const int64_t T = plan_.train.seq;
    attend = [ring, T](const std::vector<at::Tensor>& x) { return ring_attention(x[0], x[1], x[2], *ring, T); };
  }
  at::Tensor ctx = L.st.recompute == Recompute::kSelective ? recompute(attend, in) : attend(in);
  if (u > 1) ctx = heads_to_seq(ctx, U);
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
  at::Tensor hn = norm(x, rep("ln2.weight"), nb ? &ln2b : nullptr);
  // A dense FFN (or a MoE layer's shared experts) split by columns over tp, from the entered h.
  auto ffn = [&](const std::string& pre, const at::Tensor& h) {
    at::Tensor o = leave(ffn_core(L.shape.ffn_kind, h, w, I, pre));
    const std::string out_bias = pre + (L.shape.ffn_kind == FfnKind::kGelu ? "fc2_bias" : "down_bias");
    if (I.has(out_bias)) o = o + rep(out_bias);
    return o;
  };
  at::Tensor o;
  if (L.shape.moe.enabled()) {
    o = routed_experts(L, w, hn, release);
    if (L.shape.moe.shared_experts > 0) {
      at::Tensor shared = ffn("mlp.shared.", enter(hn));
      // Qwen2-MoE: each token's shared output scaled by sigmoid(hn . w), on the tokens this rank
      // holds in the layer's output layout (hn's: its sequence shard under SP, all of them else).
      if (I.has("mlp.shared_gate")) shared = shared * at::sigmoid(at::linear(hn, rep("mlp.shared_gate")));
      o = o + shared;
    }
  } else {
    o = ffn("mlp.", enter(hn));
  }
  w.clear();
  return release ? units_[L.unit].release(x + o, gathered) : x + o;
}

double MoeLayerStats::imbalance() const {
  int64_t most = 0, sum = 0;
  for (int64_t t : tokens) most = std::max(most, t), sum += t;
  return sum > 0 ? static_cast<double>(most) * static_cast<double>(tokens.size()) / static_cast<double>(sum) : 1.0;
}

double MoeLayerStats::rank_imbalance(int ep) const {
  const int64_t E = static_cast<int64_t>(tokens.size());
  if (ep <= 1 || E % ep != 0) return 1.0;
  int64_t most = 0, sum = 0;
  for (int64_t r = 0; r < ep; ++r) {
    int64_t on_rank = 0;
    for (int64_t e = r * (E / ep); e < (r + 1) * (E / ep); ++e) on_rank += tokens[static_cast<size_t>(e)];
    most = std::max(most, on_rank);
    sum += on_rank;
  }
  return sum > 0 ? static_cast<double>(most) * ep / static_cast<double>(sum) : 1.0;
}

namespace {

// Where MoE layer unit u keeps its balancing bias: its place [off, off + E) in the flat buffer, and
// [lo, hi) of it in this rank's owned range (ZeRO-3's shard; empty when hi <= lo).
struct BiasPlace {
  int64_t off = 0, E = 0, lo = 0, hi = 0;
};
BiasPlace bias_place(const Unit& u) {
  const ParamSpec& p = u.spec.params[static_cast<size_t>(Idx(u.spec)["mlp.expert_bias"])];
  const int64_t off = p.offset, E = p.numel();
  return {off, E, std::max(off, u.owned_begin()), std::min(off + E, u.owned_begin() + u.owned_len())};
}

}  // namespace

at::Tensor Model::expert_bias(const LayerCtx& L) {
  at::NoGradGuard no_grad;
  Unit& u = units_[L.unit];
  const BiasPlace b = bias_place(u);
  if (u.spec.zero < 3) return u.flat.narrow(0, b.off, b.E).to(at::kFloat);
  if (u.sync->size() == 1) return u.shard_leaf.narrow(0, b.off, b.E).to(at::kFloat);
  // ZeRO-3: each rank puts in the part its shard holds; the sum is the whole fp32 bias (the
  // gathered weights are in the compute dtype, too coarse for steps of bias_rate).
  at::Tensor whole = at::zeros({b.E}, u.shard_leaf.options().dtype(at::kFloat));
  if (b.hi > b.lo)
    whole.narrow(0, b.lo - b.off, b.hi - b.lo).copy_(u.shard_leaf.narrow(0, b.lo - u.owned_begin(), b.hi - b.lo));
  u.sync->allreduce_sum(whole);
  return whole;
}

void Model::update_expert_bias() {
  at::NoGradGuard no_grad;
  for (const LayerCtx& L : layers_) {
    const MoeSpec& moe = L.shape.moe;
    if (!moe.enabled() || !moe.expert_bias || moe.bias_rate == 0) continue;
    const std::vector<int64_t>& tokens = moe_stats_[L.stats].tokens;
    double mean = 0;
    for (int64_t t : tokens) mean += static_cast<double>(t);
    mean /= static_cast<double>(tokens.size());
    std::vector<float> step(tokens.size());
    for (size_t e = 0; e < tokens.size(); ++e) {
      const double gap = mean - static_cast<double>(tokens[e]);
      step[e] = static_cast<float>(gap > 0 ? moe.bias_rate : gap < 0 ? -moe.bias_rate : 0.0);
    }
    Unit& u = units_[L.unit];
    const BiasPlace b = bias_place(u);
    const at::Tensor delta = at::tensor(step).to(device_);
    // The same figures on every rank of the stage, so every copy moves alike: the whole bias in
    // the full buffer, or the part of it in this rank's ZeRO-3 shard.
    if (u.spec.zero < 3) {
      u.flat.narrow(0, b.off, b.E).add_(delta.to(u.flat.scalar_type()));
    } else if (b.hi > b.lo) {
      u.shard_leaf.detach()
          .narrow(0, b.lo - u.owned_begin(), b.hi - b.lo)
          .add_(delta.narrow(0, b.lo - b.off, b.hi - b.lo).to(u.shard_leaf.scalar_type()));
    }
  }
}

void Model::reset_moe_stats() {
  for (MoeLayerStats& s : moe_stats_) {
    std::fill(s.tokens.begin(), s.tokens.end(), 0);
    s.aux_loss = 0;
    s.micro_batches = 0;
    s.inter_node_copies = 0;
    if (s.sample_counts.defined()) s.sample_counts.zero_();
  }
}

void Model::trace_routing(bool on) {
  trace_routing_ = on;
  for (MoeLayerStats& s : moe_stats_)
    s.sample_counts = on ? at::zeros({plan_.train.global_batch, static_cast<int64_t>(s.tokens.size())}, at::kLong)
                         : at::Tensor();
}

at::Tensor Model::routed_experts(const LayerCtx& L, const std::vector<at::Tensor>& w, const at::Tensor& hn,
                                 bool release) {
  const MoeSpec& moe = L.shape.moe;
  const Idx I(units_[L.unit].spec);
  const bool tp = L.st.tp > 1, sp = L.st.sp && tp;
  // This rank's own tokens: its sequence block (under tp without sequence parallelism the tp ranks
  // hold the same block, and each routes a tp-th of it).
  const at::Tensor own = tp && !sp ? split_seq(hn, *L.tp) : hn;
  const int64_t b = own.size(0), t = own.size(1), H = own.size(2);
  const at::Tensor X = own.reshape({b * t, H});
  const int64_t n = X.size(0);
  const int E = moe.experts, k = moe.top_k;
  const auto cpu_long = at::TensorOptions().dtype(at::kLong);

  // Router, in fp32 (Megatron's --moe-router-dtype fp32): every rank scores its own tokens, so the
  // replicated router's gradient is summed over tp.
  at::Tensor wr = w[I["mlp.router"]];
  if (tp) wr = copy_to(wr, *L.tp);
  const at::Tensor logits = at::linear(X.to(at::kFloat), wr.to(at::kFloat));  // [n, E]
  const at::Tensor scores = moe.score == RouterScore::kSigmoid ? logits.sigmoid() : logits.softmax(-1);
  auto [topv, topi] = route_top_k(scores, moe.expert_bias ? expert_bias(L) : at::Tensor(), k, moe.groups,
                                  moe.group_top_k, moe.group_score_top);
  at::Tensor gate = topv;
  if (moe.norm_topk) gate = gate / (gate.sum(-1, true) + (moe.score == RouterScore::kSigmoid ? 1e-20 : 0.0));
  if (moe.routed_scale != 1.0) gate = gate * moe.routed_scale;

  // Dispatch: the (token, slot) copies sorted by expert (ties by copy, so the order is fixed),
  // sent to the ep rank holding their expert.
  const at::Tensor expert_of = topi.reshape({-1});  // [n k]
  const at::Tensor order = at::argsort(expert_of * (n * k) + at::arange(n * k, expert_of.options()));
  const at::Tensor per_expert = at::bincount(expert_of, {}, E).to(at::kCPU);  // [E]
  const int ep = L.ep->size(), per = L.experts_local;
  std::vector<int64_t> send(ep), recv(ep);
  const at::Tensor send_counts = per_expert.view({ep, per}).contiguous();
  // Row j: what ep rank j sends this rank, per local expert.
  const at::Tensor from = ep > 1 ? L.ep->alltoall(send_counts).to(at::kCPU) : send_counts;
  for (int j = 0; j < ep; ++j) {
    send[j] = send_counts[j].sum().item<int64_t>();
    recv[j] = from[j].sum().item<int64_t>();
  }
  const at::Tensor xs = X.index_select(0, order.div(k, "floor"));
  at::Tensor xr = alltoall_rows(xs, *L.ep, send, recv);  // by source rank, then local expert
  // Expert tensor parallelism: the etp ranks of an expert shard see every copy any of them received.
  const int et = L.etp->size();
  at::Tensor segments = from;  // [sources, per]: copies per (source, local expert), in xr's order
  std::vector<int64_t> member_rows{xr.size(0)};
  if (et > 1) {
    const at::Tensor all = L.etp->allgather(from.contiguous()).to(at::kCPU);  // [et, ep, per]
    member_rows.clear();
    for (int i = 0; i < et; ++i) member_rows.push_back(all[i].sum().item<int64_t>());
    xr = gather_rows(xr, *L.etp, member_rows);
    segments = all.reshape({et * ep, per});
  }
  // Group the received copies by local expert, then run each expert on its rows.
  const int64_t nseg = segments.size(0);
  const auto seg = segments.accessor<int64_t, 2>();
  std::vector<int64_t> seg_start(static_cast<size_t>(nseg * per));
  int64_t at_row = 0;
  for (int64_t s = 0; s < nseg; ++s)
    for (int e = 0; e < per; ++e) seg_start[s * per + e] = at_row, at_row += seg[s][e];
  std::vector<int64_t> perm_v;
  perm_v.reserve(static_cast<size_t>(at_row));
  std::vector<int64_t> rows_of(per, 0);
  for (int e = 0; e < per; ++e)
    for (int64_t s = 0; s < nseg; ++s) {
      for (int64_t r = 0; r < seg[s][e]; ++r) perm_v.push_back(seg_start[s * per + e] + r);
      rows_of[e] += seg[s][e];
    }
  const at::Tensor perm = at::tensor(perm_v, cpu_long).to(X.device());
  const at::Tensor xe = xr.index_select(0, perm);
  at::Tensor gathered;
  Unit& eu = units_[L.expert_unit];
  std::vector<at::Tensor> we = eu.weights(&gathered);
  const Idx J(eu.spec);
  // One split, not a narrow per expert: the backward of a split concatenates the experts' input
  // gradients once, where each narrow's backward writes a gradient of all the rows (zeros but its
  // own) and autograd adds them up, experts x rows of traffic (data/reference/h100: 23 ms of a
  // 128-expert layer's backward on an H100).
  const std::vector<at::Tensor> xi = xe.split_with_sizes(rows_of);
  std::vector<at::Tensor> outs;
  for (int e = 0; e < per; ++e)
    outs.push_back(ffn_core(L.shape.ffn_kind, xi[e], we, J, "experts." + std::to_string(L.expert0 + e) + "."));
  we.clear();
  at::Tensor ye = at::cat(outs);
  if (release) ye = eu.release(ye, gathered);
  at::Tensor yr = ye.index_select(0, at::argsort(perm));
  if (et > 1) yr = reduce_scatter_rows(yr, *L.etp, member_rows);
  const at::Tensor ys = alltoall_rows(yr, *L.ep, recv, send);  // sorted copies, back home
  const at::Tensor y = ys.index_select(0, at::argsort(order)).view({n, k, H});  // (token, slot) order
  at::Tensor out = (y * gate.to(y.scalar_type()).unsqueeze(-1)).sum(1).view({b, t, H});

  // The stage's routing figures for this micro-batch: copies per expert, tokens and summed scores
  // (every rank of the stage holds distinct tokens), one all-reduce.
  const at::Tensor probs = moe.score == RouterScore::kSigmoid ? scores / (scores.sum(-1, true) + 1e-20) : scores;
  const at::Tensor prob_sum = probs.sum(0);  // [E], this rank's tokens
  at::Tensor fig = at::cat({per_expert.to(at::kDouble), at::full({1}, static_cast<double>(n), at::kDouble),
                            prob_sum.detach().to(at::kCPU, at::kDouble)});
  if (stage_comm_->size() > 1) {
    fig = fig.to(X.device());
    stage_comm_->allreduce_sum(fig);
    fig = fig.to(at::kCPU);
  }
  const at::Tensor copies = fig.narrow(0, 0, E);
  const double N = std::max(1.0, fig[E].item<double>());
  const double c = moe.aux_loss_coef * E / (N * N * k);
  const double aux = c * (copies * fig.narrow(0, E + 1, E)).sum().item<double>();
  if (moe.aux_loss_coef > 0 && at::GradMode::is_enabled()) {
    // This rank's part of the load-balancing loss: its tokens' summed scores against the stage's
    // copies per expert (the parts sum to the loss over the micro-batch).
    const at::Tensor part = (prob_sum * copies.to(prob_sum.device(), at::kFloat)).sum() * c;
    out = attach_loss(out, part, moe_loss_scale_);
  }
  if (!recomputing()) {
    MoeLayerStats& st = moe_stats_[L.stats];
    const auto cp = copies.to(at::kLong);
    for (int e = 0; e < E; ++e) st.tokens[e] += cp[e].item<int64_t>();
    st.aux_loss += aux;
    const int gpn = std::max(1, plan_.cluster.gpus_per_node);
    for (int j = 0; j < ep; ++j)
      if (L.ep->ranks()[j] / gpn != rank_ / gpn) st.inter_node_copies += send[j];
    if (trace_routing_ && n > 0) {
      // This micro-batch's rows in the layer's layout: its batch block of the micro-batch (the
      // micro-batch's index is the number of its forwards so far this step).
      const int mb = st.micro_batches;
      const int blk = L.layout->batch_idx[stage_comm_->rank()];
      const int64_t first = plan_.train.micro_batch_offset(L.st.dp, mb) + batch_rows(plan_, *L.layout, blk, mb).first;
      std::vector<int64_t> sample_of(static_cast<size_t>(b));
      for (int64_t r = 0; r < b; ++r) {
        const int64_t pos = first + r;
        sample_of[r] = sample_order_ ? (*sample_order_)[pos] : pos;
      }
      const at::Tensor row_sample = at::tensor(sample_of, cpu_long).repeat_interleave(t * k);  // [n k]
      const at::Tensor key = row_sample * E + expert_of.to(at::kCPU);
      st.sample_counts.view({-1}).add_(at::bincount(key, {}, st.sample_counts.numel()));
    }
    st.micro_batches += 1;
  }
  return tp && !sp ? gather_seq_copy(out, *L.tp) : out;
}

at::Tensor Model::head_loss(const at::Tensor& x_in, const at::Tensor& targets) {
  const LayerStrategy& e = plan_.embedding;
  const bool tp = e.tp > 1, sp = e.sp && tp;
  at::Tensor x = redistribute(x_in, *stage_comm_, output_layout(chunks() - 1), *emb_layout_);
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
  // Mixed precision: the softmax and the loss in fp32 (Megatron's cross entropy and autocast do the
  // same), from logits computed in the compute dtype.
  if (compute_ != dtype_) logits = logits.to(dtype_);
  at::Tensor loss;
  if (doc_ids_.defined()) {
    const at::Tensor t = targets.reshape({-1});
    const at::Tensor counted = t.ge(0);
    loss = (vocab_parallel_cross_entropy(logits, t.clamp_min(0), vocab_start_, *emb_tp_) * counted.to(logits.scalar_type()))
               .sum();
  } else {
    loss = vocab_parallel_cross_entropy(logits, targets.reshape({-1}), vocab_start_, *emb_tp_).sum();
  }
  w.clear();
  W = at::Tensor();
  loss = head->release(loss, head_full);
  return table ? table->release(loss, table_full) : loss;
}

}  // namespace weft::runtime
