// Comm over c10d ProcessGroupGloo (libtorch 1.13). Gloo there lacks reduce_scatter,
// _reduce_scatter_base and _allgather_base; this file owns the workarounds:
//   reduce_scatter  = alltoall_base of the input chunks, then a local sum in rank order
//                     (same bytes on the wire as a ring reduce-scatter; bitwise equal to r0+r1+...)
//   allgather_into  = list allgather into narrow() views of the flat output buffer.
// Gloo has no ReduceOp::AVG and no bf16: callers sum fp32 and divide.
// With a libtorch built with NCCL (USE_C10D_NCCL), NcclComm sends CUDA tensors through
// ProcessGroupNCCL and its native _reduce_scatter_base / _allgather_base.
#include "weft/runtime/comm.h"

#include <atomic>
#include <chrono>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <csignal>
#include <cstdio>

#include <algorithm>
#include <array>
#include <atomic>
#include <exception>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <thread>

#include "weft/core/assert.h"

namespace weft::runtime {

Pending::Pending(c10::intrusive_ptr<c10d::Work> w, std::vector<at::Tensor> keep, std::function<void()> then)
    : work_(std::move(w)), keep_(std::move(keep)), then_(std::move(then)), done_(false) {}
Pending::Pending(Pending&& o) noexcept
    : work_(std::move(o.work_)), keep_(std::move(o.keep_)), then_(std::move(o.then_)), done_(o.done_) {
  o.done_ = true;
}
Pending& Pending::operator=(Pending&& o) noexcept {
  if (this != &o) {
    work_ = std::move(o.work_);
    keep_ = std::move(o.keep_);
    then_ = std::move(o.then_);
    done_ = o.done_;
    o.done_ = true;
  }
  return *this;
}
Pending::~Pending() = default;

void Pending::and_then(std::function<void()> f) {
  if (done_) {
    f();
    return;
  }
  if (!then_) {
    then_ = std::move(f);
    return;
  }
  then_ = [first = std::move(then_), second = std::move(f)]() {
    first();
    second();
  };
}

bool Pending::completed() const { return done_ || !work_ || work_->isCompleted(); }

namespace {
std::atomic<int64_t> g_blocked_ns{0};
}  // namespace

double comm_blocked_s() { return 1e-9 * static_cast<double>(g_blocked_ns.load(std::memory_order_relaxed)); }

namespace {
std::atomic<bool> g_settle_work{false};
}  // namespace

void settle_work_on_wait(bool on) { g_settle_work.store(on, std::memory_order_relaxed); }

void wait_work(const c10::intrusive_ptr<c10d::Work>& w) {
  const auto t = std::chrono::steady_clock::now();
  w->wait();
  if (g_settle_work.load(std::memory_order_relaxed)) {
    // Gloo's worker thread still holds the work (and the tensors it was given) for a moment after
    // it completes; let it go first, so the tensors are freed on this thread (bounded: 50 ms).
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    while (w.use_count() > 1 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  }
  g_blocked_ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t).count(),
                         std::memory_order_relaxed);
}

void Pending::wait() {
  if (done_) return;
  done_ = true;
  if (work_) wait_work(work_);
  if (then_) then_();
  work_.reset();
  keep_.clear();
  then_ = nullptr;
}

at::Tensor Comm::alltoall_v(const at::Tensor& in, const std::vector<int64_t>& send_rows,
                            const std::vector<int64_t>& recv_rows) {
  const int W = size();
  TORCH_CHECK(static_cast<int>(send_rows.size()) == W && static_cast<int>(recv_rows.size()) == W,
              "alltoall_v: counts for ", send_rows.size(), " and ", recv_rows.size(), " members of a group of ", W);
  if (W == 1) return in.contiguous().clone();
  // Every piece padded to the group's largest, through the equal-split all-to-all.
  at::Tensor most = at::tensor({*std::max_element(send_rows.begin(), send_rows.end()),
                                *std::max_element(recv_rows.begin(), recv_rows.end())},
                               at::TensorOptions().dtype(at::kLong));
  allreduce_max(most);
  const int64_t M = std::max(most[0].item<int64_t>(), most[1].item<int64_t>());
  std::vector<int64_t> shape = in.sizes().vec();
  shape.insert(shape.begin(), W);
  shape[1] = M;
  at::Tensor padded = at::zeros(shape, in.options());
  int64_t at_row = 0;
  for (int j = 0; j < W; ++j) {
    padded[j].narrow(0, 0, send_rows[j]).copy_(in.narrow(0, at_row, send_rows[j]));
    at_row += send_rows[j];
  }
  at::Tensor got = alltoall(padded);
  std::vector<at::Tensor> parts;
  for (int j = 0; j < W; ++j) parts.push_back(got[j].narrow(0, 0, recv_rows[j]));
  return at::cat(parts);
}

