// train() (weft/runtime/train.h): one rank's run, from the options to the summary. Its parts live
// beside it: train_setup.h (options, plan, data and device, before anything connects),
// default_plan.cc (the plan without --plan), watchdog.h (dead peers), reporter.h (what rank 0
// prints), fault.h (the --fault hook), weft/runtime/pipeline_executor.h (one step of a stage's
// passes and transfers) and state.h (checkpoints, parameter files).
#include <c10/core/impl/DeviceGuardImplInterface.h>
#ifdef WEFT_HAVE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <thread>
#include <sstream>
#include <utility>

#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include "fault.h"
#include "weft/core/format.h"
#include "weft/plan/checkpoint_layout.h"
#include "weft/plan/routing_trace.h"
#include "weft/runtime/checkpoint.h"
#include "weft/runtime/hf_checkpoint.h"
#include "weft/runtime/straggler.h"
#include "reporter.h"
#include "state.h"
#include "train_setup.h"
#include "varlen_stage.h"
#include "watchdog.h"
#include "weft/runtime/model.h"
#include "weft/runtime/optim.h"
#include "weft/runtime/pipeline_executor.h"
#include "weft/runtime/schedule.h"

namespace weft::runtime {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

CommConfig comm_config(const DistEnv& env, const TrainOptions& o, const DeviceChoice& device, const Plan& plan) {
  CommConfig cfg;
  cfg.rank = env.rank;
  cfg.world = env.world;
  cfg.master_addr = env.master_addr;
  cfg.master_port = env.master_port;
  cfg.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  cfg.collective_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.collective_timeout_s * 1000));
  cfg.cuda = device.device.is_cuda();
  cfg.nccl = device.nccl;
  cfg.throttle_inter_node_Bps = o.throttle_inter_node_gbps * 1e9;
  cfg.gpus_per_node = std::max(1, plan.cluster.gpus_per_node);
  return cfg;
}

// --lr 0 (the default): 1e-2 for the small built-in model, 3e-4 otherwise.
LrSchedule lr_schedule(const TrainOptions& o) {
  LrSchedule lrs;
  lrs.peak = o.lr > 0 ? o.lr : (o.plan.empty() && o.model.empty()) ? 1e-2 : 3e-4;
  lrs.min = o.min_lr >= 0 ? o.min_lr : lrs.peak / 10;
  lrs.warmup = o.warmup >= 0 ? o.warmup : o.steps / 10;
  lrs.total = o.steps;
  return lrs;
}

std::string grad_sync_note(const GradSync& g, const TrainOptions& o) {
  if (g.num_buckets() == 0) return "gradient sync: no data-parallel gradient reduction on this rank";
  char b[192];
  std::snprintf(b, sizeof b, "gradient sync: %d bucket%s of at most %g MiB on this rank, reduced %s", g.num_buckets(),
                g.num_buckets() == 1 ? "" : "s", o.bucket_mb,
                o.grad_overlap == "on" ? "during backward as each completes" : "after backward");
  return b;
}

// Rank 0's first lines: the run in one line, the precision and the gradient buckets (--format
// json: only the precision line, on stderr).
void print_start(Reporter& rep, const TrainOptions& o, const Plan& plan, int world, const TokenSource& data,
                 const GradSync& gs, const std::string& device_name, DType run, const Resumed& resumed,
                 const VarlenSetup* vl) {
  const std::string resumed_line =
      "resumed from step " + std::to_string(resumed.step) + " in " + o.checkpoint_dir +
      (resumed.resharded ? ", re-sharded from a checkpoint of " + std::to_string(resumed.from_world) + " rank" +
                               (resumed.from_world > 1 ? "s" : "") + " under plan " + resumed.from_plan
                         : "");
  const bool as_planned = plan.train.dtype == run;
  const std::string precision = (as_planned ? "" : "weft: warning: ") + precision_note(plan, device_name, run);
  if (o.format != "text") {
    std::fprintf(stderr, "%s%s\n", as_planned ? "weft: " : "", precision.c_str());
    if (resumed.resharded) std::fprintf(stderr, "weft: %s\n", resumed_line.c_str());
    return;
  }
  int64_t params = 0;
  for (const ParamSpec& p : model_params(plan)) {
    int64_t n = 1;
    for (auto d : p.full_shape) n *= d;
    params += n;
  }
  const int m = plan.train.micro_batches;
  std::ostringstream h;
  h << "weft train: model " << plan.model.name << " (" << params << " parameters), " << world << " rank"
    << (world > 1 ? "s" : "") << ", pp " << plan.train.pp << " " << to_string(plan.train.schedule) << ", "
    << (o.plan.empty() ? std::string("data parallel") : "plan " + o.plan);
  if (vl)
    h << "; variable-length steps of " << vl->batches->per_step() << " documents of at most " << plan.train.seq
      << " tokens (" << vl->batches->dropped() << " of the file's " << vl->batches->documents().length.size()
      << " longer, left out), sequence groups of " << vl->min_group << " to " << vl->max_group
      << " ranks chosen per micro-batch, planned " << o.plan_ahead << " step" << (o.plan_ahead > 1 ? "s" : "")
      << " ahead";
  else
    h << "; global batch " << plan.train.global_batch << " x seq " << plan.train.seq << " in " << m << " micro-batch"
      << (m > 1 ? "es" : "")
      << (plan.train.dp_shares.empty() && plan.train.stage_dp_shares.empty()
              ? std::string()
              : ", data-parallel shares " + shares_label(plan.train) +
                    (plan.train.stage_dp_shares.empty() ? "" : " (per pipeline group)"));
  h << "; data: " << data.describe();
  rep.line(h.str());
  rep.line(precision);
  rep.line(grad_sync_note(gs, o));
  if (resumed.step > 0 || resumed.resharded) rep.line(resumed_line);
}

// Everything that lives while the job runs; on a failure it is deliberately leaked so that no
// destructor waits on a peer that will never answer.
struct Job {
  explicit Job(int r) : rank(r) {}
  int rank;
  std::unique_ptr<GroupSet> groups;
  std::unique_ptr<Watchdog> watchdog;
  std::unique_ptr<Model> model;
  std::unique_ptr<Optimizer> opt;

