// `weft profile hardware`: collectives over every group shape the planner uses, the overlap
// slow-down, compute sharing and machine facts, through the runtime's own Comm (the Gloo
// workarounds the training runs with are what gets timed).
#include <ATen/ATen.h>
#include <torch/cuda.h>
#ifdef WEFT_HAVE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <map>
#include <thread>

#include "machine.h"
#include "weft/calibration/hardware_profile.h"
#include "weft/plan/geometry.h"
#include "weft/profiler/profiler.h"
#include "weft/runtime/comm.h"
#include "weft/runtime/model.h"
#include "weft/runtime/optim.h"
#include "weft/runtime/straggler.h"
#include "weft/runtime/support.h"
#include "weft/runtime/train.h"

namespace weft::profiler {

using runtime::Comm;
using runtime::GroupSet;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// CPU seconds the calling thread has run.
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::string mib(double bytes) {
  char buf[32];
  if (bytes >= 1048576) std::snprintf(buf, sizeof buf, "%.0f MiB", bytes / 1048576);
  else std::snprintf(buf, sizeof buf, "%.0f KiB", bytes / 1024);
  return buf;
}

// A group shape: `size` ranks `stride` apart; the world is cut into world/size such groups.
struct Shape {
  int size = 2, stride = 1;
  Placement placement = Placement::kIntraNode;
  int ranks_per_node = 2;
  int groups = 1;  // groups running at once
};

std::vector<int> group_of(int rank, const Shape& s) {
  const int block = s.size * s.stride;
  const int base = rank / block * block, j = rank % s.stride;
  std::vector<int> g;
  for (int i = 0; i < s.size; ++i) g.push_back(base + j + i * s.stride);
  return g;
}

std::vector<std::vector<int>> all_groups(int world, const Shape& s) {
  std::vector<std::vector<int>> out;
  for (int r = 0; r < world; ++r) {
    auto g = group_of(r, s);
    if (g.front() == r) out.push_back(g);
  }
  return out;
}

// Every (size, placement, ranks per node) the planner's groups can take on `world` ranks with `G`
// per node: sizes and strides powers of two, the first stride of each distinct placement kept.
std::vector<Shape> group_shapes(int world, int G) {
  std::vector<Shape> out;
  for (int n = 2; n <= world; n *= 2) {
    for (int s = 1; n * s <= world; s *= 2) {
      if (world % (n * s) != 0) continue;
      Shape sh;
      sh.size = n;
      sh.stride = s;
      const auto g = group_of(0, sh);
      std::map<int, int> per_node;
      for (int r : g) ++per_node[r / G];
      sh.ranks_per_node = per_node.begin()->second;
      sh.placement = per_node.size() > 1 ? Placement::kInterNode : Placement::kIntraNode;
      sh.groups = world / n;
      bool seen = false;
      for (const auto& o : out)
        seen = seen || (o.size == sh.size && o.placement == sh.placement && o.ranks_per_node == sh.ranks_per_node);
      if (!seen) out.push_back(sh);
    }
  }
  return out;
}

double max_over(Comm& world, double v) {
  at::Tensor t = at::full({1}, v, at::kDouble);
  world.allreduce_max(t);
  return t.item<double>();
}

double sum_over(Comm& world, double v) {
  at::Tensor t = at::full({1}, v, at::kDouble);
  world.allreduce_sum(t);
  return t.item<double>();
}

// The world agrees on a yes/no: true only if every rank says true.
bool all_agree(Comm& world, bool ok) { return max_over(world, ok ? 0.0 : 1.0) == 0.0; }

// A compute workload of roughly `target_s` seconds alone: square fp32 GEMMs plus an elementwise
// pass, the mix of a transformer layer.
struct Workload {
  int n = 256;
  int reps = 1;
  at::Tensor a, b, c;
  explicit Workload(int size = 256) : n(size) {
    a = at::rand({n, n}, at::kFloat);
    b = at::rand({n, n}, at::kFloat);
    c = at::empty({n, n}, at::kFloat);
  }
  void run_once() {
    at::mm_out(c, a, b);
    c.mul_(0.5).add_(a);
  }
  void run() {
    for (int i = 0; i < reps; ++i) run_once();
  }
};

struct Ctx {
  GroupSet& gs;
  Comm& world;
  int rank, world_size, G;
  const HardwareOptions& o;
  Workload& gap;       // compute run before each timed call (reps 0: none)
  Progress& progress;
  double local_ranks;  // processes sharing this machine's memory
};

// Bytes one rank allocates to time kind k with per-rank buffer S on n ranks (inputs, outputs and
// the runtime's temporary copies), so the memory check can refuse sizes that would not fit.
double footprint(Collective k, double S, int n) {
  switch (k) {
    case Collective::kAllReduce: return 2 * S;
    case Collective::kAllGather: return S / n + 2 * S;
    case Collective::kReduceScatter: return 4 * S;
    case Collective::kAllToAll: return 3 * S;
    case Collective::kSendRecv: return 2 * S;
  }
  return 4 * S;
}

// Times one collective of kind k on this rank's group of shape sh over the message sizes; every
// rank of the world runs this together (the groups of the partition run at once).
CollectiveEntry time_collective(Ctx& cx, Collective k, const Shape& sh, std::vector<std::string>& skipped) {
  CollectiveEntry e;
  e.kind = k;
  e.group_size = sh.size;
  e.placement = sh.placement;
  e.ranks_per_node = sh.ranks_per_node;
  e.concurrent_groups = sh.groups;
  Comm& g = cx.gs.get(group_of(cx.rank, sh));
  const int n = sh.size;
  for (double S = cx.o.min_bytes; S <= cx.o.max_bytes * 1.0001; S *= 4) {
    const int64_t floats = static_cast<int64_t>(std::ceil(S / 4.0 / n)) * n;
    const double bytes = 4.0 * static_cast<double>(floats);
    const std::string what = std::string(profile_name(k)) + " " + std::to_string(n) + " ranks " + mib(bytes);
    const double need = footprint(k, bytes, n) * cx.local_ranks;
    if (!all_agree(cx.world, need < 0.5 * memory_available_bytes())) {
      skipped.push_back(std::string(profile_name(k)) + " over " + std::to_string(n) + " ranks (" + to_string(sh.placement) +
                        ") at " + mib(bytes) + ": needs " + mib(need) + " on this machine, more than half of the " +
                        mib(memory_available_bytes()) + " available");
      cx.progress.tick(what + " (skipped)");
      continue;
    }
    std::function<void()> call;
    at::Tensor buf, out;
    if (k == Collective::kAllReduce) {
      buf = at::zeros({floats}, at::kFloat);
      call = [&] { g.allreduce_sum(buf); };
    } else if (k == Collective::kAllGather) {
      buf = at::zeros({floats / n}, at::kFloat);
      call = [&] { out = g.allgather(buf); };
    } else if (k == Collective::kReduceScatter) {
      buf = at::zeros({floats}, at::kFloat);
      call = [&] { out = g.reduce_scatter(buf); };
    } else if (k == Collective::kAllToAll) {
      buf = at::zeros({n, floats / n}, at::kFloat);
      call = [&] { out = g.alltoall(buf); };
    } else {  // ping-pong between the two members: two one-way messages per call
      buf = at::zeros({floats}, at::kFloat);
      call = [&] {
        if (g.rank() == 0) {
          g.send(buf, 1, 1).wait();
          g.recv(buf, 1, 2);
        } else {
          g.recv(buf, 0, 1);
          g.send(buf, 0, 2).wait();
        }
      };
    }
    call();  // warm-up: connections, first-touch of the buffers
    cx.world.barrier();
    auto t0 = Clock::now();
    call();
    const double pilot = max_over(cx.world, since(t0));
    const int iters = std::clamp(
        static_cast<int>(std::ceil(cx.o.time_per_point_s / std::max(pilot + cx.o.gap_ms * 1e-3, 1e-6))), 2, 200);
    cx.world.barrier();
    double mean = 0;
    if (cx.gap.reps == 0) {  // back to back
      t0 = Clock::now();
      for (int i = 0; i < iters; ++i) call();
      mean = max_over(cx.world, since(t0) / iters);
    } else {  // as training calls them: after some compute, each rank timing only its own call
      double in_call = 0;
      for (int i = 0; i < iters; ++i) {
        cx.gap.run();
        t0 = Clock::now();
        call();
        in_call += since(t0);
      }
      mean = sum_over(cx.world, in_call / iters) / cx.world_size;
    }
    if (k == Collective::kSendRecv) mean /= 2;
    e.samples.push_back({bytes, mean});
    out = at::Tensor();
    cx.progress.tick(what);
  }
  if (!e.samples.empty()) e.fit = fit_alpha_beta(e.kind, e.group_size, e.samples);
  return e;
}

// One step of the built-in model (weft/runtime/train.h) on a single-rank group set: embedding,
// layers, head and loss, backward, AdamW.
void warm_up_runtime() {
  const ModelSpec m = runtime::builtin_model();
  const Plan p = single_process_plan(m, 2, 32, LayerStrategy{}, "warm-up");
  GroupSet local(runtime::CommConfig{});
  local.build(process_groups(p));
  runtime::Model model(p, 0, local, 1);
  runtime::Optimizer opt(model, runtime::AdamWConfig{});
  at::Tensor tokens = at::randint(m.vocab, {2, 32}, at::kLong);
  at::Tensor loss = model.head_loss(model.forward_layers(model.embed(tokens)), tokens);
  loss.backward();
  opt.step(1e-4, 1.0);
}

// One transformer layer of the runtime (hidden 256, 4 heads, FFN 1024, GELU) over 4 x 128 tokens,
// forward and backward, repeated to about 0.15 s: the compute-sharing workload, close to what
// ranks of a small training job do between collectives.
struct LayerWork {
  Plan plan;
  std::unique_ptr<GroupSet> local;
  std::unique_ptr<runtime::Model> model;
  int reps = 1;
  LayerWork() {
    ModelSpec m = runtime::builtin_model();
    m.hidden = 256;
    m.max_seq = 128;
    LayerGroup g = m.groups.front();
    g.count = 1;
    g.shape.hidden = 256;
    g.shape.heads = 4;
    g.shape.kv_heads = 4;
    g.shape.head_dim = 64;
    g.shape.ffn = 1024;
    m.groups = {g};
    plan = single_process_plan(m, 4, 128, LayerStrategy{}, "sharing");
    local = std::make_unique<GroupSet>(runtime::CommConfig{});
    local->build(process_groups(plan));
    model = std::make_unique<runtime::Model>(plan, 0, *local, 1);
    auto t0 = Clock::now();
    once();
    reps = std::max(1, static_cast<int>(0.15 / std::max(since(t0), 1e-6)));
  }
  void once() {
    at::Tensor x = at::randn({4, 128, 256}, at::kFloat).requires_grad_(true);
    at::Tensor y = model->forward_layers(x);
    y.backward(at::ones_like(y));
  }
  void run() {
    for (int i = 0; i < reps; ++i) once();
  }
};

Shape p2p_shape(int world, int G, bool inter) {
  Shape sh;
  sh.size = 2;
  sh.stride = inter ? G : 1;
  sh.placement = inter ? Placement::kInterNode : Placement::kIntraNode;
  sh.ranks_per_node = inter ? 1 : 2;
  sh.groups = world / 2;
  return sh;
}

}  // namespace

