#include "weft/runtime/ops.h"

#include <torch/autograd.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "weft/core/assert.h"
#include "weft/runtime/split_backward.h"

namespace weft::runtime {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

namespace {

// Non-tensor arguments (groups, layouts) are owned by the training run and outlive every autograd
// graph; they travel through the context as integers.
template <class T>
int64_t handle(T* p) {
  return reinterpret_cast<int64_t>(p);
}
template <class T>
T* from_handle(const c10::IValue& v) {
  return reinterpret_cast<T*>(v.toInt());
}

struct CopyTo : torch::autograd::Function<CopyTo> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    ctx->saved_data["c"] = comm;
    return x.view_as(x);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    at::Tensor r = g[0].contiguous().clone();
    from_handle<Comm>(ctx->saved_data["c"])->allreduce_sum(r);
    return {r, at::Tensor()};
  }
};

struct ReduceFrom : torch::autograd::Function<ReduceFrom> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& x, int64_t comm) {
    at::Tensor r = x.contiguous().clone();
    reinterpret_cast<Comm*>(comm)->allreduce_sum(r);
    return r;
  }
  static tensor_list backward(AutogradContext*, tensor_list g) { return {g[0], at::Tensor()}; }
};

// [n...] -> [size, n...] all-gather; backward reduce-scatter over the leading dimension.
struct AllGatherLead : torch::autograd::Function<AllGatherLead> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    ctx->saved_data["c"] = comm;
    return reinterpret_cast<Comm*>(comm)->allgather(x);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    Comm* c = from_handle<Comm>(ctx->saved_data["c"]);
    const auto shape = g[0].sizes().slice(1).vec();
    return {c->reduce_scatter(g[0]).view(shape), at::Tensor()};
  }
};

// [size, n...] -> [n...] reduce-scatter over the leading dimension; backward all-gather.
struct ReduceScatterLead : torch::autograd::Function<ReduceScatterLead> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    ctx->saved_data["c"] = comm;
    const auto shape = x.sizes().slice(1).vec();
    return reinterpret_cast<Comm*>(comm)->reduce_scatter(x).view(shape);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    return {from_handle<Comm>(ctx->saved_data["c"])->allgather(g[0]), at::Tensor()};
  }
};

// Equal-split all-to-all over the leading dimension; it is its own adjoint.
struct AllToAll : torch::autograd::Function<AllToAll> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    ctx->saved_data["c"] = comm;
    return reinterpret_cast<Comm*>(comm)->alltoall(x);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    return {from_handle<Comm>(ctx->saved_data["c"])->alltoall(g[0]), at::Tensor()};
  }
};

// Uneven all-to-all of rows; its backward is the reverse all-to-all.
struct AllToAllRows : torch::autograd::Function<AllToAllRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm, std::vector<int64_t> send,
                            std::vector<int64_t> recv) {
    ctx->saved_data["c"] = comm;
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    return reinterpret_cast<Comm*>(comm)->alltoall_v(x, send, recv);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    const std::vector<int64_t> send = ctx->saved_data["send"].toIntVector();
    const std::vector<int64_t> recv = ctx->saved_data["recv"].toIntVector();
    return {from_handle<Comm>(ctx->saved_data["c"])->alltoall_v(g[0].contiguous(), recv, send), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

// Every member's rows, concatenated in member order (uneven counts: padded to the largest for the
// all-gather).
at::Tensor allgather_rows(const at::Tensor& x, Comm& c, const std::vector<int64_t>& rows) {
  if (c.size() == 1) return x;
  const int64_t M = *std::max_element(rows.begin(), rows.end());
  std::vector<int64_t> shape = x.sizes().vec();
  shape[0] = M;
  at::Tensor padded = at::zeros(shape, x.options());
  padded.narrow(0, 0, x.size(0)).copy_(x);
  at::Tensor all = c.allgather(padded);  // [size, M, ...]
  std::vector<at::Tensor> parts;
  for (int i = 0; i < c.size(); ++i) parts.push_back(all[i].narrow(0, 0, rows[i]));
  return at::cat(parts);
}

// This member's rows of the rank-order sum over members of x [sum rows, ...].
at::Tensor reduce_scatter_rows_raw(const at::Tensor& x, Comm& c, const std::vector<int64_t>& rows) {
  if (c.size() == 1) return x;
  int64_t per_row = 1;
  for (int64_t i = 1; i < x.dim(); ++i) per_row *= x.size(i);
  std::vector<int64_t> counts;
  for (int64_t r : rows) counts.push_back(r * per_row);
  at::Tensor out;
  c.reduce_scatter_v_async(x.contiguous().reshape({-1}), counts, [&out](at::Tensor t) { out = std::move(t); }).wait();
  std::vector<int64_t> shape = x.sizes().vec();
  shape[0] = rows[c.rank()];
  return out.view(shape);
}

// gather_rows and reduce_scatter_rows: each the other's backward.
using RowsFn = at::Tensor (*)(const at::Tensor&, Comm&, const std::vector<int64_t>&);
template <RowsFn Forward, RowsFn Backward>
struct RowsOp : torch::autograd::Function<RowsOp<Forward, Backward>> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm, std::vector<int64_t> rows) {
    ctx->saved_data["c"] = comm;
    ctx->saved_data["rows"] = rows;
    return Forward(x, *reinterpret_cast<Comm*>(comm), rows);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    const std::vector<int64_t> rows = ctx->saved_data["rows"].toIntVector();
    return {Backward(g[0].contiguous(), *from_handle<Comm>(ctx->saved_data["c"]), rows), at::Tensor(), at::Tensor()};
  }
};
using GatherRows = RowsOp<allgather_rows, reduce_scatter_rows_raw>;
using ReduceScatterRows = RowsOp<reduce_scatter_rows_raw, allgather_rows>;