  // After a failure on this rank: names the peer to blame (Watchdog::diagnose), tells the other
  // ranks, leaks the job and returns the error (kRuntime).
  Status fail(const std::string& what) {
    std::string why;
    if (watchdog) {
      why = "; " + watchdog->diagnose();
      watchdog->publish(*groups, first_line(what) + why);
    }
    // Leak the job: a ProcessGroupGloo destructor would wait for work stuck on a dead peer.
    (void)groups.release();
    (void)watchdog.release();
    (void)model.release();
    (void)opt.release();
    return Error{ErrorKind::kRuntime, "rank " + std::to_string(rank) + ": " + first_line(what) + why};
  }
};

// The stage as the pipeline executor sees it: this rank's model, the optimizer's backward hooks,
// and the micro-batches of step `step`, this rank's token block of them.
class TrainStage : public PipelineStage {
 public:
  TrainStage(Model& m, Optimizer& opt, const TokenSource& data, const Plan& plan)
      : m_(m), opt_(opt), data_(data), seq_(plan.train.seq), blk_(m.token_block()), tl_(seq_ / blk_.seq_parts) {}
  int step = 0;  // the step whose micro-batches input() and loss() read
  // The sample each position of the global batch holds this step (weft train --moe-placement), or
  // nullptr: position i holds sample i.
  const std::vector<int>* samples = nullptr;

  bool first_stage() const override { return m_.first_stage(); }
  bool last_stage() const override { return m_.last_stage(); }
  int chunks() const override { return m_.chunks(); }
  at::Tensor input(int k) override { return m_.embed(batch(k, false)); }
  at::Tensor input_buffer(int chunk, int k) override {
    return at::empty(m_.input_shape(chunk, k), at::TensorOptions().dtype(m_.compute_dtype()).device(m_.device()));
  }
  at::Tensor forward(const at::Tensor& x, int chunk) override { return m_.forward_layers(x, chunk); }
  at::Tensor loss(const at::Tensor& y, int k) override { return m_.head_loss(y, batch(k, true)); }
  void begin_backward(bool last, int chunk) override { opt_.begin_backward(last, chunk); }
  void end_backward() override { opt_.after_backward(); }

 private:
  // Tokens (inputs) or targets of micro-batch k for this rank's block.
  at::Tensor batch(int k, bool targets) const {
    const auto [first, rows] = m_.micro_batch_rows(k);
    at::Tensor t = at::empty({rows, tl_}, at::kLong);
    std::vector<int64_t> buf(seq_ + 1);
    for (int64_t j = 0; j < rows; ++j) {
      data_.sample(step, samples ? (*samples)[first + j] : first + j, seq_ + 1, buf.data());
      int64_t* dst = t[j].data_ptr<int64_t>();
      for (const SeqRun& r : blk_.runs) dst = std::copy_n(buf.data() + r.start + (targets ? 1 : 0), r.len, dst);
    }
    return t.to(m_.device());
  }
  Model& m_;
  Optimizer& opt_;
  const TokenSource& data_;
  int64_t seq_;
  TokenBlock blk_;
  int64_t tl_;
};

// A stage with its passes timed: the rank's compute time of a step is what its forward passes
// (input, layers, loss) and backward passes (begin_backward to end_backward) take, less the time
// they spend blocked waiting for other ranks (comm_blocked_s(): a ZeRO-3 gather, a tensor-parallel
// all-reduce, a pipeline receive), so a rank waiting for a straggler is not taken for one. Under
// --slow it sleeps after each backward pass for (factor - 1) times that compute since the previous
// one, which then counts as compute too.
class TimedStage : public PipelineStage {
 public:
  explicit TimedStage(PipelineStage& s) : s_(s) {}
  double factor = 1;     // this step's --slow factor on this rank
  double compute_s = 0;  // added up while it lives (one step)

  bool first_stage() const override { return s_.first_stage(); }
  bool last_stage() const override { return s_.last_stage(); }
  int chunks() const override { return s_.chunks(); }
  at::Tensor input(int k) override { return timed([&] { return s_.input(k); }); }
  at::Tensor input_buffer(int chunk, int k) override { return s_.input_buffer(chunk, k); }
  at::Tensor forward(const at::Tensor& x, int chunk) override { return timed([&] { return s_.forward(x, chunk); }); }
  at::Tensor loss(const at::Tensor& y, int k) override { return timed([&] { return s_.loss(y, k); }); }
  void begin_backward(bool last, int chunk) override {
    t0_ = Clock::now();
    c0_ = comm_blocked_s();
    s_.begin_backward(last, chunk);
  }
  void begin_input_grad() override {
    t0_ = Clock::now();
    c0_ = comm_blocked_s();
  }
  void end_input_grad() override { work_ += std::max(0.0, seconds_since(t0_) - (comm_blocked_s() - c0_)); }
  void end_backward() override {
    s_.end_backward();
    const double wall = seconds_since(t0_);
    work_ += std::max(0.0, wall - (comm_blocked_s() - c0_));
    if (factor > 1) {
      const auto t = Clock::now();
      std::this_thread::sleep_for(std::chrono::duration<double>((factor - 1) * work_));
      work_ += seconds_since(t);
    }
    compute_s += work_;
    work_ = 0;
  }

 private:
  template <class F>
  at::Tensor timed(F f) {
    const auto t = Clock::now();
    const double c = comm_blocked_s();
    at::Tensor r = f();
    work_ += std::max(0.0, seconds_since(t) - (comm_blocked_s() - c));
    return r;
  }
  PipelineStage& s_;
  Clock::time_point t0_;
  double c0_ = 0;
  double work_ = 0;  // own compute since the last backward pass ended (less the time blocked in collectives)
};

// This rank's counterparts in every device group on the world group (the same position in each),
// which the executor picks its pipeline neighbours from by the schedule's virtual stages.
StageLinks stage_links(Comm& world, const Plan& plan, int rank) {
  const int S = plan.devices_per_stage();
  StageLinks l{&world, {}, rank / S, plan.train.schedule};
  for (int g = 0; g < plan.train.pp; ++g) l.peers.push_back(g * S + rank % S);
  return l;
}