namespace {

// Gloo completes a send only inside its wait(): isCompleted() stays false until then, so a sender
// polling Pending::completed() could never let go of what its peer already received (1F1B's first
// stage would keep every micro-batch's output until the step ends). This waits on its own thread
// and says when the send is through; wait() joins that. A dropped one leaves its thread to finish
// (or fail with the transport) on its own, holding the state it shares.
class WaitedInBackground : public c10d::Work {
 public:
  explicit WaitedInBackground(c10::intrusive_ptr<c10d::Work> w) : state_(std::make_shared<State>()) {
    state_->inner = std::move(w);
    thread_ = std::thread([s = state_] {
      try {
        s->inner->wait();
      } catch (...) {
        s->error = std::current_exception();
      }
      s->inner.reset();
      s->done.store(true, std::memory_order_release);
    });
  }
  ~WaitedInBackground() override {
    if (thread_.joinable()) thread_.detach();
  }
  bool isCompleted() override { return state_->done.load(std::memory_order_acquire); }
  bool wait(std::chrono::milliseconds) override {
    if (thread_.joinable()) thread_.join();
    if (state_->error) std::rethrow_exception(state_->error);
    return true;
  }

 private:
  struct State {
    c10::intrusive_ptr<c10d::Work> inner;
    std::exception_ptr error;
    std::atomic<bool> done{false};
  };
  std::shared_ptr<State> state_;
  std::thread thread_;
};

std::string group_name(const std::vector<int>& ranks) {
  std::string s = "g";
  for (int r : ranks) s += "_" + std::to_string(r);
  return s;
}

// A group of one: every collective is the identity.
class LocalComm final : public Comm {
 public:
  explicit LocalComm(int global_rank) : Comm({global_rank}, 0, group_name({global_rank})) {}
  void allreduce_sum(at::Tensor&) override {}
  Pending allreduce_sum_async(at::Tensor) override { return {}; }
  void allreduce_max(at::Tensor&) override {}
  at::Tensor allgather(const at::Tensor& t) override { return t.unsqueeze(0).clone(); }
  Pending allgather_into_async(at::Tensor out, const at::Tensor& shard) override {
    out.copy_(shard.reshape({-1}));
    return {};
  }
  at::Tensor reduce_scatter(const at::Tensor& in) override { return in.reshape({-1}).clone(); }
  Pending reduce_scatter_async(const at::Tensor& in, std::function<void(at::Tensor)> then) override {
    then(in.reshape({-1}).clone());
    return {};
  }
  Pending reduce_scatter_v_async(const at::Tensor& in, std::vector<int64_t>,
                                 std::function<void(at::Tensor)> then) override {
    then(in.reshape({-1}).clone());
    return {};
  }
  at::Tensor alltoall(const at::Tensor& in) override { return in.clone(); }
  Pending send(const at::Tensor&, int, int) override {
    WEFT_ASSERT(false, "send on a group of one rank");
    return {};
  }
  void recv(at::Tensor&, int, int) override { WEFT_ASSERT(false, "recv on a group of one rank"); }
  void barrier() override {}
};

// All-reduce of t over pg with op, in place: a non-contiguous t goes through a contiguous copy that
// is copied back when the returned Pending is waited on.
// PG: c10d::ProcessGroupGloo or ProcessGroupNCCL (a c10d::ProcessGroup in libtorch 1.13, a
// c10d::Backend in PyTorch 2.x: hence templates rather than a base-class reference).
template <class PG>
Pending allreduce_in_place(PG& pg, at::Tensor t, c10d::ReduceOp op) {
  std::vector<at::Tensor> v{t.contiguous()};
  c10d::AllreduceOptions o;
  o.reduceOp = op;
  auto w = pg.allreduce(v, o);
  if (v[0].is_same(t)) return Pending(w, v);
  at::Tensor dst = t, src = v[0];
  return Pending(w, v, [dst, src]() mutable { dst.copy_(src); });
}

// Reduce-scatter with per-rank counts as one all-to-all (every rank receives the W slices of its
// part) and a local sum in rank order, run by `then` when the Pending is waited on.
template <class PG>
Pending reduce_scatter_by_alltoall(PG& pg, const at::Tensor& in, const std::vector<int64_t>& counts,
                                   int rank, std::function<void(at::Tensor)> then) {
  const int W = static_cast<int>(counts.size());
  at::Tensor flat = in.reshape({-1}).contiguous();
  const int64_t n = counts[rank];
  at::Tensor out = at::empty({W * n}, flat.options());
  std::vector<int64_t> out_splits(W, n);
  std::vector<int64_t> in_splits = counts;
  auto w = pg.alltoall_base(out, flat, out_splits, in_splits);
  return Pending(w, {flat, out}, [out, n, W, then = std::move(then)]() { then(out.view({W, n}).sum(0)); });
}

// Equal-split all-to-all over the leading dimension.
template <class PG>
at::Tensor alltoall_equal(PG& pg, const at::Tensor& in, int size) {
  TORCH_CHECK(in.dim() >= 1 && in.size(0) == size, "alltoall: leading dimension ", in.size(0), " for ", size, " ranks");
  at::Tensor src = in.contiguous();
  at::Tensor out = at::empty_like(src);
  std::vector<int64_t> equal;
  wait_work(pg.alltoall_base(out, src, equal, equal));
  return out;
}

// Uneven all-to-all over the leading dimension. The buffers are one row longer than the rows they
// hold, so that an empty send or receive still has storage behind its pointer.
template <class PG>
at::Tensor alltoall_rows(PG& pg, const at::Tensor& in, const std::vector<int64_t>& send_rows,
                         const std::vector<int64_t>& recv_rows) {
  const int64_t ns = std::accumulate(send_rows.begin(), send_rows.end(), int64_t{0});
  const int64_t nr = std::accumulate(recv_rows.begin(), recv_rows.end(), int64_t{0});
  TORCH_CHECK(in.dim() >= 1 && in.size(0) == ns, "alltoall_v: ", in.size(0), " rows to send, the counts say ", ns);
  std::vector<int64_t> shape = in.sizes().vec();
  shape[0] = ns + 1;
  at::Tensor src_buf = at::empty(shape, in.options());
  at::Tensor src = src_buf.narrow(0, 0, ns);
  src.copy_(in);
  shape[0] = nr + 1;
  at::Tensor out = at::empty(shape, in.options()).narrow(0, 0, nr);
  std::vector<int64_t> out_splits = recv_rows, in_splits = send_rows;
  wait_work(pg.alltoall_base(out, src, out_splits, in_splits));
  return out;
}

class GlooComm final : public Comm {
 public:
  GlooComm(std::vector<int> ranks, int rank, c10::intrusive_ptr<c10d::ProcessGroupGloo> pg)
      : Comm(ranks, rank, group_name(ranks)), pg_(std::move(pg)) {}