// All-gather along dim 1 of equal blocks: [b, t, ...] on each member -> [b, size * t, ...].
at::Tensor allgather_dim1(const at::Tensor& x, Comm& c) {
  at::Tensor all = c.allgather(x.contiguous());  // [size, b, t, ...]
  std::vector<int64_t> shape = x.sizes().vec();
  shape[1] *= c.size();
  return all.transpose(0, 1).reshape(shape);
}

struct SplitSeq : torch::autograd::Function<SplitSeq> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    ctx->saved_data["c"] = comm;
    Comm* c = reinterpret_cast<Comm*>(comm);
    const int64_t t = x.size(1) / c->size();
    return x.narrow(1, c->rank() * t, t).contiguous();
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    return {allgather_dim1(g[0], *from_handle<Comm>(ctx->saved_data["c"])), at::Tensor()};
  }
};

struct GatherSeqCopy : torch::autograd::Function<GatherSeqCopy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    ctx->saved_data["c"] = comm;
    return allgather_dim1(x, *reinterpret_cast<Comm*>(comm));
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    Comm* c = from_handle<Comm>(ctx->saved_data["c"]);
    const int64_t t = g[0].size(1) / c->size();
    return {g[0].narrow(1, c->rank() * t, t).contiguous(), at::Tensor()};
  }
};

struct AttachLoss : torch::autograd::Function<AttachLoss> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& loss, double scale) {
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["dtype"] = static_cast<int64_t>(loss.scalar_type());
    ctx->saved_data["device"] = loss.device().str();
    return x.view_as(x);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    const at::Device device(ctx->saved_data["device"].toStringRef());
    at::Tensor dl = at::full({}, ctx->saved_data["scale"].toDouble(), at::TensorOptions().dtype(dtype).device(device));
    return {g[0], dl, at::Tensor()};
  }
};

thread_local int recompute_depth = 0;

// Sample positions as a rank holds them: [local offset, sample start, length] pieces of its local
// sequence, in order.
struct Piece {
  int64_t local = 0, start = 0, len = 0;
};
std::vector<Piece> pieces_of(const std::vector<SeqRun>& runs) {
  std::vector<Piece> out;
  int64_t local = 0;
  for (const SeqRun& r : runs) {
    out.push_back({local, r.start, r.len});
    local += r.len;
  }
  return out;
}
// The pieces stage rank `rank` holds under layout l.
std::vector<Piece> pieces(const ActivationLayout& l, int rank, int64_t T) { return pieces_of(block_runs(l, rank, T)); }

// Rows [start, start + n) of each batch block of layout l in a micro-batch of B samples (its own
// rows, or B / batch_parts each).
std::vector<std::pair<int64_t, int64_t>> block_spans(const ActivationLayout& l, int64_t B) {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t at = 0;
  for (int b = 0; b < l.batch_parts; ++b) {
    const int64_t n = l.rows.empty() ? B / l.batch_parts : l.rows[b];
    out.push_back({at, n});
    at += n;
  }
  return out;
}

// Two layouts that differ only in how many samples each batch block holds (train.stage_dp_shares:
// the groups on either side of a pipeline boundary split micro-batches by their own devices'
// speed). Each rank takes the rows it holds under `to` from the ranks that hold them under `from`
// with its sequence block (the holder at its own place among the block's holders), by one
// equal-split all-to-all of pieces padded to the largest: a rank sends about its own block, not
// the stage's.
at::Tensor move_rows(const at::Tensor& x, Comm& stage, const ActivationLayout& from, const ActivationLayout& to) {
  const int S = stage.size(), me = stage.rank();
  const int64_t B = from.rows.empty() ? x.size(0) * from.batch_parts
                                      : std::accumulate(from.rows.begin(), from.rows.end(), int64_t{0});
  const auto fs = block_spans(from, B), ts = block_spans(to, B);
  // Place of rank i among the ranks holding its (batch, sequence) block, and how many hold it.
  std::vector<int> place(S, 0), holders(S, 0);
  for (int i = 0; i < S; ++i)
    for (int j = 0; j < S; ++j)
      if (from.batch_idx[j] == from.batch_idx[i] && from.seq_idx[j] == from.seq_idx[i]) {
        ++holders[i];
        if (j < i) ++place[i];
      }
  // Rows [first, first + n) that rank i sends rank j (n 0: none).
  auto piece = [&](int i, int j) -> std::pair<int64_t, int64_t> {
    if (from.seq_idx[i] != to.seq_idx[j] || place[i] != place[j] % holders[i]) return {0, 0};
    const auto [fa, fn] = fs[from.batch_idx[i]];
    const auto [ta, tn] = ts[to.batch_idx[j]];
    const int64_t a = std::max(fa, ta), e = std::min(fa + fn, ta + tn);
    return {a, std::max<int64_t>(0, e - a)};
  };
  int64_t pad = 0;
  for (int i = 0; i < S; ++i)
    for (int j = 0; j < S; ++j) pad = std::max(pad, piece(i, j).second);
  std::vector<int64_t> shape = x.sizes().vec();
  shape[0] = ts[to.batch_idx[me]].second;
  if (pad == 0) return at::zeros(shape, x.options());
  std::vector<int64_t> ins = x.sizes().vec();
  ins[0] = pad;
  ins.insert(ins.begin(), S);
  at::Tensor in = at::zeros(ins, x.options());
  const int64_t mine = fs[from.batch_idx[me]].first;
  for (int j = 0; j < S; ++j) {
    const auto [a, n] = piece(me, j);
    if (n > 0) in[j].narrow(0, 0, n).copy_(x.narrow(0, a - mine, n));
  }
  const at::Tensor out = stage.alltoall(in);
  std::vector<std::pair<int64_t, int>> order;  // (first row, sender)
  for (int i = 0; i < S; ++i)
    if (piece(i, me).second > 0) order.push_back({piece(i, me).first, i});
  std::sort(order.begin(), order.end());
  std::vector<at::Tensor> parts;
  for (const auto& [a, i] : order) parts.push_back(out[i].narrow(0, 0, piece(i, me).second));
  return parts.empty() ? at::zeros(shape, x.options()) : at::cat(parts, 0);
}

