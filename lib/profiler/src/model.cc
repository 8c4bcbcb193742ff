// `weft profile model`: forward and backward time and saved activation memory of the runtime's own
// layers (weft/runtime/model.h), the embedding and the LM head, in this process alone. A tp degree t is
// measured on the shard one rank of a t-way group holds: a model whose layer has heads / t heads
// (kv heads / t, or one when t exceeds them), ffn / t and vocab / t, run without process groups, so
// the figures hold compute only; the hardware profile prices the collectives.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/cuda.h>
#ifdef WEFT_HAVE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include "machine.h"
#include "weft/calibration/model_profile.h"
#include "weft/core/stats.h"
#include "weft/cost/memory.h"
#include "weft/plan/geometry.h"
#include "weft/profiler/profiler.h"
#include "weft/runtime/model.h"
#include "weft/runtime/optim.h"
#include "weft/runtime/support.h"
#include "weft/runtime/train.h"
#include "weft/spec/counts.h"
#include "weft/spec/presets.h"

namespace weft::profiler {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
constexpr uint64_t kSeed = 1234;

// Where a point runs: the device and the dtype the layers compute in (bf16: as `weft train
// --precision bf16` runs, from fp32 parameters, the loss in fp32), how its time is read (a
// CUDA device is synchronised before each clock reading) and how its memory is counted (the CUDA
// caching allocator's allocated bytes on a GPU, the process heap on the CPU).
struct Dev {
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;
  bool cuda() const { return device.is_cuda(); }
  void sync() const {
    if (cuda()) torch::cuda::synchronize(device.index());
  }
  double in_use_bytes() const {
#ifdef WEFT_HAVE_CUDA
    if (cuda()) {
      const auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
      return static_cast<double>(st.allocated_bytes[0].current);
    }
#endif
    return heap_in_use_bytes();
  }
  double available_bytes() const {
#ifdef WEFT_HAVE_CUDA
    if (cuda()) {
      // Free device memory plus what the caching allocator holds unused (the current device is
      // this one: profile_model sets it).
      size_t free = 0, total = 0;
      if (cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
      const auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
      return static_cast<double>(free) +
             static_cast<double>(st.reserved_bytes[0].current - st.allocated_bytes[0].current);
    }
#endif
    return memory_available_bytes();
  }
  at::TensorOptions act() const { return at::TensorOptions().dtype(dtype).device(device); }
  at::TensorOptions ids() const { return at::TensorOptions().dtype(at::kLong).device(device); }
};

std::string gib(double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", b / 1073741824.0);
  return buf;
}

// The layer shard one rank of a tp-way group holds, as a one-layer model of its own.
ModelSpec shard_model(const ModelSpec& m, const LayerGroup& g, int tp) {
  ModelSpec s = m;
  LayerGroup one = g;
  one.count = 1;
  LayerShape& sh = one.shape;
  sh.heads = g.shape.heads / tp;
  sh.kv_heads = g.shape.kv_heads % tp == 0 ? g.shape.kv_heads / tp : 1;
  sh.ffn = g.shape.ffn / tp;
  s.groups = {one};
  s.vocab = (m.vocab + tp - 1) / tp;
  return s;
}

// Why tp does not apply to group g, or "" when it does.
std::string tp_problem(const LayerGroup& g, int tp) {
  const auto& s = g.shape;
  // A MoE layer's experts lie on their own grid (weft/plan/strategy.h), which a tp-way shard of the
  // layer alone does not give: such layers are timed whole, on one rank (every expert local).
  if (s.moe.enabled() && tp > 1) return "MoE layers are profiled at tp 1 only";
  if (s.kind != LayerKind::kDecoder) return std::string(to_string(s.kind)) + " layers are not run by the weft runtime";
  if (s.heads % tp != 0) return "tp " + std::to_string(tp) + " does not divide " + std::to_string(s.heads) + " heads";
  if (s.ffn % tp != 0) return "tp " + std::to_string(tp) + " does not divide ffn " + std::to_string(s.ffn);
  if (s.kv_heads % tp != 0 && tp % s.kv_heads != 0)
    return "tp " + std::to_string(tp) + " and " + std::to_string(s.kv_heads) + " kv heads: neither divides the other";
  return "";
}

Plan one_layer_plan(const ModelSpec& m, int mb, int seq, Recompute rc, int zero = 0) {
  LayerStrategy s;
  s.recompute = rc;
  s.zero = zero;
  return single_process_plan(m, mb, seq, s, "profile");
}

// One model instance of a plan on a single rank (no process group).
struct Rig {
  runtime::GroupSet groups;
  std::unique_ptr<runtime::Model> model;
  Rig(const Plan& p, const Dev& d) : groups(runtime::CommConfig{}) {
    groups.build(process_groups(p));
    model = std::make_unique<runtime::Model>(p, 0, groups, kSeed, d.device, at::kFloat, d.dtype);
  }
};

struct Timed {
  double fwd = 0, bwd = 0, act = 0;
};

// Runs `iteration` (which returns forward s, backward s, activation bytes) once to warm up, then
// until `budget` seconds and at least `min_iters` times; medians.
template <class F>
Timed repeat(F iteration, double budget, int min_iters) {
  (void)iteration();
  std::vector<double> f, b, a;
  const auto t0 = Clock::now();
  while (static_cast<int>(f.size()) < min_iters || (since(t0) < budget && f.size() < 1000)) {
    const Timed t = iteration();
    f.push_back(t.fwd);
    b.push_back(t.bwd);
    a.push_back(t.act);
  }
  return {median(f), median(b), median(a)};
}

PhaseSample sample(int tp, Recompute rc, int zero, int mb, int seq, const Timed& t) {
  PhaseSample ps;
  ps.tp = tp;
  ps.recompute = rc;
  ps.zero = zero;
  ps.micro_batch = mb;
  ps.seq = seq;
  ps.forward_s = t.fwd;
  ps.backward_s = t.bwd;
  ps.activation_bytes = t.act;
  return ps;
}

// One forward and backward on device d: `forward` returns what `backward(out)` differentiates.
// Forward and backward seconds (the device synchronised before each clock reading) and the bytes
// the forward left allocated (its saved activations and output).
template <class Fwd, class Bwd>
Timed forward_backward(const Dev& d, Fwd forward, Bwd backward) {
  d.sync();
  const double before = d.in_use_bytes();
  auto t0 = Clock::now();
  at::Tensor out = forward();
  d.sync();
  const double f = since(t0);
  const double act = d.in_use_bytes() - before;
  t0 = Clock::now();
  backward(out);
  d.sync();
  return Timed{f, since(t0), std::max(0.0, act)};
}

Timed time_layer(runtime::Model& model, int mb, int seq, int64_t H, const ModelOptions& o, const Dev& d) {
  return repeat(
      [&] {
        at::Tensor x = at::randn({mb, seq, H}, d.act()).requires_grad_(true);
        at::Tensor dy = at::randn({mb, seq, H}, d.act());
        return forward_backward(
            d, [&] { return model.forward_layers(x); }, [&](const at::Tensor& y) { torch::autograd::backward({y}, {dy}); });
      },
      o.time_per_point_s, o.min_iters);
}

Timed time_embedding(runtime::Model& model, int mb, int seq, int64_t V, int64_t H, const ModelOptions& o,
                     const Dev& d) {
  return repeat(
      [&] {
        at::Tensor tokens = at::randint(V, {mb, seq}, d.ids());
        at::Tensor dx = at::randn({mb, seq, H}, d.act());
        return forward_backward(
            d, [&] { return model.embed(tokens); }, [&](const at::Tensor& x) { torch::autograd::backward({x}, {dx}); });
      },
      o.time_per_point_s, o.min_iters);
}

Timed time_head(runtime::Model& model, int mb, int seq, int64_t V, int64_t H, const ModelOptions& o, const Dev& d) {
  return repeat(
      [&] {
        at::Tensor x = at::randn({mb, seq, H}, d.act()).requires_grad_(true);
        at::Tensor targets = at::randint(V, {mb, seq}, d.ids());
        return forward_backward(
            d, [&] { return model.head_loss(x, targets) / static_cast<double>(mb * seq); },
            [](const at::Tensor& loss) { loss.backward(); });
      },
      o.time_per_point_s, o.min_iters);
}

// Bytes a point may need at its peak: model states (24 bytes per parameter in the runtime: weights,
// gradients, two moments, two masks; an upper bound in bf16) plus twice the analytic activation
// estimate (forward temporaries and the backward's gradients of them) and the logits of the head.
double point_need(const ModelSpec& sm, int mb, int seq, Recompute rc, const Dev& d) {
  const LayerShape& L = sm.groups[0].shape;
  const double params = layer_params(L).total() + embedding_params(sm) + lm_head_params(sm);
  ActivationOptions ao;
  ao.samples = mb;
  ao.seq = seq;
  ao.elem_bytes = d.dtype == at::kFloat ? 4 : 2;
  ao.flash_attention = false;  // an upper bound
  (void)rc;  // recompute saves memory: the estimate without it is an upper bound
  const double act = layer_activation_bytes(L, LayerStrategy{}, ao).value();
  const double logits = ao.elem_bytes * mb * seq * static_cast<double>(sm.vocab) * 3;
  return 24 * params + 2 * act + logits;
}

}  // namespace

Status profile_model(const ModelOptions& o) {
  auto bad = [](const std::string& m) { return Status(Error{ErrorKind::kBadInput, m}); };
  if (o.out.empty()) return bad("--out: required (the model profile to write)");
  if (o.model.empty()) return bad("--model: required (a preset name, weft model JSON or HF config.json)");
  auto positive = [&](const std::vector<int>& v, const char* flag) -> Status {
    if (v.empty()) return bad(std::string(flag) + ": needs at least one value");
    for (int x : v)
      if (x < 1) return bad(std::string(flag) + ": values must be >= 1, got " + std::to_string(x));
    return {};
  };
  if (Status s = positive(o.tp, "--tp"); !s.ok()) return s;
  if (Status s = positive(o.seq, "--seq"); !s.ok()) return s;
  if (Status s = positive(o.micro_batch, "--micro-batch"); !s.ok()) return s;
  std::vector<Recompute> rcs;
  for (const auto& r : o.recompute) {
    auto rc = recompute_from_string(r);
    if (!rc.ok()) return bad("--recompute: " + rc.error().message);
    rcs.push_back(rc.value());
  }
  if (rcs.empty()) return bad("--recompute: needs at least one of none, selective, full");
  if (o.threads < 1) return bad("--threads: must be >= 1, got " + std::to_string(o.threads));
  if (!(o.memory_fraction > 0 && o.memory_fraction <= 1))
    return bad("--memory-fraction: must be in (0, 1], got " + std::to_string(o.memory_fraction));
  if (o.progress != "auto" && o.progress != "on" && o.progress != "off")
    return bad("--progress: expected auto, on or off, got \"" + o.progress + "\"");
  auto mr = load_model(o.model);
  if (!mr.ok()) return mr.error();
  const ModelSpec m = std::move(mr).value();
  if (m.position == PositionKind::kLearned && m.max_seq > 0)
    for (int s : o.seq)
      if (s > m.max_seq)
        return bad("--seq: " + std::to_string(s) + " exceeds the model's learned position table of " +
                   std::to_string(m.max_seq));
  Dev dev;
  if (o.dtype == "bf16") {
    dev.dtype = at::kBFloat16;
  } else if (o.dtype != "fp32") {
    return bad("--dtype: expected fp32 or bf16, got \"" + o.dtype + "\"");
  }
  std::string device_name = cpu_model();
  if (o.device == "cuda") {
#ifdef WEFT_HAVE_CUDA
    if (!torch::cuda::is_available() || torch::cuda::device_count() < 1)
      return bad("--device cuda: no CUDA device is visible to this process (torch::cuda::device_count() is " +
                 std::to_string(torch::cuda::device_count()) + ")");
    dev.device = at::Device(at::kCUDA, 0);
    c10::cuda::set_device(0);
    (void)at::empty({1}, dev.act());  // the caching allocator keeps no statistics before its first use
    cudaDeviceProp props{};
    if (cudaGetDeviceProperties(&props, 0) == cudaSuccess) device_name = props.name;
#else
    return bad("--device cuda: this weft was built against a libtorch without CUDA; build it against a CUDA "
               "PyTorch (docs/runtime.md, \"Building on a GPU machine\")");
#endif
  } else if (o.device != "cpu") {
    return bad("--device: expected cpu or cuda, got \"" + o.device + "\"");
  }
  if (dev.dtype == at::kBFloat16 && !dev.cuda())
    return bad("--dtype bf16: needs --device cuda (CPU bf16 kernels are not what a GPU runs)");
  runtime::set_threads(o.threads);

  ModelProfile prof;
  prof.model = m;
  prof.device = o.device;
  prof.device_name = device_name;
  prof.hostname = host_name();
  prof.threads = o.threads;
  prof.created = utc_now();
  prof.runtime.grad_sync_overlaps_backward = true;
  prof.runtime.dtype = o.dtype;

  // Distinct layer shapes (groups of one shape are measured once).
  std::vector<const LayerGroup*> groups;
  for (const auto& g : m.groups) {
    bool seen = false;
    for (const auto* h : groups) seen = seen || h->shape == g.shape;
    if (!seen) groups.push_back(&g);
  }
  std::vector<int> tps = o.tp, seqs = o.seq, mbs = o.micro_batch;
  for (auto* v : {&tps, &seqs, &mbs}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
  // Layer variants: every recompute mode without ZeRO, and ZeRO-3 without recompute (its own
  // compute on the gathered views is an addition the cost model applies to every mode).
  std::vector<std::pair<Recompute, int>> variants;
  for (Recompute rc : rcs) variants.push_back({rc, 0});
  if (std::find(rcs.begin(), rcs.end(), Recompute::kNone) != rcs.end()) variants.push_back({Recompute::kNone, 3});
  const int edge_variants = variants.back().second == 3 ? 2 : 1;
  const long points =
      static_cast<long>(tps.size() * seqs.size() * mbs.size() * (groups.size() * variants.size() + edge_variants)) + 1;
  Progress progress("weft profile model", points, o.progress, true);

  auto skip = [&](const std::string& what, const std::string& why) {
    prof.skipped.push_back(what + ": " + why);
    progress.note("weft profile: skipped " + what + ": " + why);
  };
  try {
    const LayerGroup& g0 = *groups.front();
    // Optimizer step cost and model-state bytes per parameter: the full tp=1 one-layer model
    // (embedding, one layer, head), the smallest point. Measured first, on a fresh heap. The
    // optimizer runs on fp32 weights and states whatever --dtype is (the master copy of mixed
    // precision).
    {
      Dev fp32 = dev;
      fp32.dtype = at::kFloat;
      const Plan p = one_layer_plan(shard_model(m, g0, 1), mbs.front(), seqs.front(), Recompute::kNone);
      fp32.sync();
      const double before = fp32.in_use_bytes();
      Rig rig(p, fp32);
      runtime::Optimizer opt(*rig.model, runtime::AdamWConfig{});
      fp32.sync();
      const double params = static_cast<double>(rig.model->local_param_count());
      prof.runtime.state_bytes_per_param = std::max(0.0, fp32.in_use_bytes() - before) / params;
      const Timed t = repeat(
          [&] {
            fp32.sync();
            auto t0 = Clock::now();
            opt.zero_grad();
            (void)opt.local_norm_sq();
            opt.step(1e-4, 1.0);
            fp32.sync();
            return Timed{since(t0), 0, 0};
          },
          o.time_per_point_s, o.min_iters);
      prof.runtime.optimizer_s_per_param = t.fwd / params;
      progress.tick("optimizer");
    }

    for (const LayerGroup* g : groups) {
      LayerProfile lp;
      lp.group = g->name;
      lp.shape = g->shape;
      for (int tp : tps) {
        const std::string problem = tp_problem(*g, tp);
        for (const auto& [rc, zero] : variants) {
          for (int seq : seqs) {
            for (int mb : mbs) {
              const std::string what = "layer " + g->name + " tp " + std::to_string(tp) + " recompute " + to_string(rc) +
                                       (zero ? " zero 3" : "") + " micro-batch " + std::to_string(mb) + " seq " +
                                       std::to_string(seq);
              if (!problem.empty()) {
                if (rc == rcs.front() && zero == 0 && seq == seqs.front() && mb == mbs.front())
                  skip("layer " + g->name + " tp " + std::to_string(tp), problem);
                progress.tick(what);
                continue;
              }
              const ModelSpec sm = shard_model(m, *g, tp);
              const double need = point_need(sm, mb, seq, rc, dev), avail = dev.available_bytes();
              if (need > o.memory_fraction * avail) {
                skip(what, "needs about " + gib(need) + ", " + gib(avail) + " available");
                progress.tick(what);
                continue;
              }
              const Plan p = one_layer_plan(sm, mb, seq, rc, zero);
              if (Status s = runtime::check_supported(p); !s.ok()) {
                skip(what, s.error().message);
                progress.tick(what);
                continue;
              }
              Rig rig(p, dev);
              lp.samples.push_back(sample(tp, rc, zero, mb, seq, time_layer(*rig.model, mb, seq, m.hidden, o, dev)));
              progress.tick(what);
            }
          }
        }
      }
      prof.layers.push_back(std::move(lp));
    }

    // Embedding and head (on the first group's shard; they do not depend on it).
    std::vector<int> edge_zero = {0};
    if (edge_variants == 2) edge_zero.push_back(3);
    for (int zero : edge_zero) {
      for (int tp : tps) {
        for (int seq : seqs) {
          for (int mb : mbs) {
            const std::string what = "embedding and head tp " + std::to_string(tp) + (zero ? " zero 3" : "") +
                                     " micro-batch " + std::to_string(mb) + " seq " + std::to_string(seq);
            ModelSpec em = shard_model(m, g0, 1);  // the layer is not timed here
            em.vocab = (m.vocab + tp - 1) / tp;     // the vocab-parallel shard (the last may be shorter)
            const double need = point_need(em, mb, seq, Recompute::kNone, dev), avail = dev.available_bytes();
            if (need > o.memory_fraction * avail) {
              skip(what, "needs about " + gib(need) + ", " + gib(avail) + " available");
              progress.tick(what);
              continue;
            }
            Rig rig(one_layer_plan(em, mb, seq, Recompute::kNone, zero), dev);
            const Timed e = time_embedding(*rig.model, mb, seq, em.vocab, m.hidden, o, dev);
            const Timed h = time_head(*rig.model, mb, seq, em.vocab, m.hidden, o, dev);
            prof.embedding.push_back(sample(tp, Recompute::kNone, zero, mb, seq, e));
            prof.head.push_back(sample(tp, Recompute::kNone, zero, mb, seq, h));
            progress.tick(what);
          }
        }
      }
    }

  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg = msg.substr(0, nl);
    return Error{ErrorKind::kRuntime, "profiling " + m.name + ": " + msg};
  }
  progress.finish();
  Status st = write_model_profile(o.out, prof);
  if (!st.ok()) return st;
  size_t n = prof.embedding.size();
  for (const auto& l : prof.layers) n += l.samples.size();
  std::fprintf(stderr, "weft profile: wrote %s (%zu measured points, %zu skipped)\n", o.out.c_str(), n,
               prof.skipped.size());
  return {};
}

}  // namespace weft::profiler