  // Empty tensors (the activations of a suspended replica, train.dp_shares 0, whose tensor and
  // sequence groups are all suspended alike) never reach Gloo, whose all-gather divides by their
  // size: every member skips the same call, and the result is empty too.
  void allreduce_sum(at::Tensor& t) override { allreduce_sum_async(t).wait(); }

  Pending allreduce_sum_async(at::Tensor t) override {
    if (t.numel() == 0) return {};
    return allreduce_in_place(*pg_, t, c10d::ReduceOp::SUM);
  }

  void allreduce_max(at::Tensor& t) override {
    if (t.numel() > 0) allreduce_in_place(*pg_, t, c10d::ReduceOp::MAX).wait();
  }

  at::Tensor allgather(const at::Tensor& t) override {
    at::Tensor in = t.contiguous();
    std::vector<int64_t> shape{size()};
    for (auto d : in.sizes()) shape.push_back(d);
    at::Tensor out = at::empty(shape, in.options());
    if (in.numel() == 0) return out;
    std::vector<std::vector<at::Tensor>> outs(1);
    for (int r = 0; r < size(); ++r) outs[0].push_back(out[r]);
    std::vector<at::Tensor> ins{in};
    wait_work(pg_->allgather(outs, ins));
    return out;
  }

  Pending allgather_into_async(at::Tensor out, const at::Tensor& shard) override {
    const int64_t n = shard.numel();
    TORCH_CHECK(out.numel() == n * size() && out.is_contiguous(), "allgather_into: output of ", out.numel(),
                " elements for ", size(), " shards of ", n);
    std::vector<std::vector<at::Tensor>> outs(1);
    for (int r = 0; r < size(); ++r) outs[0].push_back(out.narrow(0, r * n, n));
    // The input must not alias the output (it usually is one of its shards): send a copy.
    std::vector<at::Tensor> ins{shard.reshape({-1}).clone()};
    auto w = pg_->allgather(outs, ins);
    std::vector<at::Tensor> keep = ins;
    keep.push_back(out);
    return Pending(w, keep);
  }

  at::Tensor reduce_scatter(const at::Tensor& in) override {
    at::Tensor result;
    reduce_scatter_async(in, [&](at::Tensor r) { result = std::move(r); }).wait();
    return result;
  }

  Pending reduce_scatter_async(const at::Tensor& in, std::function<void(at::Tensor)> then) override {
    TORCH_CHECK(in.numel() % size() == 0, "reduce_scatter: ", in.numel(), " elements over ", size(), " ranks");
    at::Tensor flat = in.reshape({-1}).contiguous();
    at::Tensor out = at::empty_like(flat);
    if (flat.numel() == 0) {
      Pending none;
      none.and_then([out, then = std::move(then)]() { then(out); });
      return none;
    }
    std::vector<int64_t> equal;
    auto w = pg_->alltoall_base(out, flat, equal, equal);
    const int64_t n = flat.numel() / size();
    const int W = size();
    return Pending(w, {flat, out}, [out, n, W, then = std::move(then)]() { then(out.view({W, n}).sum(0)); });
  }