struct StepResult {
  double loss = 0, norm = 0;
  std::vector<double> compute_s;  // per rank
  std::vector<double> probe_s;    // per rank, while some rank is given no work (--adapt's probe)
};

// --adapt's probe of a rank's speed while the plan gives some rank no work (a suspended replica
// computes nothing to measure; Malleus re-profiles such devices): every rank times the same small
// matmul (256 x 256 x 256 in the compute dtype, best of three, forced to finish by reading a
// scalar), under --slow taking FACTOR times as long as the passes do; what the ranks take against
// each other is their speed.
double probe_speed(at::Device device, at::ScalarType dtype, double factor) {
  const auto o = at::TensorOptions().dtype(dtype).device(device);
  const at::Tensor a = at::ones({256, 256}, o), b = at::ones({256, 256}, o);
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    const auto t = Clock::now();
    (void)at::matmul(a, b).sum().item<double>();
    const double s = seconds_since(t);
    best = i == 0 ? s : std::min(best, s);
  }
  if (factor > 1) std::this_thread::sleep_for(std::chrono::duration<double>((factor - 1) * best));
  return best * factor;
}

// After a step's passes and the gradient reduction: the job's mean token loss, gradient norm and
// every rank's compute time (one all-reduce), then the AdamW update with the gradients clipped to
// `clip` (<= 0: not clipped).
StepResult optimizer_step(Model& model, Optimizer& opt, Comm& world, double loss_sum, int64_t tokens, double clip,
                          double lr, double compute_s, double probe_s = -1) {
  const int n = world.size();
  at::Tensor stats = at::zeros({2 + 2 * n}, at::kDouble);
  stats[0] = model.counts_loss() ? loss_sum : 0.0;
  stats[1] = opt.local_norm_sq();
  stats[2 + world.rank()] = compute_s;
  stats[2 + n + world.rank()] = probe_s;
  world.allreduce_sum(stats);
  const double loss = stats[0].item<double>() / static_cast<double>(tokens);
  const double norm = std::sqrt(stats[1].item<double>());
  StepResult r{loss, norm, {}, {}};
  for (int i = 0; i < n; ++i) r.compute_s.push_back(stats[2 + i].item<double>());
  if (probe_s >= 0)
    for (int i = 0; i < n; ++i) r.probe_s.push_back(stats[2 + n + i].item<double>());
  double scale = 1.0;
  if (clip > 0) {
    const double coef = clip / (norm + 1e-6);
    if (coef < 1.0) scale = coef;
  }
  opt.step(lr, scale);
  model.update_expert_bias();
  return r;
}

// The routing figures of the step's MoE layers, from every stage (the first rank of each device
// group sends its chunks' layers; one all-reduce over the world, on every rank), as fields of the
// step's JSON: "moe" [{layer, imbalance (max over mean tokens per expert), aux_loss (the
// load-balancing loss, mean over micro-batches, coefficient included), tokens_per_expert}] and
// "moe_aux_loss" (their sum). Resets the model's figures. Nothing for a dense model.
Json moe_step_fields(Model& model, Comm& world, const Plan& plan, std::string* tail, int step = 0,
                     RoutingTrace* trace = nullptr) {
  std::vector<std::pair<int, int>> layers;  // (layer, experts) in model order
  for (int l = 0; l < plan.model.num_layers(); ++l)
    if (plan.model.layer(l).moe.enabled()) layers.emplace_back(l, plan.model.layer(l).moe.experts);
  if (layers.empty()) return Json();
  std::vector<int64_t> where(static_cast<size_t>(plan.model.num_layers()), -1);
  int64_t size = 0;
  for (const auto& [l, e] : layers) where[l] = size, size += e + 2;
  at::Tensor buf = at::zeros({size + 1}, at::kDouble);  // the last: inter-node copies of every rank
  if (world.rank() % plan.devices_per_stage() == 0)
    for (const MoeLayerStats& st : model.moe_stats()) {
      const int64_t o = where[st.layer];
      for (size_t e = 0; e < st.tokens.size(); ++e) buf[o + static_cast<int64_t>(e)] = static_cast<double>(st.tokens[e]);
      buf[o + static_cast<int64_t>(st.tokens.size())] = st.aux_loss;
      buf[o + static_cast<int64_t>(st.tokens.size()) + 1] = st.micro_batches;
    }
  int64_t inter = 0;
  for (const MoeLayerStats& st : model.moe_stats()) inter += st.inter_node_copies;
  buf[size] = static_cast<double>(inter);
  world.allreduce_sum(buf);
  if (trace) {
    // Every rank's copies per sample and expert (each token counted by the one rank routing it).
    RoutingStep rs;
    rs.step = step;
    for (const auto& [l, E] : layers) {
      at::Tensor c = at::zeros({plan.train.global_batch, E}, at::kLong);
      for (const MoeLayerStats& st : model.moe_stats())
        if (st.layer == l && st.sample_counts.defined()) c = st.sample_counts.clone();
      world.allreduce_sum(c);
      rs.layers.push_back(l);
      std::vector<std::vector<int64_t>> rows;
      for (int64_t i = 0; i < c.size(0); ++i) {
        const at::Tensor r = c[i].contiguous();
        rows.emplace_back(r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + E);
      }
      rs.counts.push_back(std::move(rows));
    }
    trace->steps.push_back(std::move(rs));
  }
  model.reset_moe_stats();
  Json rows = Json::array();
  double aux_total = 0, worst = 1;
  const auto v = buf.accessor<double, 1>();
  for (const auto& [l, E] : layers) {
    MoeLayerStats st;
    st.layer = l;
    for (int e = 0; e < E; ++e) st.tokens.push_back(static_cast<int64_t>(std::llround(v[where[l] + e])));
    const double micro = std::max(1.0, v[where[l] + E + 1]);
    const double aux = v[where[l] + E] / micro;
    aux_total += aux;
    worst = std::max(worst, st.imbalance());
    rows.push_back(Json{{"layer", l},
                        {"imbalance", st.imbalance()},
                        {"rank_imbalance", st.rank_imbalance(plan.layer_strategy(l).ep)},
                        {"aux_loss", aux},
                        {"tokens_per_expert", st.tokens}});
  }
  if (tail) {
    char b[96];
    std::snprintf(b, sizeof b, "  moe imbalance %.2f (worst layer)  aux %.4g", worst, aux_total);
    *tail += b;
  }
  return Json{{"moe", rows},
              {"moe_aux_loss", aux_total},
              {"moe_inter_node_copies", static_cast<int64_t>(std::llround(v[size]))}};
}