#ifdef WEFT_HAVE_CUDA
// Seconds per call of f on GPU 0: one warm-up call, then calls until `budget` seconds have passed
// (and at least 3), timed in groups of `per_sync` between device synchronisations; the median group.
template <class F>
double gpu_seconds(F f, double budget, int per_sync = 1) {
  f();
  torch::cuda::synchronize(0);
  std::vector<double> t;
  const auto start = Clock::now();
  while (since(start) < budget || t.size() < 3) {
    const auto t0 = Clock::now();
    for (int i = 0; i < per_sync; ++i) f();
    torch::cuda::synchronize(0);
    t.push_back(since(t0) / per_sync);
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

// GEMM shapes (m tokens x n outputs x k inputs): squares, and the matrix products of a Llama-2-7B
// layer over 4096 tokens (qkv / output projection 4096 x 4096, MLP 4096 x 11008 both ways) and its
// head (vocabulary 32000), the shapes data/reference/h100 profiles.
struct GemmShape {
  int64_t m, n, k;
};
constexpr GemmShape kGemmShapes[] = {{1024, 1024, 1024},  {2048, 2048, 2048}, {4096, 4096, 4096},
                                     {8192, 8192, 8192},  {4096, 11008, 4096}, {4096, 4096, 11008},
                                     {4096, 32000, 4096}, {4096, 12288, 4096}};

// One GPU alone (docs/profiles.md, "A GPU"): fills the machine facts and the GEMM table.
Status profile_one_gpu(const HardwareOptions& o, HardwareProfile& hp, Progress& progress) {
  MachineFacts& m = hp.machine;
  const at::Device dev(at::kCUDA, 0);
  c10::cuda::set_device(0);
  m.device = "cuda";
  m.backend = "none";
  m.dtype = "bf16";
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, 0) == cudaSuccess) {
    m.device_name = props.name;
    m.memory_per_rank_gib = static_cast<double>(props.totalGlobalMem) / 1073741824.0;
  }
  const double budget = std::max(0.05, o.time_per_point_s);
  // Device memory in use before any model: the CUDA context and cuBLAS's workspace after a first
  // bf16 GEMM (total less free, as nvidia-smi counts it; other processes on the GPU count too).
  {
    at::Tensor warm = at::randn({1024, 1024}, at::TensorOptions().device(dev).dtype(at::kBFloat16));
    (void)at::mm(warm, warm);
    torch::cuda::synchronize(0);
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) == cudaSuccess)
      m.runtime_overhead_gib = static_cast<double>(total - free) / 1073741824.0;
  }
  progress.tick("device memory");
  for (const char* dt : {"bf16", "fp32"}) {
    const at::TensorOptions opt = at::TensorOptions().device(dev).dtype(std::string(dt) == "bf16" ? at::kBFloat16 : at::kFloat);
    for (const GemmShape& s : kGemmShapes) {
      at::Tensor a = at::randn({s.m, s.k}, opt), b = at::randn({s.k, s.n}, opt), c = at::empty({s.m, s.n}, opt);
      const double sec = gpu_seconds([&] { at::mm_out(c, a, b); }, budget);
      hp.gemm.push_back({dt, s.m, s.n, s.k, sec});
      progress.tick(std::string("gemm ") + dt);
    }
  }
  for (const GemmSample& g : hp.gemm)
    if (g.dtype == "bf16" && g.m == 8192 && g.n == 8192 && g.k == 8192) m.matmul_tflops = g.tflops();
  {
    // Streaming: z = x + y over 1 GiB arrays of fp32 (12 bytes moved per element), as on the CPU.
    const int64_t len = 256LL << 20;
    const at::TensorOptions f32 = at::TensorOptions().device(dev).dtype(at::kFloat);
    at::Tensor x = at::rand({len}, f32), y = at::rand({len}, f32), z = at::empty({len}, f32);
    const double sec = gpu_seconds([&] { at::add_out(z, x, y); }, budget);
    m.memory_gbps = 12.0 * static_cast<double>(len) / sec / 1e9;
  }
  progress.tick("memory bandwidth");
  {
    // Launch overhead: back-to-back in-place adds on one element; the GPU runs each in a few
    // microseconds, so 1000 of them take the host's time to issue them (an eager operator's floor).
    at::Tensor one = at::zeros({1}, at::TensorOptions().device(dev).dtype(at::kFloat));
    m.launch_overhead_us = gpu_seconds([&] { one.add_(1.0); }, budget, 1000) * 1e6;
  }
  progress.tick("launch overhead");
  hp.skipped.push_back("collectives: --device cuda measures one GPU alone (collectives between GPUs over NCCL are "
                       "not measured by this profiler)");
  return {};
}
#endif