at::Tensor move_blocks(const at::Tensor& x, Comm& stage, const ActivationLayout& from, const ActivationLayout& to) {
  if (!from.rows.empty() || !to.rows.empty()) {
    // (train.stage_dp_shares keeps one layout in every layer: validate_plan.)
    WEFT_ASSERT(from.batch_parts == to.batch_parts && from.seq_parts == to.seq_parts && from.cp == to.cp &&
                    from.batch_idx == to.batch_idx && from.seq_idx == to.seq_idx,
                "re-splitting rows between layouts that differ otherwise");
    return move_rows(x, stage, from, to);
  }
  const int64_t bl = x.size(0), tl = x.size(1);
  const int64_t B = bl * from.batch_parts, T = tl * from.seq_parts;
  const int me = stage.rank();
  const int64_t ob = B / to.batch_parts;
  // This rank's block under `to`, cut from a tensor holding the whole sequence in sample order.
  auto cut = [&](const at::Tensor& whole, int64_t row0) {
    const std::vector<Piece> ps = pieces(to, me, T);
    if (ps.size() == 1) return whole.narrow(0, row0, ob).narrow(1, ps[0].start, ps[0].len).contiguous();
    std::vector<at::Tensor> parts;
    for (const Piece& p : ps) parts.push_back(whole.narrow(0, row0, ob).narrow(1, p.start, p.len));
    return at::cat(parts, 1);
  };
  if (from.batch_parts == 1 && from.seq_parts == 1)  // every rank holds everything: slice locally
    return cut(x, to.batch_idx[me] * ob);
  at::Tensor all = stage.allgather(x);  // [S, bl, tl, ...]
  std::vector<int64_t> shape = x.sizes().vec();
  shape[0] = B;
  shape[1] = T;
  at::Tensor full = at::empty(shape, x.options());
  std::set<std::pair<int, int>> seen;
  for (int j = 0; j < stage.size(); ++j) {
    const std::pair<int, int> blk{from.batch_idx[j], from.seq_idx[j]};
    if (!seen.insert(blk).second) continue;
    for (const Piece& p : pieces(from, j, T))
      full.narrow(0, blk.first * bl, bl).narrow(1, p.start, p.len).copy_(all[j].narrow(1, p.local, p.len));
  }
  return cut(full, to.batch_idx[me] * ob);
}

// ---- Ring attention (context parallelism) ----

// The sample positions of cp rank j's share (T / cp tokens: chunks j and 2 cp - 1 - j), as
// [local offset, sample start, length] pieces.
std::vector<Piece> share_pieces(int64_t T, int cp, int j) { return pieces_of(seq_runs(T, cp, j * (T / cp), T / cp)); }

// How the queries of one piece see the keys of another under the causal mask.
enum class Sight { kNone, kAll, kSome };
Sight sight(const Piece& q, const Piece& k) {
  if (q.start + q.len - 1 < k.start) return Sight::kNone;  // every key after every query
  if (q.start >= k.start + k.len - 1) return Sight::kAll;   // every key at or before every query
  return Sight::kSome;
}
// The scaled scores of queries Qa (piece a) against keys Kb (piece b), [..., a.len, b.len], with
// the keys that come after their query at -inf; `see` is sight(a, b), not kNone.
at::Tensor block_scores(const at::Tensor& Qa, const at::Tensor& Kb, const Piece& a, const Piece& b, Sight see,
                        double scale) {
  at::Tensor S = at::matmul(Qa, Kb.transpose(-2, -1)) * scale;
  if (see == Sight::kSome) {
    const at::TensorOptions pos = S.options().dtype(at::kLong);
    const at::Tensor qp = at::arange(a.start, a.start + a.len, pos).unsqueeze(1);
    const at::Tensor kp = at::arange(b.start, b.start + b.len, pos).unsqueeze(0);
    S.masked_fill_(kp.gt(qp), -std::numeric_limits<float>::infinity());
  }
  return S;
}

