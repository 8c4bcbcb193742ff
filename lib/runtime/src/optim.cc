#include "weft/runtime/optim.h"

#include <torch/version.h>

#include <cmath>
#include <set>

namespace weft::runtime {

namespace {

// The parts of [0, len) outside `in` (sorted, disjoint [begin, len) pairs).
std::vector<std::pair<int64_t, int64_t>> complement(const std::vector<std::pair<int64_t, int64_t>>& in, int64_t len) {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t at = 0;
  for (const auto& [b, n] : in) {
    if (b > at) out.emplace_back(at, b - at);
    at = b + n;
  }
  if (at < len) out.emplace_back(at, len - at);
  return out;
}

}  // namespace

void Optimizer::zero_grad() {
  for (Unit& u : model_.units()) {
    if (u.grad.defined()) u.grad.zero_();
    if (u.shard_grad.defined()) u.shard_grad.zero_();
  }
}

void Optimizer::sync_grads() {
  grad_sync_->finish();
  for (Unit& u : model_.units()) {
    if (!u.tied) continue;
    at::Tensor g = u.owned_grad().contiguous();
    u.tied->allreduce_sum(g);
    u.owned_grad().copy_(g);
  }
}

HeldBytes Optimizer::held_bytes() {
  std::set<const void*> seen;
  auto bytes = [&](const at::Tensor& t) -> int64_t {
    if (!t.defined() || !t.has_storage() || !seen.insert(t.storage().unsafeGetStorageImpl()).second) return 0;
    return static_cast<int64_t>(t.storage().nbytes());
  };
  HeldBytes h;
  for (Unit& u : model_.units()) {
    h.params += bytes(u.spec.zero == 3 ? u.shard_leaf : u.flat);
    h.optimizer += bytes(u.m) + bytes(u.v);
  }
  h.grads = resident_grad_bytes();
  return h;
}

int64_t Optimizer::resident_grad_bytes() {
  std::set<const void*> seen;
  int64_t bytes = 0;
  auto add = [&](const at::Tensor& t) {
    if (!t.defined() || !t.has_storage()) return;
    if (seen.insert(t.storage().unsafeGetStorageImpl()).second) bytes += static_cast<int64_t>(t.storage().nbytes());
  };
  for (Unit& u : model_.units()) {
    add(u.grad);
    add(u.shard_grad);
    for (const at::Tensor& l : u.leaves) add(l.grad());
    if (u.shard_leaf.defined()) add(u.shard_leaf.grad());
  }
  return bytes;
}

double Optimizer::local_norm_sq() {
  at::Tensor s = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(model_.device()));
  for (Unit& u : model_.units()) {
    at::Tensor g = u.owned_grad();
    // On a GPU the range's norm in its own dtype (one read of the gradients; the reduction
    // accumulates in fp32), squared in fp64; on the CPU the squares summed in fp64.
    for (const auto& [b, n] : u.count_ranges)
      s.add_(model_.device().is_cuda() ? g.narrow(0, b, n).norm().to(at::kDouble).pow(2)
                                       : g.narrow(0, b, n).to(at::kDouble).pow(2).sum());
  }
  return s.item<double>();
}

void Optimizer::step(double lr, double grad_scale) {
  at::NoGradGuard no_grad;
  ++t_;
  // The compute-dtype casts of the parameters are stale from here: freed now, made again by the
  // next forward (weights()).
  for (Unit& u : model_.units()) {
    u.cast.clear();
    u.cast_version = -1;
  }
  const double b1 = cfg_.beta1, b2 = cfg_.beta2;
  std::vector<Pending> pending;
  // ZeRO-1 and 2: the updated owned range into every replica's full buffer.
  auto publish = [&pending](Unit& u) {
    if ((u.spec.zero == 1 || u.spec.zero == 2) && u.sync->size() > 1)
      pending.push_back(u.sync->allgather_into_async(u.flat, u.owned_params()));
  };
#if TORCH_VERSION_MAJOR >= 2
  if (model_.device().is_cuda()) {
    // PyTorch's fused AdamW kernel (torch.optim.AdamW(fused=True), what torchtitan runs): one pass
    // over parameters, gradients and moments per list, the same update as below. Two lists: the
    // ranges AdamW decays, and the rest with weight decay 0.
    std::vector<at::Tensor> lists[2][4];
    for (Unit& u : model_.units()) {
      at::Tensor p = u.owned_params(), g = u.owned_grad();
      if (grad_scale != 1.0) g.mul_(grad_scale);
      const auto rest = complement(u.decay_ranges, u.owned_len());
      for (int d = 0; d < 2; ++d)
        for (const auto& [b, n] : d == 0 ? u.decay_ranges : rest) {
          lists[d][0].push_back(p.narrow(0, b, n));
          lists[d][1].push_back(g.narrow(0, b, n));
          lists[d][2].push_back(u.m.narrow(0, b, n));
          lists[d][3].push_back(u.v.narrow(0, b, n));
        }
    }
    for (int d = 0; d < 2; ++d) {
      if (lists[d][0].empty()) continue;
      std::vector<at::Tensor> steps(lists[d][0].size(),
                                    at::full({}, static_cast<double>(t_), at::TensorOptions().device(model_.device())));
      at::_fused_adamw_(lists[d][0], lists[d][1], lists[d][2], lists[d][3], {}, steps, lr, b1, b2,
                        d == 0 ? cfg_.weight_decay : 0.0, cfg_.eps, /*amsgrad=*/false, /*maximize=*/false);
    }
    for (Unit& u : model_.units()) publish(u);
    for (auto& p : pending) p.wait();
    return;
  }
#endif
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(t_));
  for (Unit& u : model_.units()) {
    at::Tensor p = u.owned_params();
    at::Tensor g = u.owned_grad();
    if (grad_scale != 1.0) g = g * grad_scale;
    if (cfg_.weight_decay != 0)
      for (const auto& [b, n] : u.decay_ranges) {
        at::Tensor q = p.narrow(0, b, n);
        q.sub_(q * (lr * cfg_.weight_decay));
      }
    u.m.mul_(b1).add_(g, 1.0 - b1);
    u.v.mul_(b2).addcmul_(g, g, 1.0 - b2);
    at::Tensor denom = (u.v.sqrt() / std::sqrt(bc2)).add_(cfg_.eps);
    p.addcdiv_(u.m, denom, -lr / bc1);
    publish(u);  // each unit's gather starts while the next one updates
  }
  for (auto& p : pending) p.wait();
}

}  // namespace weft::runtime