  // Pieces travel by an uneven alltoall_base (rank j sends piece i to rank i), then the W received
  // pieces are summed in rank order, as in reduce_scatter_async.
  Pending reduce_scatter_v_async(const at::Tensor& in, std::vector<int64_t> counts,
                                 std::function<void(at::Tensor)> then) override {
    const int W = size();
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    TORCH_CHECK(static_cast<int>(counts.size()) == W && total == in.numel(), "reduce_scatter_v: ", counts.size(),
                " counts summing to ", total, " for ", in.numel(), " elements over ", W, " ranks");
    return reduce_scatter_by_alltoall(*pg_, in, counts, rank_, std::move(then));
  }

  at::Tensor alltoall(const at::Tensor& in) override {
    if (in.numel() == 0) return in.contiguous().clone();
    return alltoall_equal(*pg_, in, size());
  }
  at::Tensor alltoall_v(const at::Tensor& in, const std::vector<int64_t>& send_rows,
                        const std::vector<int64_t>& recv_rows) override {
    return alltoall_rows(*pg_, in, send_rows, recv_rows);
  }

  Pending send(const at::Tensor& t, int peer, int tag) override {
    std::vector<at::Tensor> v{t.contiguous()};
    return Pending(c10::make_intrusive<WaitedInBackground>(pg_->send(v, peer, tag)), v);
  }

  void recv(at::Tensor& t, int peer, int tag) override {
    TORCH_CHECK(t.is_contiguous(), "recv into a non-contiguous tensor");
    std::vector<at::Tensor> v{t};
    wait_work(pg_->recv(v, peer, tag));
  }

  void barrier() override { wait_work(pg_->barrier()); }

 private:
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
};

#ifdef USE_C10D_NCCL
// CUDA tensors go through NCCL (native reduce-scatter and all-gather-into); CPU tensors (the loss
// and norm statistics, checkpoint traffic) through the same ranks' Gloo group. Point-to-point
// transfers are staged through host memory over Gloo: NCCL orders a pair's sends and receives on
// one stream, so 1F1B's activations and gradients crossing in opposite directions would wait on each
// other (Gloo sends never block). Built only against a libtorch with NCCL; weft's CPU build
// machines compile and run none of it.
class NcclComm final : public Comm {
 public:
  NcclComm(std::vector<int> ranks, int rank, c10::intrusive_ptr<c10d::ProcessGroupNCCL> pg, std::unique_ptr<Comm> cpu)
      : Comm(ranks, rank, group_name(ranks)), pg_(std::move(pg)), cpu_(std::move(cpu)) {}

  void allreduce_sum(at::Tensor& t) override { allreduce_sum_async(t).wait(); }

  Pending allreduce_sum_async(at::Tensor t) override {
    if (!t.is_cuda()) return cpu_->allreduce_sum_async(t);
    return allreduce_in_place(*pg_, t, c10d::ReduceOp::SUM);
  }

  void allreduce_max(at::Tensor& t) override {
    if (!t.is_cuda()) return cpu_->allreduce_max(t);
    allreduce_in_place(*pg_, t, c10d::ReduceOp::MAX).wait();
  }

  at::Tensor allgather(const at::Tensor& t) override {
    if (!t.is_cuda()) return cpu_->allgather(t);
    at::Tensor in = t.contiguous();
    std::vector<int64_t> shape{size()};
    for (auto d : in.sizes()) shape.push_back(d);
    at::Tensor out = at::empty(shape, in.options());
    wait_work(pg_->_allgather_base(out, in));
    return out;
  }

  Pending allgather_into_async(at::Tensor out, const at::Tensor& shard) override {
    if (!out.is_cuda()) return cpu_->allgather_into_async(out, shard);
    TORCH_CHECK(out.numel() == shard.numel() * size() && out.is_contiguous(), "allgather_into: output of ",
                out.numel(), " elements for ", size(), " shards of ", shard.numel());
    at::Tensor in = shard.reshape({-1}).clone();  // usually a view of `out`
    auto w = pg_->_allgather_base(out, in);
    return Pending(w, {in, out});
  }

  at::Tensor reduce_scatter(const at::Tensor& in) override {
    at::Tensor result;
    reduce_scatter_async(in, [&](at::Tensor r) { result = std::move(r); }).wait();
    return result;
  }

  Pending reduce_scatter_async(const at::Tensor& in, std::function<void(at::Tensor)> then) override {
    if (!in.is_cuda()) return cpu_->reduce_scatter_async(in, std::move(then));
    TORCH_CHECK(in.numel() % size() == 0, "reduce_scatter: ", in.numel(), " elements over ", size(), " ranks");
    at::Tensor flat = in.reshape({-1}).contiguous();
    at::Tensor out = at::empty({flat.numel() / size()}, flat.options());
    auto w = pg_->_reduce_scatter_base(out, flat);
    return Pending(w, {flat, out}, [out, then = std::move(then)]() { then(out); });
  }