Status profile_hardware(const HardwareOptions& o) {
  auto bad = [](const std::string& m) { return Status(Error{ErrorKind::kBadInput, m}); };
  if (o.out.empty()) return bad("--out: required (the hardware profile to write)");
  if (!(o.min_bytes >= 4)) return bad("--min-bytes: must be >= 4, got " + std::to_string(o.min_bytes));
  if (!(o.max_bytes >= o.min_bytes))
    return bad("--max-bytes: " + std::to_string(o.max_bytes) + " is below --min-bytes " + std::to_string(o.min_bytes));
  if (o.threads < 1) return bad("--threads: must be >= 1, got " + std::to_string(o.threads));
  if (!(o.gap_ms >= 0)) return bad("--gap-ms: must be >= 0, got " + std::to_string(o.gap_ms));
  if (o.progress != "auto" && o.progress != "on" && o.progress != "off")
    return bad("--progress: expected auto, on or off, got \"" + o.progress + "\"");
  auto env_r = runtime::read_dist_env();
  if (!env_r.ok()) return env_r.error();
  const runtime::DistEnv env = env_r.value();
  if (o.device != "cpu" && o.device != "cuda") return bad("--device: expected cpu or cuda, got \"" + o.device + "\"");
  if (o.device == "cuda") {
#ifdef WEFT_HAVE_CUDA
    if (!o.cluster_out.empty())
      return bad("--cluster-out: a one-GPU profile (--device cuda) has no collectives to derive a cluster from");
    if (env.world > 1)
      return bad("--device cuda: measures one GPU in one process, but the job has " + std::to_string(env.world) +
                 " ranks (collectives between GPUs are not measured); run it without weft launch");
    if (!torch::cuda::is_available() || torch::cuda::device_count() < 1)
      return bad("--device cuda: no CUDA device is visible to this process (torch::cuda::device_count() is " +
                 std::to_string(torch::cuda::device_count()) + ")");
    HardwareProfile hp;
    hp.machine.hostname = host_name();
    hp.machine.cores = cpu_cores();
    hp.machine.threads_per_rank = o.threads;
    hp.machine.created = utc_now();
    runtime::set_threads(o.threads);
    Progress progress("weft profile hardware", 3 + 2 * static_cast<long>(std::size(kGemmShapes)), o.progress, true);
    try {
      Status st = profile_one_gpu(o, hp, progress);
      if (!st.ok()) return st;
    } catch (const std::exception& e) {
      std::string msg = e.what();
      if (auto nl = msg.find('\n'); nl != std::string::npos) msg = msg.substr(0, nl);
      return Error{ErrorKind::kRuntime, "--device cuda: " + msg};
    }
    progress.finish();
    Status st = write_hardware_profile(o.out, hp);
    if (!st.ok()) return st;
    std::fprintf(stderr, "weft profile: wrote %s (%s: %zu GEMM shapes, %.0f GB/s, launch %.1f us)\n", o.out.c_str(),
                 hp.machine.device_name.c_str(), hp.gemm.size(), hp.machine.memory_gbps, hp.machine.launch_overhead_us);
    return {};
#else
    return bad("--device cuda: this weft was built against a libtorch without CUDA; build it against a CUDA "
               "PyTorch (docs/runtime.md, \"Building on a GPU machine\")");
#endif
  }
  auto slow_r = runtime::parse_slow(o.slow, env.world);
  if (!slow_r.ok()) return slow_r.error();
  const runtime::SlowRank slow = slow_r.value();
  if (slow.from_step != 1 || slow.to_step != 0)
    return bad("--slow: the profiler takes RANK:FACTOR (it has no steps), got \"" + o.slow + "\"");
  int local = env.world;
  if (const char* lw = std::getenv("LOCAL_WORLD_SIZE")) local = std::max(1, std::atoi(lw));
  const int G = o.gpus_per_node > 0 ? o.gpus_per_node : std::min(local, env.world);
  if (env.world % G != 0)
    return bad("--gpus-per-node: " + std::to_string(G) + " does not divide the " + std::to_string(env.world) +
               " ranks of the job");
  if (env.world < 2 && env.rank == 0)
    std::fprintf(stderr, "weft profile: one rank: no collectives to time (run under `weft launch -n N`)\n");
  runtime::set_threads(o.threads);

  HardwareProfile hp;
  MachineFacts& m = hp.machine;
  m.hostname = host_name();
  m.device = "cpu";
  m.cores = cpu_cores();
  m.device_name = cpu_model() + " (" + std::to_string(m.cores) + " cores)";
  m.backend = "gloo";
  m.dtype = "fp32";
  m.world_size = env.world;
  m.ranks_per_node = G;
  m.nodes = env.world / G;
  m.threads_per_rank = o.threads;
  m.collective_gap_ms = o.gap_ms;
  m.created = utc_now();
  const double local_ranks = std::min(local, env.world);
  m.memory_per_rank_gib = memory_total_bytes() / local_ranks / 1073741824.0;

  runtime::CommConfig cfg;
  cfg.rank = env.rank;
  cfg.world = env.world;
  cfg.master_addr = env.master_addr;
  cfg.master_port = env.master_port;
  cfg.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  try {
    GroupSet gs(cfg);
    const std::vector<Shape> shapes = env.world > 1 ? group_shapes(env.world, G) : std::vector<Shape>{};
    std::vector<Shape> p2p;
    if (env.world % 2 == 0 && G >= 2) p2p.push_back(p2p_shape(env.world, G, false));
    if (env.world > G && env.world % (2 * G) == 0) p2p.push_back(p2p_shape(env.world, G, true));
    std::vector<std::vector<int>> groups;
    for (const auto& sh : shapes)
      for (auto& g : all_groups(env.world, sh)) groups.push_back(g);
    for (const auto& sh : p2p)
      for (auto& g : all_groups(env.world, sh)) groups.push_back(g);
    gs.build(groups);
    Comm& world = gs.world();
    // Runtime overhead: resident memory of a rank once libtorch, its process groups and the
    // compute libraries' own buffers are in place, measured after one training step of the
    // runtime's small built-in model on this rank alone (its own states are a few MB).
    warm_up_runtime();
    world.barrier();
    m.runtime_overhead_gib = max_over(world, resident_bytes()) / 1073741824.0;

    int sizes = 0;
    for (double S = o.min_bytes; S <= o.max_bytes * 1.0001; S *= 4) ++sizes;
    const long steps = static_cast<long>(sizes) * (4 * static_cast<long>(shapes.size()) + static_cast<long>(p2p.size())) + 4 + (env.world > 1 ? 1 : 0);
    Progress progress("weft profile hardware", steps, o.progress, env.rank == 0);
    // The compute gap between timed calls: 128 x 128 GEMMs for about --gap-ms on rank 0 alone,
    // the same count on every rank.
    Workload gap(128);
    if (o.gap_ms > 0) {
      gap.run_once();
      auto t0 = Clock::now();
      for (int i = 0; i < 20; ++i) gap.run_once();
      const double one = since(t0) / 20;
      gap.reps = static_cast<int>(max_over(world, env.rank == 0 ? std::max(1.0, std::round(o.gap_ms * 1e-3 / one)) : 0.0));
    } else {
      gap.reps = 0;
    }
    Ctx cx{gs, world, env.rank, env.world, G, o, gap, progress, local_ranks};

    // --- machine facts, rank 0 alone: matmul rate and streaming memory rate
    {
      double tflops = 0, gbps = 0;
      if (env.rank == 0) {
        const int64_t n = 512;
        at::Tensor a = at::rand({n, n}, at::kFloat), b = at::rand({n, n}, at::kFloat), c = at::empty({n, n}, at::kFloat);
        at::mm_out(c, a, b);
        int reps = 0;
        auto t0 = Clock::now();
        while (since(t0) < 0.3 || reps < 3) at::mm_out(c, a, b), ++reps;
        tflops = 2.0 * n * n * n * reps / since(t0) / 1e12;
        const int64_t len = 8 << 20;  // 32 MiB per array
        at::Tensor x = at::rand({len}, at::kFloat), y = at::rand({len}, at::kFloat), z = at::empty({len}, at::kFloat);
        at::add_out(z, x, y);
        reps = 0;
        t0 = Clock::now();
        while (since(t0) < 0.3 || reps < 3) at::add_out(z, x, y), ++reps;
        gbps = 3.0 * 4 * static_cast<double>(len) * reps / since(t0) / 1e9;
      }
      m.matmul_tflops = max_over(world, tflops);
      m.memory_gbps = max_over(world, gbps);
      progress.tick("machine facts");
    }

    // --- per-rank speed (Malleus's straggler quantification): the GEMMs of the matmul rate above
    // on every rank. These ranks share one machine's cores, so they take turns (all at once would
    // measure the sharing, which the next section does), each warms up first (a rank's first GEMMs
    // of a size run slower), and the time is the thread's CPU time (one intra-op thread): what the
    // rank's core needs for the work, not the moments other processes hold it. CPU time still moves
    // with what else runs on the machine (shared caches and memory bandwidth), so each round's
    // times are compared within the round: a rank's ratio to the round's healthy rank (the lower
    // median, which stragglers in a minority do not move), and its slowdown is the median of its
    // kRounds ratios. A drift of the machine between rounds cancels in the pairing, and a round that
    // caught one rank under load moves the median little. A healthy job's ranks sit within a few
    // percent of each other. Within a round the ranks take kTurns turns each, interleaved, and a
    // rank's time is its fastest turn: load from outside only ever adds time, so the fastest turn
    // is the one nearest the rank's own speed. Planning takes a rank as a straggler from
    // kMeasuredStraggler (weft/calibration/hardware_profile.h).
    if (env.world > 1) {
      runtime::set_threads(1);  // the thread's CPU time is the rank's work only on one thread
      const int64_t n = 512;
      constexpr int kRounds = 7;
      constexpr int kTurns = 3;  // turns per round; a rank's round time is its fastest turn
      at::Tensor a = at::rand({n, n}, at::kFloat), b = at::rand({n, n}, at::kFloat), c = at::empty({n, n}, at::kFloat);
      const double rate = max_over(world, env.rank == 0 ? m.matmul_tflops * 1e12 : 0.0);  // FLOP/s
      const int reps = std::max(3, static_cast<int>(std::round(0.03 * rate / (2.0 * n * n * n))));
      for (int i = 0; i < 3; ++i) at::mm_out(c, a, b);
      std::vector<std::vector<double>> ratios(env.world);
      for (int round = 0; round < kRounds; ++round) {
        std::vector<double> t_round(env.world, std::numeric_limits<double>::infinity());
        for (int turn = 0; turn < kTurns; ++turn) {
          for (int r = 0; r < env.world; ++r) {
            world.barrier();
            double t = 0;
            if (env.rank == r) {
              const double c0 = thread_cpu_s();
              for (int i = 0; i < reps; ++i) at::mm_out(c, a, b);
              t = thread_cpu_s() - c0;
              if (slow.rank == r) t *= slow.factor;
            }
            t_round[r] = std::min(t_round[r], max_over(world, t));
          }
        }
        std::vector<double> sorted = t_round;
        std::sort(sorted.begin(), sorted.end());
        const double healthy = sorted[(sorted.size() - 1) / 2];
        for (int r = 0; r < env.world; ++r) ratios[r].push_back(healthy > 0 ? t_round[r] / healthy : 1.0);
      }
      for (auto& v : ratios) {
        std::sort(v.begin(), v.end());
        m.rank_slowdown.push_back(v[v.size() / 2]);  // kRounds is odd: the middle one
      }
      runtime::set_threads(o.threads);
      progress.tick("per-rank speed");
    }

    // --- compute sharing: a transformer layer of the runtime (LayerWork) run by k ranks of every
    // node at once, over rank 0 running it alone; alone and shared alternate for kRounds rounds
    // and the median ratio is kept, so a drift of the machine's speed does not bias it.
    {
      LayerWork w;
      w.reps = static_cast<int>(max_over(world, env.rank == 0 ? w.reps : 0));  // rank 0's count everywhere
      w.run();  // warm-up
      std::vector<int> counts;
      for (int k = 1; k < G; k *= 2) counts.push_back(k);
      counts.push_back(G);
      constexpr int kRounds = 5;
      std::map<int, std::vector<double>> ratios;
      auto timed = [&](bool active) {
        world.barrier();
        double t = 0;
        if (active) {
          auto t0 = Clock::now();
          w.run();
          t = since(t0);
        }
        return max_over(world, t);
      };
      for (int round = 0; round < kRounds; ++round) {
        const double alone = timed(env.rank == 0);
        for (int k : counts) {
          if (k == 1 && m.nodes == 1) continue;  // one rank of the one node is the reference itself
          ratios[k].push_back(timed(env.rank % G < k) / alone);
        }
      }
      for (auto& [k, v] : ratios) {
        std::sort(v.begin(), v.end());
        hp.sharing.push_back({k, std::max(1.0, v[v.size() / 2])});
      }
      progress.tick("compute sharing");
      for (const auto& s : hp.sharing)
        progress.note("weft profile: compute sharing: " + std::to_string(s.ranks) + " rank(s) per node at once: x" +
                      std::to_string(s.slowdown).substr(0, 4));
    }

    // --- collectives
    for (const auto& sh : shapes) {
      for (Collective k : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                           Collective::kAllToAll}) {
        CollectiveEntry e = time_collective(cx, k, sh, hp.skipped);
        if (e.samples.empty()) continue;
        progress.note("weft profile: " + std::string(profile_name(k)) + " over " + std::to_string(sh.size) + " ranks (" +
                      to_string(sh.placement) + ", " + std::to_string(sh.ranks_per_node) + " per node): latency " +
                      std::to_string(static_cast<int>(e.fit.latency_s * 1e6)) + " us, bus " +
                      std::to_string(e.fit.bus_gbps).substr(0, 5) + " GB/s");
        hp.collectives.push_back(std::move(e));
      }
    }
    for (const auto& sh : p2p) {
      CollectiveEntry e = time_collective(cx, Collective::kSendRecv, sh, hp.skipped);
      if (e.samples.empty()) continue;
      progress.note("weft profile: p2p (" + std::string(to_string(sh.placement)) + "): latency " +
                    std::to_string(static_cast<int>(e.fit.latency_s * 1e6)) + " us, " +
                    std::to_string(e.fit.bus_gbps).substr(0, 5) + " GB/s");
      hp.collectives.push_back(std::move(e));
    }
    if (env.world > G && G < 2) hp.skipped.push_back("p2p inside a node: one rank per node");
    if (env.world <= G) hp.skipped.push_back("groups spanning nodes: the job has one node (use --gpus-per-node)");

    // --- overlap: the workload while all-reduces of 4 MiB run on the widest group inside a node
    if (!shapes.empty()) {
      const Shape* sh = &shapes.front();
      for (const auto& s : shapes)
        if (s.placement == Placement::kIntraNode && s.stride == 1 && s.size > sh->size) sh = &s;
      Comm& g = gs.get(group_of(env.rank, *sh));
      const int64_t floats = 1 << 20;
      at::Tensor buf = at::zeros({floats}, at::kFloat);
      Workload w;
      w.run_once();
      // Alone: compute, then communication.
      world.barrier();
      auto t0 = Clock::now();
      w.reps = 1;
      w.run_once();
      w.reps = static_cast<int>(max_over(world, std::max(1, static_cast<int>(0.25 / std::max(since(t0), 1e-6)))));
      world.barrier();
      t0 = Clock::now();
      w.run();
      const double compute_alone = max_over(world, since(t0));
      world.barrier();
      t0 = Clock::now();
      g.allreduce_sum(buf);
      g.allreduce_sum(buf);
      const double one = max_over(world, since(t0) / 2);
      const int calls = std::clamp(static_cast<int>(std::ceil(compute_alone / std::max(one, 1e-6))), 1, 500);
      // Together: a thread runs exactly `calls` all-reduces while this thread computes.
      world.barrier();
      double comm_with = 0;
      std::thread comm([&] {
        auto c0 = Clock::now();
        for (int i = 0; i < calls; ++i) g.allreduce_sum(buf);
        comm_with = since(c0);
      });
      t0 = Clock::now();
      w.run();
      const double compute_with = since(t0);
      comm.join();
      hp.overlap.compute_slowdown = std::max(1.0, max_over(world, compute_with) / compute_alone);
      hp.overlap.comm_slowdown = std::max(1.0, max_over(world, comm_with) / (calls * one));
      hp.overlap.message_bytes = 4.0 * floats;
      hp.overlap.group_size = sh->size;
      progress.tick("overlap");
      progress.note("weft profile: overlap: compute x" + std::to_string(hp.overlap.compute_slowdown).substr(0, 4) +
                    " with all-reduces in flight, all-reduce x" + std::to_string(hp.overlap.comm_slowdown).substr(0, 4) +
                    " with compute running");
    } else {
      hp.skipped.push_back("overlap: one rank, no communication");
    }
    world.barrier();
    progress.finish();
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg = msg.substr(0, nl);
    return Error{ErrorKind::kRuntime, "rank " + std::to_string(env.rank) + ": " + msg};
  }

  if (env.rank != 0) return {};
  Status st = write_hardware_profile(o.out, hp);
  if (!st.ok()) return st;
  std::fprintf(stderr, "weft profile: wrote %s (%zu collective tables, %zu skipped)\n", o.out.c_str(),
               hp.collectives.size(), hp.skipped.size());
  if (!o.cluster_out.empty()) {
    auto c = cluster_from_hardware_profile(hp);
    if (!c.ok()) return c.error();
    auto w = catch_errors([&]() -> Result<bool> {
      write_json_file(o.cluster_out, to_json(c.value()));
      return true;
    });
    if (!w.ok()) return w.error();
    std::fprintf(stderr, "weft profile: wrote %s (the measured machine as a cluster spec)\n", o.cluster_out.c_str());
  }
  return {};
}

}  // namespace weft::profiler