// Views of queries [b, t, h, d] as [b, hkv, g, t, d] (g query heads per key/value head, as
// banded_sink_attention's repeat_interleave groups them); no copy.
at::Tensor q5(const at::Tensor& q, int64_t hkv) {
  const int64_t b = q.size(0), t = q.size(1), h = q.size(2), d = q.size(3);
  return q.permute({0, 2, 1, 3}).reshape({b, hkv, h / hkv, t, d});
}
// Keys or values [b, t, hkv, d] as the [b, hkv, 1, t, d] view of a flat buffer's elements
// [off, off + numel), which they are copied into.
at::Tensor kv_into(const at::Tensor& buf, int64_t off, const at::Tensor& k) {
  const int64_t b = k.size(0), t = k.size(1), hkv = k.size(2), d = k.size(3);
  at::Tensor v = buf.narrow(0, off, k.numel()).view({b, hkv, 1, t, d});
  v.copy_(k.permute({0, 2, 1, 3}).unsqueeze(2));
  return v;
}
at::Tensor kv_view(const at::Tensor& buf, int64_t off, const at::Tensor& k) {
  return buf.narrow(0, off, k.numel()).view({k.size(0), k.size(2), 1, k.size(1), k.size(3)});
}

// Passes `mine` to the next member of the ring and returns what the previous one passed, with
// `work` run while the transfer is in flight.
at::Tensor ring_pass(Comm& c, const at::Tensor& mine, int tag, const std::function<void()>& work) {
  const int n = c.size(), next = (c.rank() + 1) % n, prev = (c.rank() + n - 1) % n;
  Pending sent = c.send(mine, next, tag);
  work();
  at::Tensor got = at::empty_like(mine);
  c.recv(got, prev, tag);
  sent.wait();
  return got;
}

// Causal attention over the cp ranks' shares, each rank keeping its queries while the keys and
// values go round the ring (Liu et al., "Ring Attention", 2023; Megatron-LM's and torchtitan's
// context parallelism): n steps, step s attending to the share of rank r - s, combined with the
// online softmax (a running maximum, sum and output per query). The key pieces a query piece
// cannot see are skipped, which is what the mirrored chunks balance: every rank computes the same
// number of blocks. Backward runs the ring again, the key/value gradients travelling with their
// keys and values and arriving home after n steps (FlashAttention-2's backward per block, from the
// saved output and log-sum-exp). Computes in fp32 (the inputs' dtype outside).
struct RingAttention : torch::autograd::Function<RingAttention> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q_in, const at::Tensor& k_in,
                            const at::Tensor& v_in, int64_t comm, int64_t T) {
    Comm& c = *reinterpret_cast<Comm*>(comm);
    const int n = c.size(), r = c.rank();
    const at::Tensor q = q_in.to(at::kFloat), k = k_in.to(at::kFloat), v = v_in.to(at::kFloat);
    const int64_t hkv = k.size(2), nk = k.numel();
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
    const at::Tensor Q = q5(q, hkv);
    const float inf = std::numeric_limits<float>::infinity();
    // The output accumulates in the layout it is returned in ([b, t, h, d]); m and l per query.
    at::Tensor out = at::zeros_like(q);
    at::Tensor acc = q5(out, hkv);
    at::Tensor m = at::full({Q.size(0), Q.size(1), Q.size(2), Q.size(3), 1}, -inf, Q.options());
    at::Tensor l = at::zeros_like(m);
    const std::vector<Piece> qp = share_pieces(T, n, r);
    at::Tensor buf = at::empty({2 * nk}, q.options());
    kv_into(buf, 0, k);
    kv_into(buf, nk, v);
    for (int s = 0; s < n; ++s) {
      const std::vector<Piece> kp = share_pieces(T, n, (r - s + n) % n);
      const at::Tensor Ks = kv_view(buf, 0, k), Vs = kv_view(buf, nk, v);
      auto work = [&] {
        for (const Piece& a : qp)
          for (const Piece& b : kp) {
            const Sight see = sight(a, b);
            if (see == Sight::kNone) continue;
            const at::Tensor S = block_scores(Q.narrow(3, a.local, a.len), Ks.narrow(3, b.local, b.len), a, b, see, scale);
            at::Tensor mr = m.narrow(3, a.local, a.len), lr = l.narrow(3, a.local, a.len), ar = acc.narrow(3, a.local, a.len);
            at::Tensor nm = at::maximum(mr, std::get<0>(S.max(-1, true)));
            at::Tensor base = at::where(nm.isinf(), at::zeros_like(nm), nm);  // rows that see nothing yet
            at::Tensor alpha = at::exp(mr - base), P = at::exp(S - base);
            lr.mul_(alpha).add_(P.sum(-1, true));
            ar.mul_(alpha).add_(at::matmul(P, Vs.narrow(3, b.local, b.len)));
            mr.copy_(nm);
          }
      };
      if (s + 1 < n) buf = ring_pass(c, buf, s, work);
      else work();
    }
    buf = at::Tensor();
    acc.div_(l);  // every query sees at least its own key: l > 0
    at::Tensor lse = m + at::log(l);
    ctx->save_for_backward({q_in, k_in, v_in, out, lse});
    ctx->saved_data["c"] = comm;
    ctx->saved_data["T"] = T;
    return q_in.scalar_type() == at::kFloat ? out.view_as(out) : out.to(q_in.scalar_type());
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor q = saved[0].to(at::kFloat), k = saved[1].to(at::kFloat), v = saved[2].to(at::kFloat);
    const at::Tensor &O = saved[3], &lse = saved[4];
    Comm& c = *from_handle<Comm>(ctx->saved_data["c"]);
    const int64_t T = ctx->saved_data["T"].toInt();
    const int n = c.size(), r = c.rank();
    const int64_t hkv = k.size(2), nk = k.numel();
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
    const at::Tensor dOut = g[0].to(at::kFloat);
    const at::Tensor Q = q5(q, hkv), dO = q5(dOut, hkv);
    const at::Tensor D = (dO * q5(O, hkv)).sum(-1, true);
    at::Tensor dq = at::zeros_like(q);
    at::Tensor dQ = q5(dq, hkv);
    // Keys, values and their gradient sums so far, travelling together.
    at::Tensor buf = at::empty({4 * nk}, q.options());
    kv_into(buf, 0, k);
    kv_into(buf, nk, v);
    buf.narrow(0, 2 * nk, 2 * nk).zero_();
    const std::vector<Piece> qp = share_pieces(T, n, r);
    for (int s = 0; s < n; ++s) {
      const std::vector<Piece> kp = share_pieces(T, n, (r - s + n) % n);
      const at::Tensor Ks = kv_view(buf, 0, k), Vs = kv_view(buf, nk, v);
      at::Tensor dK = kv_view(buf, 2 * nk, k), dV = kv_view(buf, 3 * nk, v);
      for (const Piece& a : qp)
        for (const Piece& b : kp) {
          const Sight see = sight(a, b);
          if (see == Sight::kNone) continue;
          const at::Tensor Qa = Q.narrow(3, a.local, a.len), dOa = dO.narrow(3, a.local, a.len);
          const at::Tensor Kb = Ks.narrow(3, b.local, b.len), Vb = Vs.narrow(3, b.local, b.len);
          const at::Tensor P = at::exp(block_scores(Qa, Kb, a, b, see, scale) - lse.narrow(3, a.local, a.len));
          dV.narrow(3, b.local, b.len).add_(at::matmul(P.transpose(-2, -1), dOa).sum(2, true));
          const at::Tensor dS = P * (at::matmul(dOa, Vb.transpose(-2, -1)) - D.narrow(3, a.local, a.len));
          dQ.narrow(3, a.local, a.len).add_(at::matmul(dS, Kb) * scale);
          dK.narrow(3, b.local, b.len).add_(at::matmul(dS.transpose(-2, -1), Qa).sum(2, true) * scale);
        }
      if (s + 1 < n) {
        buf = ring_pass(c, buf, 1000 + s, [] {});
      } else if (n > 1) {
        // The gradients held now are those of rank r + 1's keys and values: send them home.
        at::Tensor grads = buf.narrow(0, 2 * nk, 2 * nk).contiguous();
        buf = at::Tensor();
        buf = ring_pass(c, grads, 1000 + s, [] {});
      } else {
        buf = buf.narrow(0, 2 * nk, 2 * nk);
      }
    }
    // buf: this rank's key and value gradients, [b, hkv, 1, t, d] each.
    auto back = [&](int64_t off, const at::Tensor& like) {
      return kv_view(buf, off, like).squeeze(2).permute({0, 2, 1, 3}).to(saved[1].scalar_type()).contiguous();
    };
    at::Tensor dk = back(0, k), dv = back(nk, v);
    return {dq.to(saved[0].scalar_type()), dk, dv, at::Tensor(), at::Tensor()};
  }
};