  // Equal pieces: the native reduce-scatter. Uneven ones (a gradient bucket straddling ZeRO shard
  // boundaries): an uneven alltoall_base and a local sum, as on Gloo.
  Pending reduce_scatter_v_async(const at::Tensor& in, std::vector<int64_t> counts,
                                 std::function<void(at::Tensor)> then) override {
    if (!in.is_cuda()) return cpu_->reduce_scatter_v_async(in, std::move(counts), std::move(then));
    if (std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; }))
      return reduce_scatter_async(in, std::move(then));
    return reduce_scatter_by_alltoall(*pg_, in, counts, rank_, std::move(then));
  }

  at::Tensor alltoall(const at::Tensor& in) override {
    if (!in.is_cuda()) return cpu_->alltoall(in);
    return alltoall_equal(*pg_, in, size());
  }
  at::Tensor alltoall_v(const at::Tensor& in, const std::vector<int64_t>& send_rows,
                        const std::vector<int64_t>& recv_rows) override {
    if (!in.is_cuda()) return cpu_->alltoall_v(in, send_rows, recv_rows);
    return alltoall_rows(*pg_, in, send_rows, recv_rows);
  }

  Pending send(const at::Tensor& t, int peer, int tag) override { return cpu_->send(t.to(at::kCPU), peer, tag); }

  void recv(at::Tensor& t, int peer, int tag) override {
    if (!t.is_cuda()) return cpu_->recv(t, peer, tag);
    at::Tensor host = at::empty(t.sizes(), t.options().device(at::kCPU));
    cpu_->recv(host, peer, tag);
    t.copy_(host);
  }

  void barrier() override { cpu_->barrier(); }

 private:
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> pg_;
  std::unique_ptr<Comm> cpu_;
};
#endif

// CUDA tensors through a Gloo group: each is copied to host memory, travels through Gloo, and the
// results are copied back to its device (fp32 CPU tensors pass straight through). Ranks may then
// share a GPU, which NCCL refuses, and a libtorch without NCCL can still train on CUDA; the copies
// cost PCIe time NCCL does not (docs/runtime.md, "Several ranks on one GPU"). bf16 tensors (mixed
// precision's activations), which Gloo does not reduce, travel as fp32 on either device: a sum is
// then computed in fp32 and rounded once, as NCCL's bf16 ring rounds at every step.
class HostStagedComm final : public Comm {
 public:
  HostStagedComm(std::unique_ptr<Comm> gloo, bool copy_cpu_tensors)
      : Comm(gloo->ranks(), gloo->rank(), gloo->name()), inner_(std::move(gloo)), all_(copy_cpu_tensors) {}

  void allreduce_sum(at::Tensor& t) override { staged(t, [&](at::Tensor& h) { inner_->allreduce_sum(h); }); }
  Pending allreduce_sum_async(at::Tensor t) override {
    if (!stages(t)) return inner_->allreduce_sum_async(std::move(t));
    at::Tensor h = host(t);
    Pending p = inner_->allreduce_sum_async(h);
    p.and_then([t, h]() mutable { t.copy_(h); });
    return p;
  }
  void allreduce_max(at::Tensor& t) override { staged(t, [&](at::Tensor& h) { inner_->allreduce_max(h); }); }
  at::Tensor allgather(const at::Tensor& t) override { return back(inner_->allgather(host(t)), t); }
  Pending allgather_into_async(at::Tensor out, const at::Tensor& shard) override {
    if (!stages(out)) return inner_->allgather_into_async(std::move(out), host(shard));
    at::Tensor h = at::empty(out.sizes(), out.options().device(at::kCPU).dtype(wire(out)));
    Pending p = inner_->allgather_into_async(h, host(shard));
    p.and_then([out, h]() mutable { out.copy_(h); });
    return p;
  }
  at::Tensor reduce_scatter(const at::Tensor& in) override { return back(inner_->reduce_scatter(host(in)), in); }
  Pending reduce_scatter_async(const at::Tensor& in, std::function<void(at::Tensor)> then) override {
    return inner_->reduce_scatter_async(host(in), back_to(in, std::move(then)));
  }
  Pending reduce_scatter_v_async(const at::Tensor& in, std::vector<int64_t> counts,
                                 std::function<void(at::Tensor)> then) override {
    return inner_->reduce_scatter_v_async(host(in), std::move(counts), back_to(in, std::move(then)));
  }
  at::Tensor alltoall(const at::Tensor& in) override { return back(inner_->alltoall(host(in)), in); }
  at::Tensor alltoall_v(const at::Tensor& in, const std::vector<int64_t>& send_rows,
                        const std::vector<int64_t>& recv_rows) override {
    return back(inner_->alltoall_v(host(in), send_rows, recv_rows), in);
  }
  Pending send(const at::Tensor& t, int peer, int tag) override { return inner_->send(host(t), peer, tag); }
  void recv(at::Tensor& t, int peer, int tag) override {
    staged(t, [&](at::Tensor& h) { inner_->recv(h, peer, tag); });
  }
  void barrier() override { inner_->barrier(); }