// What the summary reports, added up over the steps (the first step of a run is not timed).
struct Totals {
  double timed_s = 0, grad_wait_s = 0, last_loss = 0, plan_wait_s = 0;
  int64_t step_cpu_bytes = -1;  // --measure-memory: the most a step allocated beyond what it began with
  int64_t timed_tokens = 0;
  std::vector<double> compute_s;  // per rank, summed over the timed steps
  int timed_steps = 0;
  int switches = 0;  // --adapt: plan switches
  int64_t resident_grad_bytes = 0;
  HeldBytes held;  // after the last step's gradient synchronisation
  Json step_collectives = Json::array();  // what this rank issued in the last step
};

// The collectives issued between two snapshots of GroupSet::collectives(), as JSON objects.
Json collectives_between(const std::vector<CollectiveRecord>& before, const std::vector<CollectiveRecord>& after) {
  Json out = Json::array();
  for (const CollectiveRecord& a : after) {
    int64_t calls = a.calls, bytes = a.bytes;
    for (const CollectiveRecord& b : before)
      if (b.op == a.op && b.ranks == a.ranks) calls -= b.calls, bytes -= b.bytes;
    if (calls > 0)
      out.push_back(Json{{"op", to_string(a.op)}, {"group", a.ranks}, {"calls", calls}, {"bytes", bytes}});
  }
  return out;
}

// The CUDA caching allocator's peak of allocated bytes on `device` since the process started (what
// torch.cuda.max_memory_allocated() reports); 0 on the CPU.
double device_peak_bytes(const at::Device& device) {
#ifdef WEFT_HAVE_CUDA
  if (device.is_cuda())
    return static_cast<double>(c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].peak);
#endif
  return 0;
}

// Collective over the world: what every rank held, one object per rank (the summary's "ranks").
// What the training thread allocates on the CPU, through c10's memory-reporting hook (the one
// PyTorch's profiler installs): live bytes and their peak since reset_peak(). Only allocations made
// while it is installed are seen (and their frees); c10 logs a warning the first time a tensor
// made before is freed, so it is on only with --measure-memory.
// The hook's totals are int64_t in libtorch 1.13 and size_t in 2.x: read their type off the base.
template <class F>
struct ReportTotal;
template <class B, class T>
struct ReportTotal<void (B::*)(void*, int64_t, T, T, c10::Device)> {
  using type = T;
};
using ReportTotalT = ReportTotal<decltype(&c10::MemoryReportingInfoBase::reportMemoryUsage)>::type;

struct CpuMemory final : c10::MemoryReportingInfoBase {
  int64_t live = 0, peak = 0;
  void reportMemoryUsage(void*, int64_t bytes, ReportTotalT, ReportTotalT, c10::Device d) override {
    if (d.type() != c10::DeviceType::CPU) return;
    live += bytes;
    peak = std::max(peak, live);
  }
  bool memoryProfilingEnabled() const override { return true; }
  void reset_peak() { peak = live; }
};

// Collective over `world`: whether `mine` holds on any rank.
bool any_rank(Comm& world, bool mine) {
  at::Tensor t = at::full({1}, mine ? 1.0 : 0.0, at::kDouble);
  world.allreduce_max(t);
  return t.item<double>() > 0;
}

Json held_by_ranks(Comm& world, const HeldBytes& held, const at::Device& device, int64_t step_cpu_bytes) {
  at::Tensor mine = at::tensor({static_cast<double>(held.params), static_cast<double>(held.grads),
                                static_cast<double>(held.optimizer), static_cast<double>(gathered_param_bytes().peak),
                                device_peak_bytes(device), static_cast<double>(step_cpu_bytes)},
                               at::kDouble);
  at::Tensor all = world.allgather(mine.to(device)).to(at::kCPU);
  Json ranks = Json::array();
  for (int r = 0; r < world.size(); ++r)
    ranks.push_back(Json{{"rank", r},
                         {"param_bytes", static_cast<int64_t>(all[r][0].item<double>())},
                         {"grad_bytes", static_cast<int64_t>(all[r][1].item<double>())},
                         {"optimizer_bytes", static_cast<int64_t>(all[r][2].item<double>())},
                         {"peak_gathered_param_bytes", static_cast<int64_t>(all[r][3].item<double>())}});
  if (device.is_cuda())
    for (int r = 0; r < world.size(); ++r)
      ranks[r]["peak_device_bytes"] = static_cast<int64_t>(all[r][4].item<double>());
  if (step_cpu_bytes >= 0)
    for (int r = 0; r < world.size(); ++r)
      ranks[r]["step_peak_cpu_bytes"] = static_cast<int64_t>(all[r][5].item<double>());
  return ranks;
}

Json summary(const TrainOptions& o, const Totals& t, const GradSyncStats& gs, int world, int64_t tokens_per_step,
             double total_s, Json ranks) {
  const double mean = t.timed_steps > 0 ? t.timed_s / t.timed_steps : 0;
  if (o.varlen && t.timed_steps > 0) tokens_per_step = t.timed_tokens / t.timed_steps;  // the mean
  Json j{{"summary", true},
              {"steps", o.steps},
              {"final_loss", t.last_loss},
              {"mean_step_time_s", mean},
              {"mean_tokens_per_s", t.timed_s > 0 ? static_cast<double>(t.timed_tokens) / t.timed_s : 0.0},
              {"total_time_s", total_s},
              {"world_size", world},
              {"tokens_per_step", tokens_per_step},
              {"grad_buckets", gs.buckets},
              {"grad_buckets_launched_in_backward", gs.launched_in_backward},
              {"grad_buckets_done_in_backward", gs.done_in_backward},
              {"mean_grad_sync_wait_s", t.timed_steps > 0 ? t.grad_wait_s / t.timed_steps : 0.0},
              {"resident_grad_bytes", t.resident_grad_bytes},
              {"collectives_per_step", t.step_collectives},
              {"ranks", std::move(ranks)}};
  if (o.adapt) j["adapt_switches"] = t.switches;
  if (o.varlen) j["mean_plan_wait_s"] = t.timed_steps > 0 ? t.plan_wait_s / t.timed_steps : 0.0;
  std::vector<double> compute = t.compute_s;
  for (double& c : compute) c /= std::max(1, t.timed_steps);
  j["mean_compute_s"] = compute;
  return j;
}