struct Redistribute : torch::autograd::Function<Redistribute> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm, int64_t from, int64_t to) {
    ctx->saved_data["c"] = comm;
    ctx->saved_data["from"] = from;
    ctx->saved_data["to"] = to;
    return move_blocks(x, *reinterpret_cast<Comm*>(comm), *reinterpret_cast<const ActivationLayout*>(from),
                       *reinterpret_cast<const ActivationLayout*>(to));
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    at::Tensor r = move_blocks(g[0].contiguous(), *from_handle<Comm>(ctx->saved_data["c"]),
                               *from_handle<const ActivationLayout>(ctx->saved_data["to"]),
                               *from_handle<const ActivationLayout>(ctx->saved_data["from"]));
    return {r, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Gathered ZeRO-3 buffers are counted while their memory is allocated (gathered_param_bytes()).
std::atomic<int64_t> g_gathered_live{0}, g_gathered_peak{0};

struct CountedAlloc {
  at::DataPtr inner;
  int64_t bytes = 0;
};

void counted_free(void* ctx) {
  auto* c = static_cast<CountedAlloc*>(ctx);
  g_gathered_live -= c->bytes;
  delete c;  // frees the memory through the allocator's own deleter
}

// Makes `st` own `mem` (of st->nbytes() bytes), counted as a gathered buffer.
void adopt_counted(c10::StorageImpl* st, at::DataPtr mem) {
  const int64_t bytes = static_cast<int64_t>(st->nbytes());
  void* data = mem.get();
  const at::Device dev = mem.device();
  const int64_t live = g_gathered_live += bytes;
  int64_t peak = g_gathered_peak.load();
  while (live > peak && !g_gathered_peak.compare_exchange_weak(peak, live)) {
  }
  st->set_data_ptr_noswap(at::DataPtr(data, new CountedAlloc{std::move(mem), bytes}, &counted_free, dev));
}

// Another tensor on t's storage with a version counter of its own: writing the gathered values
// back into it in backward must not look like an in-place change of the views autograd saved.
at::Tensor storage_alias(const at::Tensor& t) {
  at::Tensor a = at::empty({0}, t.options());
  a.set_(t.storage(), t.storage_offset(), t.sizes(), t.strides());
  return a;
}

// A flat [size * shard] buffer for the gathered parameters (not yet filled).
at::Tensor new_gathered(const at::Tensor& shard, int size) {
  at::Tensor full = at::empty({shard.numel() * size}, shard.options());
  c10::StorageImpl* st = full.storage().unsafeGetStorageImpl();
  adopt_counted(st, st->set_data_ptr(at::DataPtr(nullptr, full.device())));
  return full;
}

// Frees the buffer's memory; every tensor sharing its storage (the autograd graph's saved views)
// stays valid as an object but must not be read until refill().
void free_gathered(const at::Tensor& full) {
  c10::StorageImpl* st = full.storage().unsafeGetStorageImpl();
  const size_t bytes = st->nbytes();
  st->set_data_ptr_noswap(at::DataPtr(nullptr, full.device()));
  st->set_nbytes(bytes);  // the size is kept for refill(); no memory backs it now
}

void refill_gathered(const at::Tensor& full, const at::Tensor& shard, Comm& c) {
  c10::StorageImpl* st = full.storage().unsafeGetStorageImpl();
  if (st->data() == nullptr) adopt_counted(st, st->allocator()->allocate(st->nbytes()));
  c.allgather_into_async(full, shard.to(full.scalar_type())).wait();
}

struct GatherShard : torch::autograd::Function<GatherShard> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& shard, int64_t comm, at::ScalarType compute) {
    ctx->saved_data["c"] = comm;
    ctx->saved_data["dtype"] = shard.scalar_type();
    Comm* c = reinterpret_cast<Comm*>(comm);
    const at::Tensor src = shard.to(compute);
    at::Tensor full = new_gathered(src, c->size());
    c->allgather_into_async(full, src).wait();
    ctx->saved_data["full"] = storage_alias(full);  // not the output variable itself (a cycle)
    return full;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    // The gradient is reduced in the shard's dtype (fp32 under mixed precision).
    at::Tensor r = from_handle<Comm>(ctx->saved_data["c"])->reduce_scatter(g[0].to(ctx->saved_data["dtype"].toScalarType()));
    // Every user of the gathered parameters has run its backward (their gradients are summed in
    // g[0]), so the buffer is freed now rather than when the graph is destroyed.
    free_gathered(ctx->saved_data["full"].toTensor());
    return {r, at::Tensor(), at::Tensor()};
  }
};