 private:
  static at::ScalarType wire(const at::Tensor& t) {
    return t.scalar_type() == at::kBFloat16 ? at::kFloat : t.scalar_type();
  }
  bool stages(const at::Tensor& t) const { return all_ || t.is_cuda() || wire(t) != t.scalar_type(); }
  // A host copy of t in the dtype Gloo carries (a new tensor even on the CPU when staging), or t.
  at::Tensor host(const at::Tensor& t) const {
    return stages(t) ? t.to(at::TensorOptions().device(at::kCPU).dtype(wire(t)), /*non_blocking=*/false, /*copy=*/true)
                           .contiguous()
                     : t;
  }
  // A result r of a collective on host(like), on like's device and in its dtype.
  static at::Tensor back(const at::Tensor& r, const at::Tensor& like) { return r.to(like.device(), like.scalar_type()); }
  // Runs op on a host copy of t and copies the result back into t (a view stays a view).
  template <class Op>
  void staged(at::Tensor& t, Op op) const {
    if (!stages(t)) return op(t);
    at::Tensor h = host(t);
    op(h);
    t.copy_(h);
  }
  static std::function<void(at::Tensor)> back_to(const at::Tensor& like, std::function<void(at::Tensor)> then) {
    return [d = like.device(), dt = like.scalar_type(), then = std::move(then)](at::Tensor r) { then(r.to(d, dt)); };
  }
  std::unique_ptr<Comm> inner_;
  bool all_;
};

}  // namespace

std::unique_ptr<Comm> host_staged(std::unique_ptr<Comm> gloo, bool copy_cpu_tensors) {
  return std::make_unique<HostStagedComm>(std::move(gloo), copy_cpu_tensors);
}

namespace {

// Counts what passes through another Comm (the groups GroupSet builds with two or more ranks).
// Thread-safe: the gradient channel is used from the reduction's worker hooks.
class RecordingComm final : public Comm {
 public:
  explicit RecordingComm(std::unique_ptr<Comm> inner, int global_rank = 0, double throttle_Bps = 0,
                         int gpus_per_node = 1)
      : Comm(inner->ranks(), inner->rank(), inner->name()),
        inner_(std::move(inner)),
        global_rank_(global_rank),
        throttle_Bps_(throttle_Bps),
        gpus_per_node_(std::max(1, gpus_per_node)) {}

  void allreduce_sum(at::Tensor& t) override {
    note(CollectiveOp::kAllReduce, t);
    inner_->allreduce_sum(t);
  }
  Pending allreduce_sum_async(at::Tensor t) override {
    note(CollectiveOp::kAllReduce, t);
    return inner_->allreduce_sum_async(std::move(t));
  }
  void allreduce_max(at::Tensor& t) override {
    note(CollectiveOp::kAllReduce, t);
    inner_->allreduce_max(t);
  }
  at::Tensor allgather(const at::Tensor& t) override {
    note(CollectiveOp::kAllGather, t, size());
    return inner_->allgather(t);
  }
  Pending allgather_into_async(at::Tensor out, const at::Tensor& shard) override {
    note(CollectiveOp::kAllGather, out);
    return inner_->allgather_into_async(std::move(out), shard);
  }
  at::Tensor reduce_scatter(const at::Tensor& in) override {
    note(CollectiveOp::kReduceScatter, in);
    return inner_->reduce_scatter(in);
  }
  Pending reduce_scatter_async(const at::Tensor& in, std::function<void(at::Tensor)> then) override {
    note(CollectiveOp::kReduceScatter, in);
    return inner_->reduce_scatter_async(in, std::move(then));
  }
  Pending reduce_scatter_v_async(const at::Tensor& in, std::vector<int64_t> counts,
                                 std::function<void(at::Tensor)> then) override {
    note(CollectiveOp::kReduceScatter, in);
    return inner_->reduce_scatter_v_async(in, std::move(counts), std::move(then));
  }
  at::Tensor alltoall(const at::Tensor& in) override {
    note(CollectiveOp::kAllToAll, in);
    return inner_->alltoall(in);
  }
  at::Tensor alltoall_v(const at::Tensor& in, const std::vector<int64_t>& send_rows,
                        const std::vector<int64_t>& recv_rows) override {
    note(CollectiveOp::kAllToAll, in);
    at::Tensor out = inner_->alltoall_v(in, send_rows, recv_rows);
    if (throttle_Bps_ > 0) throttle(in, out, send_rows, recv_rows);
    return out;
  }
  Pending send(const at::Tensor& t, int peer, int tag) override {
    note(CollectiveOp::kSend, t);
    return inner_->send(t, peer, tag);
  }
  void recv(at::Tensor& t, int peer, int tag) override { inner_->recv(t, peer, tag); }
  void barrier() override { inner_->barrier(); }

