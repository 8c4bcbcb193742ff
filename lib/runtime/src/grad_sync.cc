#include "weft/runtime/grad_sync.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>

#include "weft/core/assert.h"
#include "weft/runtime/buckets.h"

namespace weft::runtime {

namespace {
// Runs `fn` after a gradient accumulator has run. Written against FunctionPostHook itself, whose
// signature is the same in libtorch 1.13 and PyTorch 2.x (utils::LambdaPostHook's is not).
class GradReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  explicit GradReadyHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};
}  // namespace

GradSync::GradSync(Model& m, GradSyncOptions o) : model_(m), opt_(o) {
  std::vector<Unit>& units = m.units();
  const int64_t cap = std::max<int64_t>(1, o.bucket_bytes / static_cast<int64_t>(sizeof(float)));
  arrived_.resize(units.size());
  std::vector<std::vector<int>> bucket_of(units.size());
  for (int ui = static_cast<int>(units.size()) - 1; ui >= 0; --ui) {
    Unit& u = units[ui];
    if (u.spec.zero >= 3 || (u.spec.zero == 0 && u.grad_sync->size() == 1)) continue;  // nothing to reduce here
    std::vector<int64_t> numels;
    for (const ParamSpec& p : u.spec.params) numels.push_back(p.numel());
    arrived_[ui].assign(numels.size(), 0);
    bucket_of[ui].assign(numels.size(), -1);
    for (const BucketRange& r : bucket_ranges(numels, u.spec.padded, cap)) {
      Bucket b;
      b.unit = &u;
      b.unit_index = ui;
      b.begin = r.begin;
      b.end = r.end;
      b.first_param = r.first_param;
      b.last_param = r.last_param;
      if (u.spec.zero > 0) b.pieces = shard_pieces(r.begin, r.end, u.shard, u.shard_size);
      for (int p = r.first_param; p <= r.last_param; ++p) bucket_of[ui][p] = static_cast<int>(buckets_.size());
      buckets_.push_back(std::move(b));
    }
  }
  for (size_t ui = 0; ui < units.size(); ++ui) {
    for (size_t p = 0; p < bucket_of[ui].size(); ++p) {
      auto acc = torch::autograd::impl::grad_accumulator(units[ui].leaves[p]);
      const int bi = bucket_of[ui][p], u = static_cast<int>(ui), pi = static_cast<int>(p);
      hook_keys_.push_back(acc->add_post_hook(std::make_unique<GradReadyHook>([this, bi, u, pi] { on_grad(bi, u, pi); })));
      accumulators_.push_back(std::move(acc));
    }
  }
}

GradSync::~GradSync() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

void GradSync::begin_backward(bool last, int chunk) {
  last_ = last;
  in_backward_ = true;
  order_.clear();
  next_ = 0;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    b.active = (chunk < 0 || b.unit->spec.chunk == chunk) && (last || b.unit->spec.zero == 2);
    b.arrived = 0;
    b.launched = false;
    if (!b.active) continue;
    order_.push_back(static_cast<int>(i));
    std::fill(arrived_[b.unit_index].begin() + b.first_param, arrived_[b.unit_index].begin() + b.last_param + 1, 0);
  }
}

// Runs on the thread executing backward, right after the parameter's gradient was accumulated.
void GradSync::on_grad(int bi, int ui, int p) {
  Bucket& b = buckets_[bi];
  if (!in_backward_ || !b.active) return;
  Unit& u = *b.unit;
  const ParamSpec& ps = u.spec.params[p];
  WEFT_ASSERT(!b.launched, "gradient of " + ps.name +
                               " arrived after its bucket was reduced (the parameter is used again in a later part "
                               "of the same backward pass)");
  if (u.spec.zero == 2) {
    at::NoGradGuard no_grad;
    at::Tensor& g = u.leaves[p].mutable_grad();
    if (g.defined()) {
      if (!b.staging.defined()) b.staging = at::zeros({b.end - b.begin}, g.options());
      b.staging.narrow(0, ps.offset - b.begin, ps.numel()).view(ps.local_shape).add_(g);
      g = at::Tensor();  // the full-size gradient is not kept
    }
  }
  if (arrived_[ui][p]) return;
  arrived_[ui][p] = 1;
  if (++b.arrived == b.last_param - b.first_param + 1 && opt_.overlap) launch_ready();
}

void GradSync::launch_ready() {
  while (next_ < order_.size()) {
    Bucket& b = buckets_[order_[next_]];
    if (b.arrived < b.last_param - b.first_param + 1) return;
    launch(b);
    ++next_;
  }
}

void GradSync::launch(Bucket& b) {
  at::NoGradGuard no_grad;
  Unit& u = *b.unit;
  Comm& c = *u.grad_sync;
  const int64_t len = b.end - b.begin;
  b.launched = true;
  if (u.spec.zero == 0) {
    b.pending.push_back(c.allreduce_sum_async(u.grad.narrow(0, b.begin, len)));
    return;
  }
  // This rank's piece of the bucket, as a slice of its shard accumulator.
  const int64_t mine = b.pieces[u.shard_rank];
  const int64_t lo = mine > 0 ? std::max<int64_t>(b.begin, u.shard_rank * u.shard) - u.shard_rank * u.shard : 0;
  at::Tensor dst = u.shard_grad.narrow(0, lo, mine);
  if (u.spec.zero == 1) {
    b.pending.push_back(c.reduce_scatter_v_async(u.grad.narrow(0, b.begin, len), b.pieces,
                                                 [dst](at::Tensor r) mutable { dst.copy_(r); }));
    return;
  }
  at::Tensor in = b.staging.defined() ? b.staging : at::zeros({len}, u.flat.options());
  b.staging = at::Tensor();
  b.pending.push_back(c.reduce_scatter_v_async(in, b.pieces, [dst](at::Tensor r) mutable { dst.add_(r); }));
}

void GradSync::end_backward() {
  in_backward_ = false;
  if (last_) {
    stats_ = GradSyncStats{};
    stats_.buckets = static_cast<int>(order_.size());
    for (int i : order_) {
      const Bucket& b = buckets_[i];
      if (!b.launched) continue;
      ++stats_.launched_in_backward;
      if (b.pending.empty() || b.pending.back().completed()) ++stats_.done_in_backward;
    }
  }
  while (next_ < order_.size()) launch(buckets_[order_[next_++]]);
  if (last_) return;
  for (Bucket& b : buckets_) {
    if (b.pending.size() < 2) continue;
    for (size_t i = 0; i + 1 < b.pending.size(); ++i) b.pending[i].wait();
    b.pending.erase(b.pending.begin(), b.pending.end() - 1);
  }
}

void GradSync::finish() {
  const auto t0 = std::chrono::steady_clock::now();
  for (Bucket& b : buckets_) {
    for (Pending& p : b.pending) p.wait();
    b.pending.clear();
  }
  stats_.wait_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace weft::runtime