struct ReleaseGathered : torch::autograd::Function<ReleaseGathered> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& y, const at::Tensor& full,
                            const at::Tensor& shard, int64_t comm) {
    ctx->saved_data["c"] = comm;
    ctx->saved_data["full"] = full;
    ctx->saved_data["shard"] = shard;
    free_gathered(full);
    return y.view_as(y);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    refill_gathered(ctx->saved_data["full"].toTensor(), ctx->saved_data["shard"].toTensor(),
                    *from_handle<Comm>(ctx->saved_data["c"]));
    return {g[0], at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct FnHolder : torch::CustomClassHolder {
  explicit FnHolder(TensorFn f) : fn(std::move(f)) {}
  TensorFn fn;
};

struct Recompute : torch::autograd::Function<Recompute> {
  static at::Tensor forward(AutogradContext* ctx, at::TensorList xs, c10::IValue fn) {
    ctx->saved_data["fn"] = fn;
    ctx->save_for_backward(xs.vec());
    at::NoGradGuard no_grad;
    auto holder = fn.toCapsule();
    return static_cast<FnHolder*>(holder.get())->fn(xs.vec());
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    auto saved = ctx->get_saved_variables();
    std::vector<at::Tensor> xs;
    xs.reserve(saved.size());
    for (auto& s : saved) {
      at::Tensor d = s.detach();
      if (d.is_floating_point()) d.requires_grad_(true);
      xs.push_back(d);
    }
    auto holder = ctx->saved_data["fn"].toCapsule();
    at::Tensor y;
    {
      at::AutoGradMode on(true);
      ++recompute_depth;
      struct Leave {
        ~Leave() { --recompute_depth; }
      } leave;
      y = static_cast<FnHolder*>(holder.get())->fn(xs);
    }
    tensor_list out;
    std::vector<at::Tensor> need;
    for (auto& x : xs)
      if (x.requires_grad()) need.push_back(x);
    const auto defer = ctx->saved_data.find("defer");
    if (defer != ctx->saved_data.end() && !need.empty()) {
      WeightGradWork* work = from_handle<WeightGradWork>(defer->second);
      // A split backward (zero-bubble schedule): the inputs' gradients now, the weights' later.
      const std::vector<at::Tensor> gx = backward_inputs({y}, {g[0]}, need, *work);
      size_t i = 0;
      for (auto& x : xs) out.push_back(x.requires_grad() ? gx[i++] : at::Tensor());
    } else {
      torch::autograd::backward({y}, {g[0]});
      for (auto& x : xs) out.push_back(x.requires_grad() ? x.grad() : at::Tensor());
    }
    out.push_back(at::Tensor());
    return out;
  }
};

}  // namespace

bool defer_recompute_weight_grads(torch::autograd::Node* n, WeightGradWork* work) {
  auto* r = dynamic_cast<torch::autograd::CppNode<Recompute>*>(n);
  if (r == nullptr) return false;
  r->ctx_.saved_data["defer"] = handle(work);
  return true;
}

namespace {

struct VocabParallelCE : torch::autograd::Function<VocabParallelCE> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets, int64_t start,
                            int64_t comm) {
    Comm* c = reinterpret_cast<Comm*>(comm);
    const int64_t v = logits.size(1);
    at::Tensor lmax = std::get<0>(logits.max(1)).contiguous();
    c->allreduce_max(lmax);
    at::Tensor shifted = logits - lmax.unsqueeze(1);
    at::Tensor e = shifted.exp();
    at::Tensor sumexp = e.sum(1).contiguous();
    c->allreduce_sum(sumexp);
    at::Tensor in_range = targets.ge(start).logical_and(targets.lt(start + v));
    at::Tensor idx = (targets - start).clamp(0, std::max<int64_t>(v - 1, 0));
    at::Tensor picked = shifted.gather(1, idx.unsqueeze(1)).squeeze(1) * in_range.to(shifted.scalar_type());
    picked = picked.contiguous();
    c->allreduce_sum(picked);
    at::Tensor loss = sumexp.log() - picked;
    e.div_(sumexp.unsqueeze(1));
    ctx->save_for_backward({e, idx, in_range});
    return loss;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    auto s = ctx->get_saved_variables();
    at::Tensor grad = s[0].clone();
    grad.scatter_add_(1, s[1].unsqueeze(1), -s[2].to(grad.scalar_type()).unsqueeze(1));
    grad.mul_(g[0].unsqueeze(1));
    return {grad, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor copy_to(const at::Tensor& x, Comm& c) {
  return c.size() == 1 ? x : CopyTo::apply(x, handle(&c));
}
at::Tensor reduce_from(const at::Tensor& x, Comm& c) {
  return c.size() == 1 ? x : ReduceFrom::apply(x, handle(&c));
}

at::Tensor gather_seq(const at::Tensor& x, Comm& c) {
  if (c.size() == 1) return x;
  at::Tensor g = AllGatherLead::apply(x, handle(&c));  // [n, b, t, ...]
  std::vector<int64_t> shape = x.sizes().vec();
  shape[1] *= c.size();
  return g.transpose(0, 1).reshape(shape);
}

at::Tensor reduce_scatter_seq(const at::Tensor& x, Comm& c) {
  if (c.size() == 1) return x;
  const int n = c.size();
  std::vector<int64_t> split = x.sizes().vec();  // [b, n, t/n, ...]
  split[1] /= n;
  split.insert(split.begin() + 1, n);
  at::Tensor y = x.reshape(split).transpose(0, 1).contiguous();  // [n, b, t/n, ...]
  return ReduceScatterLead::apply(y, handle(&c));
}

at::Tensor seq_to_heads(const at::Tensor& x, Comm& c) {
  if (c.size() == 1) return x;
  const int64_t u = c.size(), b = x.size(0), tl = x.size(1), h = x.size(2), d = x.size(3);
  at::Tensor y = x.reshape({b, tl, u, h / u, d}).permute({2, 0, 1, 3, 4}).contiguous();
  at::Tensor z = AllToAll::apply(y, handle(&c));  // z[j]: sequence block j, my heads
  return z.permute({1, 0, 2, 3, 4}).reshape({b, u * tl, h / u, d});
}

at::Tensor heads_to_seq(const at::Tensor& x, Comm& c) {
  if (c.size() == 1) return x;
  const int64_t u = c.size(), b = x.size(0), T = x.size(1), hl = x.size(2), d = x.size(3);
  at::Tensor y = x.reshape({b, u, T / u, hl, d}).permute({1, 0, 2, 3, 4}).contiguous();
  at::Tensor z = AllToAll::apply(y, handle(&c));  // z[j]: my sequence block, head group j
  return z.permute({1, 2, 0, 3, 4}).reshape({b, T / u, u * hl, d});
}

at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, Comm& cp, int64_t T) {
  return RingAttention::apply(q, k, v, handle(&cp), T);
}

at::Tensor redistribute(const at::Tensor& x, Comm& stage, const ActivationLayout& from, const ActivationLayout& to) {
  if (from == to) return x;
  return Redistribute::apply(x, handle(&stage), handle(&from), handle(&to));
}

at::Tensor gather_shard(const at::Tensor& shard, Comm& c, at::ScalarType compute) {
  if (compute == at::ScalarType::Undefined) compute = shard.scalar_type();
  if (c.size() == 1) return shard.to(compute);
  return GatherShard::apply(shard, handle(&c), compute);
}

at::Tensor release_gathered(const at::Tensor& y, const at::Tensor& full, const at::Tensor& shard, Comm& c) {
  if (c.size() == 1 || !at::GradMode::is_enabled() || !y.requires_grad()) return y;
  return ReleaseGathered::apply(y, storage_alias(full), shard.detach(), handle(&c));
}

void drop_gathered(const at::Tensor& full) {
  if (full.defined() && full.has_storage()) free_gathered(full);
}

GatheredBytes gathered_param_bytes() { return {g_gathered_live.load(), g_gathered_peak.load()}; }

void reset_gathered_peak() { g_gathered_peak.store(g_gathered_live.load()); }

at::Tensor alltoall_rows(const at::Tensor& x, Comm& c, const std::vector<int64_t>& send_rows,
                         const std::vector<int64_t>& recv_rows) {
  if (c.size() == 1) return x;
  return AllToAllRows::apply(x, handle(&c), send_rows, recv_rows);
}
at::Tensor gather_rows(const at::Tensor& x, Comm& c, const std::vector<int64_t>& rows) {
  if (c.size() == 1) return x;
  return GatherRows::apply(x, handle(&c), rows);
}
at::Tensor reduce_scatter_rows(const at::Tensor& x, Comm& c, const std::vector<int64_t>& rows) {
  if (c.size() == 1) return x;
  return ReduceScatterRows::apply(x, handle(&c), rows);
}
at::Tensor split_seq(const at::Tensor& x, Comm& c) {
  if (c.size() == 1) return x;
  return SplitSeq::apply(x, handle(&c));
}
at::Tensor gather_seq_copy(const at::Tensor& x, Comm& c) {
  if (c.size() == 1) return x;
  return GatherSeqCopy::apply(x, handle(&c));
}
at::Tensor attach_loss(const at::Tensor& x, const at::Tensor& loss, double scale) {
  if (!loss.requires_grad()) return x;
  return AttachLoss::apply(x, loss, scale);
}
bool recomputing() { return recompute_depth > 0; }

at::Tensor recompute(const TensorFn& fn, const std::vector<at::Tensor>& inputs) {
  if (!at::GradMode::is_enabled()) return fn(inputs);
  return Recompute::apply(at::TensorList(inputs), c10::IValue::make_capsule(c10::make_intrusive<FnHolder>(fn)));
}

at::Tensor banded_sink_attention(const std::vector<at::Tensor>& in, int64_t window, bool with_sinks) {
  at::Tensor q = in[0].transpose(1, 2), k = in[1].transpose(1, 2), v = in[2].transpose(1, 2);  // [b, h, T, d]
  if (k.size(1) != q.size(1)) {
    k = k.repeat_interleave(q.size(1) / k.size(1), 1);
    v = v.repeat_interleave(q.size(1) / v.size(1), 1);
  }
  const int64_t T = q.size(2);
  const size_t docs_at = with_sinks ? 4 : 3;
#if TORCH_VERSION_MAJOR >= 2
  // PyTorch 2.x, plain causal attention: the fused kernel a GPU user runs (FlashAttention-2 or
  // memory-efficient attention on CUDA, a fused CPU kernel otherwise), which never materialises the
  // T x T scores. Bands, sinks and packed documents keep the explicit mask below.
  if (window <= 0 && !with_sinks && in.size() <= docs_at)
    return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true).transpose(1, 2);
#endif
  at::Tensor s = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(q.size(3))));
  at::Tensor mask = at::ones({T, T}, q.options().dtype(at::kBool)).triu(1);
  if (window > 0 && window < T) mask = mask.logical_or(at::ones({T, T}, mask.options()).tril(-window));
  if (in.size() > docs_at) {
    const at::Tensor& ids = in[docs_at];
    mask = mask.unsqueeze(0).logical_or(ids.unsqueeze(2).ne(ids.unsqueeze(1))).unsqueeze(1);  // [b, 1, T, T]
  }
  s = s.masked_fill(mask, -std::numeric_limits<float>::infinity());
  if (!with_sinks) return at::matmul(at::softmax(s, -1), v).transpose(1, 2);
  const at::Tensor sink = in[3].to(s.scalar_type()).view({1, -1, 1, 1}).expand({s.size(0), s.size(1), T, 1});
  const at::Tensor p = at::softmax(at::cat({s, sink}, -1), -1).narrow(-1, 0, T);
  return at::matmul(p, v).transpose(1, 2);  // [b, T, h, d]
}

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t start, Comm& c) {
  return VocabParallelCE::apply(logits, targets, start, handle(&c));
}

std::pair<at::Tensor, at::Tensor> route_top_k(const at::Tensor& scores, const at::Tensor& bias, int top_k, int groups,
                                              int group_top_k, int group_score_top) {
  at::Tensor choice = bias.defined() ? scores.detach() + bias.to(scores.scalar_type()) : scores.detach();
  if (groups > 1 && group_top_k < groups) {
    const int64_t n = scores.size(0), E = scores.size(1);
    const at::Tensor group_score = std::get<0>(choice.view({n, groups, E / groups}).topk(group_score_top, -1)).sum(-1);
    const at::Tensor best = std::get<1>(group_score.topk(group_top_k, -1));
    const at::Tensor kept = at::zeros({n, groups}, scores.options().dtype(at::kBool)).scatter_(1, best, true);
    choice = choice.masked_fill(~kept.unsqueeze(-1).expand({n, groups, E / groups}).reshape({n, E}),
                                -std::numeric_limits<double>::infinity());
  }
  const at::Tensor idx = std::get<1>(choice.topk(top_k, -1));
  return {scores.gather(1, idx), idx};
}

}  // namespace weft::runtime