  int64_t calls(CollectiveOp op) const { return calls_[static_cast<int>(op)].load(); }
  int64_t bytes(CollectiveOp op) const { return bytes_[static_cast<int>(op)].load(); }

 private:
  void note(CollectiveOp op, const at::Tensor& t, int64_t copies = 1) {
    calls_[static_cast<int>(op)].fetch_add(1);
    bytes_[static_cast<int>(op)].fetch_add(copies * t.numel() * static_cast<int64_t>(t.element_size()));
  }
  // CommConfig::throttle_inter_node_Bps: this rank's rows to and from other nodes, the larger, at
  // the emulated rate.
  void throttle(const at::Tensor& in, const at::Tensor& out, const std::vector<int64_t>& send_rows,
                const std::vector<int64_t>& recv_rows) const {
    const at::Tensor& shaped = in.dim() > 0 && in.size(0) > 0 ? in : out;
    if (shaped.dim() == 0 || shaped.size(0) == 0) return;
    const double row_bytes =
        static_cast<double>(shaped.numel() / shaped.size(0)) * static_cast<double>(shaped.element_size());
    int64_t sent = 0, received = 0;
    for (size_t j = 0; j < ranks().size(); ++j)
      if (ranks()[j] / gpus_per_node_ != global_rank_ / gpus_per_node_) {
        sent += j < send_rows.size() ? send_rows[j] : 0;
        received += j < recv_rows.size() ? recv_rows[j] : 0;
      }
    const double hold_s = static_cast<double>(std::max(sent, received)) * row_bytes / throttle_Bps_;
    if (hold_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(hold_s));
  }
  std::unique_ptr<Comm> inner_;
  int global_rank_ = 0;
  double throttle_Bps_ = 0;
  int gpus_per_node_ = 1;
  std::array<std::atomic<int64_t>, kCollectiveOps> calls_{}, bytes_{};
};

bool is_loopback(const std::string& addr) { return addr.rfind("127.", 0) == 0 || addr == "localhost"; }

}  // namespace

const char* to_string(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce: return "all_reduce";
    case CollectiveOp::kAllGather: return "all_gather";
    case CollectiveOp::kReduceScatter: return "reduce_scatter";
    case CollectiveOp::kAllToAll: return "all_to_all";
    case CollectiveOp::kSend: return "send";
  }
  return "?";
}

bool nccl_compiled() {
#ifdef USE_C10D_NCCL
  return true;
#else
  return false;
#endif
}

struct GroupSet::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  std::shared_ptr<::gloo::transport::Device> device;
};

GroupSet::GroupSet(const CommConfig& cfg) : cfg_(cfg), impl_(std::make_unique<Impl>()) {
  WEFT_ASSERT(!(cfg.cuda && cfg.nccl && cfg.world > 1 && !nccl_compiled()),
              "CUDA tensors through NCCL, and this libtorch was built without it");
  for (int r = 0; r < cfg.world; ++r) all_.push_back(r);
  if (cfg.world > 1) {
    // A peer that dies must surface as a failed socket write the caller reports (naming the rank),
    // not as a SIGPIPE that ends this process silently.
    std::signal(SIGPIPE, SIG_IGN);
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(cfg.master_port);
    so.isServer = cfg.rank == 0;
    so.numWorkers = cfg.world;
    so.waitWorkers = false;  // the join below waits, and fails naming who is missing
    so.timeout = cfg.timeout;
    impl_->store = c10::make_intrusive<c10d::TCPStore>(cfg.master_addr, so);
    // Every rank says it joined and waits for all, up to cfg.timeout. TCPStore's own wait for its
    // workers gives up silently when the timeout passes (libtorch 1.13), and the first Gloo group
    // would then wait for a missing peer for the whole collective timeout (30 min by default).
    std::vector<std::string> joined;
    for (int r = 0; r < cfg.world; ++r) joined.push_back("weft/joined/" + std::to_string(r));
    impl_->store->set(joined[cfg.rank], std::vector<uint8_t>{1});
    try {
      impl_->store->wait(joined, cfg.timeout);
    } catch (const std::exception&) {
      std::string missing;
      int n = 0;
      for (int r = 0; r < cfg.world; ++r)
        if (!impl_->store->check({joined[r]})) missing += (n++ ? ", " : "") + std::to_string(r);
      char within[32];
      std::snprintf(within, sizeof within, "%g", static_cast<double>(cfg.timeout.count()) / 1000.0);
      throw std::runtime_error((n == 1 ? "rank " : "ranks ") + missing + " of " + std::to_string(cfg.world) +
                               " did not join within " + within + " s (--timeout)");
    }
    impl_->device = is_loopback(cfg.master_addr) ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                                  : c10d::ProcessGroupGloo::createDefaultDevice();
  }
  build({all_});
}