// An input error found while the job runs (a batch its planner cannot place): the same on every
// rank, so each stops here; the job is left as on a failure, the exit code is the error's kind.
Status bad_input(Job& job, const Error& e) {
  Status s = job.fail(e.message);
  return Error{e.kind == ErrorKind::kRuntime ? ErrorKind::kBadInput : e.kind, s.error().message};
}

// The batch planner of a variable-length run, planning from `first_step` on.
Result<std::unique_ptr<VarlenPlanner>> start_planner(const TrainOptions& o, const Plan& plan, const VarlenSetup& vl,
                                                     int first_step) {
  VarlenPlannerInput in;
  in.plan = &plan;
  in.lengths = [b = vl.batches](std::int64_t s) { return b->lengths(s); };
  in.first_step = first_step;
  in.last_step = o.steps;
  in.min_group = vl.min_group;
  in.max_group = vl.max_group;
  in.max_tokens_per_gpu = o.max_tokens_per_gpu;
  in.ahead = o.plan_ahead;
  return o.varlen_planner(in);
}

}  // namespace

Status train(const TrainOptions& given) {
  if (!given.tasks.empty()) return train_tasks(given);
  auto env_r = read_dist_env();
  if (!env_r.ok()) return env_r.error();
  const DistEnv env = env_r.value();
  if (Status s = check_options(given); !s.ok()) return s;
  // --measure-memory: what this thread allocates on the CPU from here on.
  std::shared_ptr<CpuMemory> cpu_memory;
  std::optional<c10::DebugInfoGuard> cpu_memory_guard;
  if (given.measure_memory) {
    cpu_memory = std::make_shared<CpuMemory>();
    cpu_memory_guard.emplace(c10::DebugInfoKind::PROFILER_STATE, cpu_memory);
    settle_work_on_wait(true);
  }
  auto plan_r = load_plan(given, env);
  if (!plan_r.ok()) return plan_r.error();
  // Not const: `weft train --adapt` switches the running plan's shares and micro-batches in place
  // (the model reads its batch rows from it).
  Plan plan = std::move(plan_r).value();
  // A variable-length plan (train.varlen, as `weft plan --lengths --out` writes) runs variable-length
  // steps; its group sizes are the defaults of --min-group and --max-group.
  TrainOptions o = given;
  if (plan.train.varlen) {
    o.varlen = true;
    if (o.min_group == 1) o.min_group = plan.train.min_group;
    if (o.max_group == 0) o.max_group = plan.train.max_group;
  }
  auto fault_r = parse_fault(o.fault);
  if (!fault_r.ok()) return fault_r.error();
  const Fault fault = fault_r.value();
  auto slow_r = parse_slow(o.slow, env.world);
  if (!slow_r.ok()) return slow_r.error();
  const SlowRank slow = slow_r.value();
  if (!(o.straggler_margin > 1) || o.straggler_steps < 1)
    return Error{ErrorKind::kBadInput, "--straggler-margin " + std::to_string(o.straggler_margin) +
                                           " / --straggler-steps " + std::to_string(o.straggler_steps) +
                                           ": the margin must be above 1 and the steps at least 1"};
  StragglerDetector stragglers(StragglerOptions{o.straggler_margin, o.straggler_steps});
  auto data_r = open_data(o, plan);
  if (!data_r.ok()) return data_r.error();
  const std::unique_ptr<TokenSource> data = std::move(data_r).value();
  std::optional<VarlenSetup> vl;
  if (o.varlen) {
    auto v = setup_varlen(o, plan, *data, env.world);
    if (!v.ok()) return v.error();
    vl = std::move(v).value();
  }
  set_threads(o.threads);
  auto device_r = pick_device(o.device, o.backend, env);
  if (!device_r.ok()) return device_r.error();
  const at::Device device = device_r->device;
  // The rank's GPU becomes the current device of this thread (NCCL communicators and every CUDA
  // allocation follow it).
  if (device.is_cuda()) c10::impl::getDeviceGuardImpl(at::kCUDA)->setDevice(device);
  const DType run_dtype = run_precision(plan, o.precision, device.is_cuda());
  // Not const: a switch of structure under --adapt changes the plan the checkpoints are written under.
  std::string plan_hash = json_hash(to_json(plan));
  const int rank = env.rank;
  const int64_t tokens_per_step = static_cast<int64_t>(plan.train.global_batch) * plan.train.seq;
  Reporter rep(o, o.steps, rank == 0);

  Job job(rank);
  try {
    job.groups = std::make_unique<GroupSet>(comm_config(env, o, *device_r, plan));
    if (env.world > 1) job.watchdog = std::make_unique<Watchdog>(*job.groups, o.timeout_s);
    job.groups->build(process_groups(plan));
    if (vl) job.groups->build(varlen_groups(env.world, plan.embedding.tp, vl->min_group, vl->max_group));
    job.groups->build(grad_groups(plan), Channel::kGrad);
  } catch (const std::exception& e) {
    return job.fail("could not form the job of " + std::to_string(env.world) + " ranks through " + env.master_addr +
                    ":" + std::to_string(env.master_port) + ": " + e.what());
  }
  std::unique_ptr<VarlenPlanner> planner;
  if (vl && !o.resume) {
    auto pr = start_planner(o, plan, *vl, 1);
    if (!pr.ok()) return pr.error();
    planner = std::move(pr).value();
  }
  int start_step = 0;
  Resumed resumed;
  // The model and optimizer of `plan` on this rank (again after a switch of structure).
  auto build_model = [&] {
    job.model = std::make_unique<Model>(plan, rank, *job.groups, o.seed, device, at::kFloat,
                                        run_dtype == DType::kBf16 ? at::kBFloat16 : at::kFloat);
    GradSyncOptions gs;
    gs.bucket_bytes = std::max<int64_t>(1, static_cast<int64_t>(o.bucket_mb * 1024.0 * 1024.0));
    gs.overlap = o.grad_overlap == "on";
    job.opt = std::make_unique<Optimizer>(*job.model, AdamWConfig{o.beta1, o.beta2, o.eps, o.weight_decay}, gs);
  };
  try {
    build_model();
    // --hf-checkpoint: the starting weights, unless --resume finds a checkpoint to continue (what
    // any rank finds: the ranks agree before any of them loads).
    bool resume = o.resume;
    if (resume && !o.hf_checkpoint.empty()) {
      resume = any_rank(job.groups->world(), !list_checkpoints(o.checkpoint_dir).empty());
    }
    if (resume) {
      auto st = load_checkpoint(o.checkpoint_dir, *job.model, *job.opt, rank, plan_hash);
      if (!st.ok()) return st.error();
      start_step = st->step;
      resumed = *st;
    } else if (!o.hf_checkpoint.empty()) {
      auto ck = HfCheckpoint::open(o.hf_checkpoint);
      if (!ck.ok()) return ck.error().with_context("--hf-checkpoint");
      Status cs = (*ck)->check(plan);
      if (!cs.ok()) return cs.error().with_context("--hf-checkpoint");
      // Each rank reads the tensors it slices, so a damaged tensor fails some ranks only: all agree
      // before any trains.
      auto entries = hf_rank_entries(**ck, plan, rank);
      const bool failed = any_rank(job.groups->world(), !entries.ok());
      if (!entries.ok()) return entries.error().with_context("--hf-checkpoint");
      if (failed)
        return Error{ErrorKind::kBadInput, "--hf-checkpoint " + o.hf_checkpoint +
                                               ": another rank could not load its tensors (its error says which)"};
      load_state(*job.model, *entries, o.hf_checkpoint);
    }
  } catch (const std::exception& e) {
    return job.fail(e.what());
  }
  // Pointers: a switch of structure under --adapt replaces both.
  Model* model = job.model.get();
  Optimizer* opt = job.opt.get();
  GroupSet& groups = *job.groups;
  Comm& world = groups.world();
  if (rank == 0)
    print_start(rep, o, plan, env.world, *data, opt->grad_sync(), !device.is_cuda() ? "cpu" : device_r->nccl || env.world == 1 ? "cuda" : "cuda-gloo", run_dtype, resumed,
                vl ? &*vl : nullptr);
  // Variable-length steps: the stage packing each micro-batch; the planner (started before the model
  // was built unless the run resumes) is planning the first steps on its own thread.
  std::unique_ptr<VarlenStage> vstage;
  if (vl) {
    if (!planner) {
      auto pr = start_planner(o, plan, *vl, start_step + 1);
      if (!pr.ok()) return pr.error();
      planner = std::move(pr).value();
    }
    vstage = std::make_unique<VarlenStage>(*model, *opt, groups, *data, *vl->batches);
  }

  const LrSchedule lrs = lr_schedule(o);
  auto actions =
      pipeline_actions(plan.train.schedule, plan.train.pp, model->stage(), plan.train.micro_batches, model->chunks());
  auto stage_ptr = std::make_unique<TrainStage>(*model, *opt, *data, plan);
  // MoE sample placement and routing traces (docs/moe-placement.md).
  RoutingTrace trace;
  std::optional<SamplePlacement> placement;
  if (!o.moe_placement.empty() || !o.moe_trace.empty()) {
    if (!plan.model.has_moe()) return bad_input(job, Error{ErrorKind::kBadInput, "--moe-trace / --moe-placement: the model has no MoE layers"});
    if (vl) return bad_input(job, Error{ErrorKind::kBadInput, "--moe-trace / --moe-placement: not with variable-length steps"});
  }
  if (!o.moe_placement.empty()) {
    auto pl = read_sample_placement(o.moe_placement);
    if (!pl.ok()) return bad_input(job, pl.error().with_context("--moe-placement"));
    if (Status c = check_placement(*pl, plan); !c.ok()) return bad_input(job, c.error().with_context("--moe-placement"));
    placement = std::move(pl).value();
  }
  if (!o.moe_trace.empty()) {
    model->trace_routing(true);
    trace.model = plan.model.name;
    trace.seq = plan.train.seq;
    trace.global_batch = plan.train.global_batch;
    for (int l = 0; l < plan.model.num_layers(); ++l)
      if (plan.model.layer(l).moe.enabled()) {
        trace.experts = plan.model.layer(l).moe.experts;
        trace.top_k = plan.model.layer(l).moe.top_k;
        break;
      }
  }
  // Each rank's compute as the plan expects it (the straggler check and --adapt compare with it).
  std::vector<double> expected;
  if (o.adapt_hooks.expected && !vl) expected = o.adapt_hooks.expected(plan);
  Adapter adapter(AdaptOptions{o.straggler_margin, o.straggler_steps, o.adapt_min_gain}, env.world);
  // A plan made for slow ranks (weft plan --straggler) gives them less work: calibrate on it first.
  if (plan.devices && !plan.devices->cluster.slowdown.empty()) adapter.switched(plan.devices->cluster.slowdown);
  StageLinks links = stage_links(world, plan, rank);
  Totals tot;
  const auto run_start = Clock::now();
  try {
    for (int step = start_step + 1; step <= o.steps; ++step) {
      inject(fault, rank, step);
      if (job.watchdog) job.watchdog->set_step(step);  // "has entered step": lets peers name a laggard
      const auto t0 = Clock::now();
      std::vector<CollectiveRecord> before;
      if (step == o.steps) before = groups.collectives();
      opt->zero_grad();
      const int64_t cpu_at_start = cpu_memory ? (cpu_memory->reset_peak(), cpu_memory->live) : 0;
      // Steps after the run's first are timed into the summary (a one-step run: its only step).
      const bool timed_step = step > start_step + 1 || o.steps == start_step + 1;
      int64_t step_tokens = tokens_per_step, loss_tokens = tokens_per_step;
      StepStats stats;
      double plan_wait_s = 0;
      // The stage and schedule of the step: a variable-length step's come from its plan.
      PipelineStage* inner = stage_ptr.get();
      const std::vector<PipeAction>* step_actions = &actions;
      std::vector<PipeAction> varlen_actions;
      if (vstage) {
        // The step's plan (waiting for it only if the planner fell behind), the same on every rank.
        auto next = planner->next();
        if (!next.ok()) return bad_input(job, next.error());
        const VarlenStep& vs = next.value();
        if (Status c = check_varlen_step(vs, step, env.world / plan.embedding.tp, vl->min_group, vl->max_group,
                                         vl->batches->per_step());
            !c.ok())
          return bad_input(job, c.error());
        const double fp = varlen_fingerprint(vs);
        at::Tensor f = at::tensor({fp, -fp}, at::kDouble);
        world.allreduce_max(f);
        if (f[0].item<double>() != fp || -f[1].item<double>() != fp)
          return job.fail("variable-length step " + std::to_string(step) + ": the ranks' batch planners disagree");
        loss_tokens = std::max<int64_t>(1, vstage->set_step(step, vs));
        model->set_moe_loss_scale(1.0 / std::max(1, vstage->micro_batches()));
        step_tokens = 0;
        for (int64_t l : vstage->lengths()) step_tokens += l;
        // One stage: F0 B0 F1 B1 ..., each micro-batch's group and documents set until its backward ran.
        varlen_actions = pipeline_actions(Schedule::k1F1B, 1, 0, vstage->micro_batches());
        step_actions = &varlen_actions;
        inner = vstage.get();
        stats.extra = Json{{"lengths", vstage->lengths()},
                           {"micro_batches", varlen_step_json(vs, vstage->lengths())},
                           {"plan_ms", vs.plan_ms},
                           {"plan_wait_s", vs.waited_s}};
        char tail[96];
        std::snprintf(tail, sizeof tail, "  %zu docs in %d micro-batch%s  plan wait %.1f ms", vstage->lengths().size(),
                      vstage->micro_batches(), vstage->micro_batches() > 1 ? "es" : "", vs.waited_s * 1e3);
        stats.text_tail = tail;
        plan_wait_s = vs.waited_s;
      } else {
        stage_ptr->step = step;
        stage_ptr->samples = placement ? placement->for_step(step) : nullptr;
        model->set_sample_order(stage_ptr->samples);
      }
      TimedStage timed(*inner);
      timed.factor = slow.applies(rank, step) ? slow.factor : 1.0;
      const double loss_sum = run_pipeline_step(*step_actions, timed, links, static_cast<double>(loss_tokens));
      opt->sync_grads();
      if (step == o.steps) {
        tot.resident_grad_bytes = opt->resident_grad_bytes();
        tot.held = opt->held_bytes();
      }
      if (cpu_memory) tot.step_cpu_bytes = std::max(tot.step_cpu_bytes, cpu_memory->peak - cpu_at_start);
      const double lr = lrs.at(step);
      // A rank the plan gives no work cannot be measured by its passes: while there is one, every
      // rank probes its speed (--adapt only; the same decision on every rank, from the same plan).
      const bool probing = o.adapt && std::any_of(expected.begin(), expected.end(), [](double e) { return !(e > 0); });
      const double probe_s = probing ? probe_speed(model->device(), model->compute_dtype(), timed.factor) : -1.0;
      const StepResult res =
          optimizer_step(*model, *opt, world, loss_sum, loss_tokens, o.clip, lr, timed.compute_s, probe_s);
      const double loss = res.loss, norm = res.norm;
      const double dt = seconds_since(t0);
      if (step == o.steps) tot.step_collectives = collectives_between(before, groups.collectives());
      stats.step = step, stats.loss = loss, stats.grad_norm = norm, stats.lr = lr;
      stats.tokens_per_s = static_cast<double>(step_tokens) / dt, stats.step_time_s = dt;
      if (!stats.extra.is_object()) stats.extra = Json::object();
      stats.extra["compute_s"] = res.compute_s;
      if (Json moe = moe_step_fields(*model, world, plan, &stats.text_tail, step, o.moe_trace.empty() ? nullptr : &trace);
          moe.is_object())
        stats.extra.update(moe);
      if (!res.probe_s.empty()) stats.extra["probe_s"] = res.probe_s;
      // Compared per unit of planned work: a rank given less (uneven shares) is not taken for fast.
      std::vector<double> per_work = res.compute_s;
      if (expected.size() == per_work.size()) {
        double mean = 0;
        for (double e : expected) mean += e / static_cast<double>(expected.size());
        for (size_t r = 0; r < per_work.size(); ++r) per_work[r] *= expected[r] > 0 ? mean / expected[r] : 1.0;
      }
      for (const std::string& line : stragglers.update(step, per_work)) rep.note(line);
      // Not the run's first step: it warms up (allocations, first-touch), and a re-plan on it would be noise.
      if (o.adapt && step < o.steps && step > start_step + 1) {
        if (auto want = adapter.update(res.compute_s, expected, res.probe_s)) {
          // Every rank holds the same compute figures (they came through one all-reduce) and the
          // re-plan is a pure function of them, so every rank takes the same decision.
          auto rp = o.adapt_hooks.replan(plan, *want);
          std::string sl;
          for (double f : *want) sl += (sl.empty() ? "" : " ") + printf_str("%.2f", f);
          if (!rp.ok()) {
            rep.note("weft: adapt: measured slowdowns " + sl + " at step " + std::to_string(step) +
                     "; no re-plan: " + rp.error().message);
            adapter.assume(*want);
          } else {
            const Replan& r = rp.value();
            // A new structure (stage cuts, degrees, ZeRO stages) moves state between ranks: it pays
            // when the time saved per step (this step's time at the predicted speed-up) repays the
            // move before the run ends.
            const bool structural = checkpoint_index(r.plan) != checkpoint_index(plan);
            const double speedup = r.predicted_s > 0 ? r.current_s / r.predicted_s : 1.0;
            // The step's time as the slowest rank saw it: every rank must take the same decision.
            at::Tensor step_s = at::full({1}, dt, at::kDouble);
            world.allreduce_max(step_s);
            const double saved_s = step_s.item<double>() * (1.0 - 1.0 / std::max(speedup, 1e-9));
            const int payback = !structural || r.move_s <= 0 ? 0
                                : saved_s > 0 ? static_cast<int>(std::ceil(r.move_s / saved_s))
                                              : std::numeric_limits<int>::max();
            const bool gains = r.predicted_s * o.adapt_min_gain < r.current_s &&
                               (structural || r.plan.train != plan.train);
            const bool pays = gains && payback <= o.steps - step;
            char b[640];
            std::snprintf(b, sizeof b,
                          "weft: adapt: measured slowdowns %s at step %d; re-planned in %.1f ms: %s, predicted "
                          "%.2fx the running plan's speed; state to move %lld bytes (%.3f s), paid back %s; %s",
                          sl.c_str(), step, r.plan_ms, r.change.c_str(), speedup,
                          static_cast<long long>(r.bytes_to_move), r.move_s,
                          payback == 0 ? "at once"
                          : payback == std::numeric_limits<int>::max()
                              ? "never"
                              : ("in " + std::to_string(payback) + " step" + (payback > 1 ? "s" : "")).c_str(),
                          pays    ? ("switching from step " + std::to_string(step + 1)).c_str()
                          : gains ? "keeping the running plan (the move would not pay back before the last step)"
                                  : "keeping the running plan (it gains too little)");
            rep.note(b);
            if (pays) {
              double moved_s = 0;
              if (structural) {
                // Every rank takes its slices of the new layout from the ranks holding them, then
                // the model and optimizer are rebuilt on the new plan's groups and loaded.
                const auto t_move = Clock::now();
                ParamsFile next_state = exchange_state(*model, r.plan, groups);
                const int64_t opt_steps = opt->step_count();
                stage_ptr.reset();
                job.opt.reset();
                job.model.reset();
                plan = r.plan;
                plan_hash = json_hash(to_json(plan));
                groups.build(process_groups(plan));
                groups.build(grad_groups(plan), Channel::kGrad);
                build_model();
                model = job.model.get();
                opt = job.opt.get();
                // The new model counts its routing for --moe-trace as the first did.
                if (!o.moe_trace.empty()) model->trace_routing(true);
                load_state(*model, next_state, "adapt: rank " + std::to_string(rank) + "'s new state");
                opt->set_step_count(opt_steps);
                links = stage_links(world, plan, rank);
                moved_s = seconds_since(t_move);
              } else {
                plan.train = r.plan.train;
                plan.devices = r.plan.devices;
              }
              actions = pipeline_actions(plan.train.schedule, plan.train.pp, model->stage(), plan.train.micro_batches,
                                         model->chunks());
              stage_ptr = std::make_unique<TrainStage>(*model, *opt, *data, plan);
              expected = o.adapt_hooks.expected(plan);
              // A placement keeps each sample in its micro-batch: it still runs unless the switch
              // changed the micro-batches (then the steps run unplaced, which changes no loss).
              if (placement)
                if (Status c = check_placement(*placement, plan); !c.ok()) {
                  placement.reset();
                  rep.note("weft: adapt: --moe-placement no longer fits the plan (" + c.error().message +
                           "); the steps from here run unplaced");
                }
              ++tot.switches;
              adapter.switched(*want);
              stats.extra["switched"] = Json{{"change", r.change},
                                             {"predicted_speedup", speedup},
                                             {"slowdowns", *want},
                                             {"bytes_to_move", r.bytes_to_move},
                                             {"structural", structural},
                                             {"move_s", moved_s}};
            } else {
              adapter.assume(*want);
            }
          }
        }
      }
      rep.step(stats);
      tot.last_loss = loss;
      if (timed_step) {
        tot.timed_s += dt, ++tot.timed_steps, tot.grad_wait_s += opt->grad_sync().stats().wait_s;
        tot.timed_tokens += step_tokens, tot.plan_wait_s += plan_wait_s;
        tot.compute_s.resize(res.compute_s.size(), 0.0);
        for (size_t r = 0; r < res.compute_s.size(); ++r) tot.compute_s[r] += res.compute_s[r];
      }
      if (!o.checkpoint_dir.empty() && (step == o.steps || (o.checkpoint_every > 0 && step % o.checkpoint_every == 0))) {
        Status cs = save_checkpoint(o.checkpoint_dir, step, *model, *opt, groups, plan_hash, o.keep_checkpoints);
        if (!cs.ok()) return job.fail(cs.error().message);
      }
    }
    if (!o.save_params.empty() || !o.save_hf.empty()) {
      ParamsFile f = consolidate(*model, groups, o.steps);
      if (rank == 0 && !o.save_params.empty()) {
        Status ws = write_params_file(o.save_params, f);
        if (!ws.ok()) return job.fail(ws.error().message);
      }
      if (rank == 0 && !o.save_hf.empty()) {
        Status ws = save_hf_checkpoint(o.save_hf, model->plan(), f, *save_dtype_from_string(o.save_hf_dtype),
                                       o.hf_checkpoint);
        if (!ws.ok()) return job.fail("--save-hf: " + ws.error().message);
      }
    }
    world.barrier();
  } catch (const std::exception& e) {
    return job.fail(e.what());
  }
  Json ranks;
  try {
    ranks = held_by_ranks(world, tot.held, device, tot.step_cpu_bytes);  // rank 0 prints what every rank held
  } catch (const std::exception& e) {
    return job.fail(e.what());
  }
  if (job.watchdog) job.watchdog->stop();
  try {
    world.barrier();  // no rank leaves while another's watchdog still needs the store on rank 0
  } catch (const std::exception& e) {
    return job.fail(e.what());
  }
  if (rank == 0 && !o.moe_trace.empty()) {
    if (Status w = write_routing_trace(o.moe_trace, trace); !w.ok()) return w.error().with_context("--moe-trace");
  }
  rep.summary(summary(o, tot, opt->grad_sync().stats(), env.world, tokens_per_step, seconds_since(run_start),
                      std::move(ranks)));
  return {};
}

}  // namespace weft::runtime