GroupSet::~GroupSet() = default;

c10::intrusive_ptr<c10d::Store> GroupSet::store() const { return impl_->store; }

c10::intrusive_ptr<c10d::Store> GroupSet::new_store_client() const {
  if (cfg_.world <= 1) return {};
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(cfg_.master_port);
  so.isServer = false;
  so.waitWorkers = false;
  so.timeout = cfg_.timeout;
  return c10::make_intrusive<c10d::TCPStore>(cfg_.master_addr, so);
}

void GroupSet::build(std::vector<std::vector<int>> groups, Channel ch) {
  for (auto& g : groups) {
    std::sort(g.begin(), g.end());
    g.erase(std::unique(g.begin(), g.end()), g.end());
  }
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  for (const auto& g : groups) {
    const auto it = std::find(g.begin(), g.end(), cfg_.rank);
    const auto key = std::make_pair(ch, g);
    if (it == g.end() || groups_.count(key)) continue;
    const int me = static_cast<int>(it - g.begin());
    if (g.size() == 1) {
      groups_[key] = std::make_unique<LocalComm>(cfg_.rank);
      continue;
    }
    auto opts = c10d::ProcessGroupGloo::Options::create(cfg_.collective_timeout);
    opts->devices.push_back(impl_->device);
    // Two worker threads on the gradient channel (PyTorch DDP's Gloo default) let one bucket's
    // all-reduce start while the previous one finishes; one elsewhere keeps ordering simple.
    opts->threads = ch == Channel::kGrad ? 2 : 1;
    const std::string prefix = std::string(ch == Channel::kGrad ? "weft/grad/" : "weft/") + group_name(g);
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, impl_->store);
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, me, static_cast<int>(g.size()), opts);
    auto gloo = std::make_unique<GlooComm>(g, me, std::move(pg));
#ifdef USE_C10D_NCCL
    if (cfg_.cuda && cfg_.nccl) {
      auto nopts = c10d::ProcessGroupNCCL::Options::create();
      nopts->timeout = cfg_.collective_timeout;
      auto nstore = c10::make_intrusive<c10d::PrefixStore>(prefix + "/nccl", impl_->store);
      auto npg = c10::make_intrusive<c10d::ProcessGroupNCCL>(nstore, me, static_cast<int>(g.size()), nopts);
      groups_[key] = std::make_unique<RecordingComm>(std::make_unique<NcclComm>(g, me, std::move(npg), std::move(gloo)),
                                                     cfg_.rank, cfg_.throttle_inter_node_Bps, cfg_.gpus_per_node);
      continue;
    }
#endif
    // CUDA tensors without NCCL, and bf16 tensors on either device, go through host_staged.
    groups_[key] = std::make_unique<RecordingComm>(host_staged(std::move(gloo)), cfg_.rank,
                                                   cfg_.throttle_inter_node_Bps, cfg_.gpus_per_node);
  }
}

std::vector<CollectiveRecord> GroupSet::collectives() const {
  std::map<std::vector<int>, std::array<CollectiveRecord, kCollectiveOps>> by_group;
  for (const auto& [key, comm] : groups_) {
    const auto* rec = dynamic_cast<const RecordingComm*>(comm.get());
    if (!rec) continue;  // a group of one rank
    auto& slots = by_group[key.second];
    for (int k = 0; k < kCollectiveOps; ++k) {
      const auto op = static_cast<CollectiveOp>(k);
      slots[k].op = op;
      slots[k].ranks = key.second;
      slots[k].calls += rec->calls(op);
      slots[k].bytes += rec->bytes(op);
    }
  }
  std::vector<CollectiveRecord> out;
  for (const auto& [ranks, slots] : by_group)
    for (const auto& r : slots)
      if (r.calls > 0) out.push_back(r);
  return out;
}

bool GroupSet::has(const std::vector<int>& ranks, Channel ch) const {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  return groups_.count(std::make_pair(ch, sorted)) > 0;
}

Comm& GroupSet::get(const std::vector<int>& ranks, Channel ch) {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  auto it = groups_.find(std::make_pair(ch, sorted));
  if (it == groups_.end()) {
    std::string s;
    for (int r : sorted) s += " " + std::to_string(r);
    WEFT_ASSERT(false, std::string(ch == Channel::kGrad ? "gradient-channel " : "") + "process group {" + s +
                                  " } was not built on rank " + std::to_string(cfg_.rank));
  }
  return *it->second;
}

}  // namespace weft::runtime
