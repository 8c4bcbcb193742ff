// The training loop of one rank: plan checks, process groups, the pipeline schedule, gradient
// synchronisation, the optimizer step, logging, checkpoints and the failure watchdog.
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <ATen/Parallel.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "comm.h"
#include "model.h"
#include "optim.h"
#include "state.h"
#include "weft/runtime/data.h"
#include "weft/runtime/schedule.h"
#include "weft/runtime/support.h"
#include "weft/runtime/train.h"
#include "weft/spec/presets.h"

namespace weft::runtime {

ModelSpec builtin_model() {
  ModelSpec m;
  m.name = "weft-tiny-gpt";
  m.vocab = 256;
  m.hidden = 64;
  m.tied_embeddings = true;
  m.norm = NormKind::kLayerNorm;
  m.position = PositionKind::kLearned;
  m.max_seq = 256;
  LayerGroup g;
  g.name = "decoder";
  g.count = 2;
  g.shape.kind = LayerKind::kDecoder;
  g.shape.hidden = 64;
  g.shape.heads = 4;
  g.shape.kv_heads = 4;
  g.shape.head_dim = 16;
  g.shape.ffn = 256;
  g.shape.ffn_kind = FfnKind::kGelu;
  g.shape.bias = true;
  m.groups.push_back(g);
  return m;
}

Result<Plan> data_parallel_plan(const ModelSpec& model, int world, int seq, int global_batch, int micro_batches) {
  Plan p;
  p.model = model;
  p.cluster.name = "local";
  p.cluster.nodes = 1;
  p.cluster.gpus_per_node = world;
  // The runtime reads no figure of the cluster but its size; these placeholders only satisfy
  // validate(ClusterSpec).
  p.cluster.gpu.name = "cpu";
  p.cluster.gpu.tflops_fp32 = 1;
  p.cluster.gpu.memory_gib = 16;
  p.cluster.gpu.hbm_gbps = 10;
  p.cluster.intra.gbps = 10;
  p.train.seq = seq;
  p.train.global_batch = global_batch;
  p.train.micro_batches = micro_batches;
  p.train.pp = 1;
  p.train.schedule = Schedule::k1F1B;
  p.train.dtype = DType::kFp32;
  LayerStrategy s;
  s.dp = world;
  p.embedding = s;
  Stage st;
  st.first_layer = 0;
  st.layers.assign(model.num_layers(), s);
  p.stages.push_back(st);
  Status v = check_supported(p);
  if (!v.ok()) return v.error();
  return p;
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string first_line(const std::string& s) {
  const auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

std::string rank_list(const std::vector<int>& rs) {
  std::string s;
  for (size_t i = 0; i < rs.size(); ++i) s += (i ? ", " : "") + std::to_string(rs[i]);
  return s;
}

struct Fault {
  int rank = -1, step = -1;
  std::string mode;
  double sleep_s = 0;  // mode "sleep"
};

Result<Fault> parse_fault(const std::string& s) {
  Fault f;
  if (s.empty()) return f;
  const auto a = s.find(':'), b = s.find(':', a == std::string::npos ? a : a + 1);
  try {
    if (a == std::string::npos || b == std::string::npos) throw std::invalid_argument("shape");
    f.rank = std::stoi(s.substr(0, a));
    f.step = std::stoi(s.substr(a + 1, b - a - 1));
    f.mode = s.substr(b + 1);
  } catch (const std::exception&) {
    return Error{ErrorKind::kBadInput, "--fault: expected RANK:STEP:MODE, got \"" + s + "\""};
  }
  if (f.mode.rfind("sleep=", 0) == 0) {
    char* end = nullptr;
    f.sleep_s = std::strtod(f.mode.c_str() + 6, &end);
    if (!end || *end != '\0' || !(f.sleep_s > 0))
      return Error{ErrorKind::kBadInput, "--fault: sleep=SECONDS needs a positive number, got \"" + f.mode + "\""};
    f.mode = "sleep";
  }
  if (f.mode != "exit" && f.mode != "kill" && f.mode != "hang" && f.mode != "stop" && f.mode != "sleep")
    return Error{ErrorKind::kBadInput,
                 "--fault: MODE must be exit, kill, hang, stop or sleep=SECONDS, got \"" + f.mode + "\""};
  return f;
}

void inject(const Fault& f, int rank, int step) {
  if (f.rank != rank || f.step != step) return;
  std::fprintf(stderr, "weft: fault injection: rank %d %s at step %d\n", rank, f.mode.c_str(), step);
  std::fflush(stderr);
  if (f.mode == "exit") std::_Exit(7);
  if (f.mode == "kill") raise(SIGKILL);
  if (f.mode == "stop") raise(SIGSTOP);
  if (f.mode == "sleep") {
    std::this_thread::sleep_for(std::chrono::duration<double>(f.sleep_s));  // then goes on
    return;
  }
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));  // hang: the main thread only
}

void set_threads(int n) {
  at::set_num_threads(n);
  // OpenBLAS is linked into weft so that libtorch's sgemm_ resolves to it; its own thread pool
  // would oversubscribe the cores that the ranks already share.
  using SetThreads = void (*)(int);
  if (auto f = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
}

// Heartbeats through the job's store. Each rank bumps weft/hb/<rank> every `interval` and watches
// everyone else's; one that has not moved for `timeout` is declared dead and this process exits
// with code 5 naming it. Losing the store means rank 0 (which hosts it) is gone.
class Watchdog {
 public:
  Watchdog(GroupSet& g, double timeout_s)
      : rank_(g.rank()), world_(g.world_size()), timeout_(timeout_s),
        interval_(std::clamp(timeout_s / 5.0, 0.1, 1.0)), host_(g.config().master_addr + ":" +
                                                               std::to_string(g.config().master_port)) {
    store_ = g.new_store_client();
    last_seen_.assign(world_, -1);
    last_change_.assign(world_, Clock::now());
    progress_.assign(world_, 0);
    thread_ = std::thread([this] { run(); });
  }
  ~Watchdog() { stop(); }
  static constexpr const char* kFailedKey = "weft/failed";
  // From the main thread after a failure: tells the other ranks what happened (through a store
  // connection of its own) and, on rank 0, keeps the store up a few heartbeats for them to read it.
  void publish(GroupSet& g, const std::string& m) {
    try {
      auto s = g.new_store_client();
      const std::string v = std::to_string(rank_) + "|" + m;
      if (s) s->set(kFailedKey, std::vector<uint8_t>(v.begin(), v.end()));
    } catch (const std::exception&) {
    }
    if (rank_ == 0) std::this_thread::sleep_for(std::chrono::duration<double>(3 * interval_));
  }
  void set_step(int64_t s) { step_.store(s); }
  void stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  // After a failed collective: waits a few heartbeats and names the ranks that stopped (or lag).
  std::string diagnose() {
    std::this_thread::sleep_for(std::chrono::duration<double>(3 * interval_));
    std::lock_guard<std::mutex> l(mu_);
    std::vector<int> stale, behind;
    int64_t most = 0;
    for (int r = 0; r < world_; ++r) most = std::max(most, progress_[r]);
    for (int r = 0; r < world_; ++r) {
      if (r == rank_) continue;
      if (std::chrono::duration<double>(Clock::now() - last_change_[r]).count() > 2 * interval_) stale.push_back(r);
      else if (progress_[r] < most) behind.push_back(r);
    }
    if (store_lost_) return "the store on " + host_ + " is unreachable: rank 0 stopped";
    if (!stale.empty()) return "rank " + rank_list(stale) + " stopped responding";
    if (!behind.empty()) return "rank " + rank_list(behind) + " is behind (still before step " + std::to_string(most) + ")";
    return "no peer identified";
  }

 private:
  // Prints, tells the other ranks (weft/failed in the store) and exits with code 5. Rank 0 hosts
  // the store, so it lingers a few heartbeats for the others to read the message.
  void fatal(const std::string& m, bool tell = true) {
    std::fprintf(stderr, "weft: error: rank %d: %s\n", rank_, m.c_str());
    std::fflush(stderr);
    if (tell) {
      try {
        const std::string v = std::to_string(rank_) + "|" + m;
        store_->set(kFailedKey, std::vector<uint8_t>(v.begin(), v.end()));
      } catch (const std::exception&) {
      }
    }
    if (rank_ == 0) std::this_thread::sleep_for(std::chrono::duration<double>(3 * interval_));
    std::_Exit(5);
  }
  void run() {
    const std::string me = std::to_string(rank_);
    int64_t published = 0;
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      lock.unlock();
      try {
        if (store_->check({kFailedKey})) {
          const auto v = store_->get(kFailedKey);
          const std::string msg(v.begin(), v.end());
          const auto bar = msg.find('|');
          fatal(msg.substr(bar + 1) + " (detected by rank " + msg.substr(0, bar) + ")", false);
        }
        store_->add("weft/hb/" + me, 1);
        const int64_t s = step_.load();
        if (s != published) store_->add("weft/step/" + me, s - published), published = s;
        std::vector<int64_t> hb(world_), st(world_);
        for (int r = 0; r < world_; ++r) {
          hb[r] = store_->add("weft/hb/" + std::to_string(r), 0);
          st[r] = store_->add("weft/step/" + std::to_string(r), 0);
        }
        lock.lock();
        const auto now = Clock::now();
        for (int r = 0; r < world_; ++r) {
          progress_[r] = st[r];
          if (hb[r] != last_seen_[r]) last_seen_[r] = hb[r], last_change_[r] = now;
          else if (r != rank_ && std::chrono::duration<double>(now - last_change_[r]).count() > timeout_ && !stopping_)
            fatal("rank " + std::to_string(r) + " stopped responding (no heartbeat for " +
                  std::to_string(static_cast<int>(timeout_)) + " s); stopping");
        }
      } catch (const std::exception& e) {
        if (!lock.owns_lock()) lock.lock();
        if (stopping_) break;
        store_lost_ = true;
        if (rank_ != 0)
          fatal("lost the job's store on " + host_ + " (rank 0 stopped or is unreachable): " + first_line(e.what()));
        fatal("the job's store failed: " + first_line(e.what()));
      }
      cv_.wait_for(lock, std::chrono::duration<double>(interval_), [this] { return stopping_; });
    }
  }

  int rank_, world_;
  double timeout_, interval_;
  std::string host_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false, store_lost_ = false;
  std::atomic<int64_t> step_{0};
  std::vector<int64_t> last_seen_;
  std::vector<Clock::time_point> last_change_;
  std::vector<int64_t> progress_;
};

struct StepStats {
  int step = 0;
  double loss = 0, grad_norm = 0, lr = 0, tokens_per_s = 0, step_time_s = 0;
};

class Reporter {
 public:
  Reporter(const TrainOptions& o, int total, bool active) : o_(o), total_(total), active_(active) {
    bar_ = active && o.format == "text" &&
           (o.progress == "on" || (o.progress == "auto" && isatty(STDOUT_FILENO)));
    every_ = o.log_every > 0 ? o.log_every : bar_ ? std::max(1, total / 10) : 1;
  }
  void line(const std::string& s) {
    if (!active_) return;
    clear_bar();
    std::printf("%s\n", s.c_str());
    std::fflush(stdout);
  }
  void step(const StepStats& s) {
    if (!active_) return;
    if (o_.format == "json") {
      Json j{{"step", s.step},         {"loss", s.loss},
             {"grad_norm", s.grad_norm}, {"lr", s.lr},
             {"tokens_per_s", s.tokens_per_s}, {"step_time_s", s.step_time_s}};
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
      return;
    }
    if (s.step % every_ == 0 || s.step == total_ || s.step == 1) {
      char b[256];
      std::snprintf(b, sizeof b, "step %*d/%d  loss %.4f  grad_norm %.3f  lr %.2e  %.0f tokens/s  %.3f s/step",
                    static_cast<int>(std::to_string(total_).size()), s.step, total_, s.loss, s.grad_norm, s.lr,
                    s.tokens_per_s, s.step_time_s);
      line(b);
    }
    if (bar_) draw_bar(s);
  }
  void summary(const Json& j) {
    if (!active_) return;
    clear_bar();
    if (o_.format == "json") {
      std::printf("%s\n", j.dump().c_str());
    } else {
      char b[256];
      std::snprintf(b, sizeof b, "done: %d steps, final loss %.4f, %.0f tokens/s, %.3f s/step, %.1f s total",
                    j.value("steps", 0), j.value("final_loss", 0.0), j.value("mean_tokens_per_s", 0.0),
                    j.value("mean_step_time_s", 0.0), j.value("total_time_s", 0.0));
      std::printf("%s\n", b);
    }
    std::fflush(stdout);
  }

 private:
  void draw_bar(const StepStats& s) {
    const int width = 30;
    const int filled = total_ > 0 ? width * s.step / total_ : width;
    std::string bar(filled, '#');
    bar.resize(width, '.');
    std::printf("\r[%s] %d/%d loss %.4f %.0f tok/s", bar.c_str(), s.step, total_, s.loss, s.tokens_per_s);
    std::fflush(stdout);
    drawn_ = true;
  }
  void clear_bar() {
    if (drawn_) std::printf("\r\033[K");
    drawn_ = false;
  }
  const TrainOptions& o_;
  int total_;
  bool active_, bar_ = false, drawn_ = false;
  int every_ = 1;
};

Result<Plan> load_plan(const TrainOptions& o, const DistEnv& env) {
  std::optional<ModelSpec> model;
  if (!o.model.empty()) {
    auto m = load_model(o.model);
    if (!m.ok()) return m.error().with_context("--model");
    model = std::move(m).value();
  }
  Plan plan;
  if (!o.plan.empty()) {
    auto p = read_plan_file(o.plan);
    if (!p.ok()) return p.error();
    plan = std::move(p).value();
    if (model && !(*model == plan.model))
      return Error{ErrorKind::kBadInput, "--model " + o.model + " (\"" + model->name + "\") differs from the model the plan " +
                                             o.plan + " was made for (\"" + plan.model.name + "\")"};
    if (o.seq || o.global_batch || o.micro_batches)
      return Error{ErrorKind::kBadInput, "--seq, --global-batch and --micro-batches come from the plan; drop them or "
                                         "drop --plan"};
  } else {
    const ModelSpec m = model ? *model : builtin_model();
    const int seq = o.seq > 0 ? o.seq : std::min(64, m.max_seq > 0 ? m.max_seq : 64);
    const int mb = o.micro_batches > 0 ? o.micro_batches : 1;
    const int gb = o.global_batch > 0 ? o.global_batch : 8 * env.world * mb;
    auto p = data_parallel_plan(m, env.world, seq, gb, mb);
    if (!p.ok()) return p.error().with_context("without --plan (data parallel over WORLD_SIZE=" +
                                               std::to_string(env.world) + ")");
    plan = std::move(p).value();
  }
  Status s = check_supported(plan);
  if (!s.ok()) return s.error();
  if (plan.world_size() != env.world)
    return Error{ErrorKind::kBadInput, "plan: made for " + std::to_string(plan.world_size()) + " devices (cluster " +
                                           std::to_string(plan.cluster.nodes) + " x " +
                                           std::to_string(plan.cluster.gpus_per_node) + ") but WORLD_SIZE is " +
                                           std::to_string(env.world)};
  return plan;
}

Status check_options(const TrainOptions& o) {
  auto bad = [](const std::string& m) { return Status(Error{ErrorKind::kBadInput, m}); };
  if (o.steps < 1) return bad("--steps: must be at least 1, got " + std::to_string(o.steps));
  if (o.format != "text" && o.format != "json") return bad("--format: expected text or json, got \"" + o.format + "\"");
  if (o.progress != "auto" && o.progress != "on" && o.progress != "off")
    return bad("--progress: expected auto, on or off, got \"" + o.progress + "\"");
  if (!(o.timeout_s > 0)) return bad("--timeout: must be positive, got " + std::to_string(o.timeout_s));
  if (!(o.collective_timeout_s > 0))
    return bad("--collective-timeout: must be positive, got " + std::to_string(o.collective_timeout_s));
  if (o.threads < 1) return bad("--threads: must be at least 1, got " + std::to_string(o.threads));
  if (!(o.bucket_mb > 0)) return bad("--bucket-mb: must be positive, got " + std::to_string(o.bucket_mb));
  if (o.device != "auto" && o.device != "cpu" && o.device != "cuda")
    return bad("--device: expected auto, cpu or cuda, got \"" + o.device + "\"");
  if (o.grad_overlap != "on" && o.grad_overlap != "off")
    return bad("--grad-overlap: expected on or off, got \"" + o.grad_overlap + "\"");
  if (!(o.lr >= 0)) return bad("--lr: must be positive, got " + std::to_string(o.lr));
  if (o.beta1 < 0 || o.beta1 >= 1 || o.beta2 < 0 || o.beta2 >= 1) return bad("--beta1/--beta2: must be in [0, 1)");
  if (o.checkpoint_every < 0) return bad("--checkpoint-every: must be >= 0");
  if (o.resume && o.checkpoint_dir.empty()) return bad("--resume needs --checkpoint-dir");
  return {};
}

std::string grad_sync_note(const GradSync& g, const TrainOptions& o) {
  if (g.num_buckets() == 0) return "gradient sync: no data-parallel gradient reduction on this rank";
  char b[192];
  std::snprintf(b, sizeof b, "gradient sync: %d bucket%s of at most %g MiB on this rank, reduced %s", g.num_buckets(),
                g.num_buckets() == 1 ? "" : "s", o.bucket_mb,
                o.grad_overlap == "on" ? "during backward as each completes" : "after backward");
  return b;
}

// cpu; cuda:LOCAL_RANK; auto: cuda when a GPU is usable (and, with more than one rank, the
// libtorch has NCCL), else cpu. A `cuda` request that cannot be met is an error naming why.
Result<at::Device> pick_device(const std::string& want, const DistEnv& env) {
  if (want == "cpu") return at::Device(at::kCPU);
  const bool cuda = torch::cuda::is_available();
  const bool comm_ok = env.world == 1 || nccl_compiled();
  if (want == "auto" && !(cuda && comm_ok)) return at::Device(at::kCPU);
  if (!cuda)
    return Error{ErrorKind::kBadInput, "--device cuda: CUDA is not available to this process "
                                       "(torch::cuda::is_available() is false: a libtorch built without CUDA, "
                                       "no GPU, or none visible); use --device cpu or auto"};
  if (!comm_ok)
    return Error{ErrorKind::kBadInput, "--device cuda: " + std::to_string(env.world) +
                                           " ranks on CUDA need NCCL, and this libtorch was built without it"};
  const int64_t n = static_cast<int64_t>(torch::cuda::device_count());
  if (env.local_rank >= n)
    return Error{ErrorKind::kBadInput, "--device cuda: LOCAL_RANK " + std::to_string(env.local_rank) + " but only " +
                                           std::to_string(n) + " CUDA device(s) are visible"};
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
}

// Everything that lives while the job runs; on a failure it is deliberately leaked so that no
// destructor waits on a peer that will never answer.
struct Job {
  std::unique_ptr<GroupSet> groups;
  std::unique_ptr<Watchdog> watchdog;
  std::unique_ptr<Model> model;
  std::unique_ptr<Optimizer> opt;
};

}  // namespace

Status train(const TrainOptions& o) {
  auto env_r = read_dist_env();
  if (!env_r.ok()) return env_r.error();
  const DistEnv env = env_r.value();
  if (Status s = check_options(o); !s.ok()) return s;
  auto plan_r = load_plan(o, env);
  if (!plan_r.ok()) return plan_r.error();
  const Plan plan = std::move(plan_r).value();
  auto fault_r = parse_fault(o.fault);
  if (!fault_r.ok()) return fault_r.error();
  const Fault fault = fault_r.value();

  const int rank = env.rank;
  const int64_t seq = plan.train.seq, m = plan.train.micro_batches, pmb = plan.train.pipeline_micro_batch();
  const int64_t tokens_per_step = static_cast<int64_t>(plan.train.global_batch) * seq;
  std::unique_ptr<TokenSource> data;
  {
    auto f = data_format_from_string(o.data_format, o.data);
    if (!f.ok()) return f.error();
    if (f.value() != DataFormat::kSynthetic && o.data.empty())
      return Error{ErrorKind::kBadInput, "--data-format " + o.data_format + " needs --data FILE"};
    auto src = f.value() == DataFormat::kSynthetic ? Result<std::unique_ptr<TokenSource>>(synthetic_source(plan.model.vocab, o.seed))
                                                   : file_source(o.data, f.value(), plan.model.vocab, seq + 1, o.seed);
    if (!src.ok()) return src.error();
    data = std::move(src).value();
  }
  set_threads(o.threads);
  auto device_r = pick_device(o.device, env);
  if (!device_r.ok()) return device_r.error();
  const at::Device device = device_r.value();
  const std::string device_name = device.is_cuda() ? "cuda" : "cpu";
  // The rank's GPU becomes the current device of this thread (NCCL communicators and every CUDA
  // allocation follow it).
  if (device.is_cuda()) c10::impl::getDeviceGuardImpl(at::kCUDA)->setDevice(device);
  const std::string plan_hash = json_hash(to_json(plan));
  Reporter rep(o, o.steps, rank == 0);

  Job job;
  auto fail = [&](const std::string& what) -> Status {
    std::string why;
    if (job.watchdog) {
      why = "; " + job.watchdog->diagnose();
      job.watchdog->publish(*job.groups, first_line(what) + why);
    }
    // Leak the job: a ProcessGroupGloo destructor would wait for work stuck on a dead peer.
    (void)job.groups.release();
    (void)job.watchdog.release();
    (void)job.model.release();
    (void)job.opt.release();
    return Error{ErrorKind::kRuntime, "rank " + std::to_string(rank) + ": " + first_line(what) + why};
  };

  CommConfig cfg;
  cfg.rank = rank;
  cfg.world = env.world;
  cfg.master_addr = env.master_addr;
  cfg.master_port = env.master_port;
  cfg.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  cfg.collective_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.collective_timeout_s * 1000));
  cfg.cuda = device.is_cuda();
  try {
    job.groups = std::make_unique<GroupSet>(cfg);
    if (env.world > 1) job.watchdog = std::make_unique<Watchdog>(*job.groups, o.timeout_s);
    job.groups->build(plan_groups(plan));
    job.groups->build(plan_grad_groups(plan), Channel::kGrad);
  } catch (const std::exception& e) {
    return fail("could not form the job of " + std::to_string(env.world) + " ranks through " + env.master_addr + ":" +
                std::to_string(env.master_port) + ": " + e.what());
  }

  int start_step = 0;
  try {
    job.model = std::make_unique<Model>(plan, rank, *job.groups, o.seed, device);
    GradSyncOptions gs;
    gs.bucket_bytes = std::max<int64_t>(1, static_cast<int64_t>(o.bucket_mb * 1024.0 * 1024.0));
    gs.overlap = o.grad_overlap == "on";
    job.opt = std::make_unique<Optimizer>(*job.model, AdamWConfig{o.beta1, o.beta2, o.eps, o.weight_decay}, gs);
    if (o.resume) {
      auto st = load_checkpoint(o.checkpoint_dir, *job.model, *job.opt, rank, env.world, plan_hash);
      if (!st.ok()) return st.error();
      start_step = st.value();
    }
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  Model& model = *job.model;
  Optimizer& opt = *job.opt;
  GroupSet& groups = *job.groups;
  Comm& world = groups.world();

  if (rank == 0 && o.format == "text") {
    int64_t params = 0;
    {
      std::set<std::string> seen;
      for (int st = 0; st < plan.train.pp; ++st)
        for (const auto& u : unit_specs(plan, st * plan.devices_per_stage()))
          for (const auto& p : u.params)
            if (seen.insert(p.name).second) {
              int64_t n = 1;
              for (auto d : p.full_shape) n *= d;
              params += n;
            }
    }
    std::ostringstream h;
    h << "weft train: model " << plan.model.name << " (" << params << " parameters), " << env.world << " rank"
      << (env.world > 1 ? "s" : "") << ", pp " << plan.train.pp << " " << to_string(plan.train.schedule) << ", "
      << (o.plan.empty() ? std::string("data parallel") : "plan " + o.plan) << "; global batch "
      << plan.train.global_batch << " x seq " << seq << " in " << m << " micro-batch" << (m > 1 ? "es" : "")
      << "; data: " << data->describe();
    rep.line(h.str());
    rep.line((plan.train.dtype == DType::kFp32 ? "" : "weft: warning: ") + precision_note(plan, device_name));
    rep.line(grad_sync_note(opt.grad_sync(), o));
    if (start_step > 0) rep.line("resumed from step " + std::to_string(start_step) + " in " + o.checkpoint_dir);
  } else if (rank == 0) {
    std::fprintf(stderr, "%s%s\n", plan.train.dtype == DType::kFp32 ? "weft: " : "weft: warning: ",
                 precision_note(plan, device_name).c_str());
  }

  LrSchedule lrs;
  // --lr 0 (the default): 1e-2 for the small built-in model, 3e-4 otherwise.
  lrs.peak = o.lr > 0 ? o.lr : (o.plan.empty() && o.model.empty()) ? 1e-2 : 3e-4;
  lrs.min = o.min_lr >= 0 ? o.min_lr : lrs.peak / 10;
  lrs.warmup = o.warmup >= 0 ? o.warmup : o.steps / 10;
  lrs.total = o.steps;

  const int S = plan.devices_per_stage();
  const int pp = plan.train.pp;
  const int stage = model.stage();
  const int prev_rank = rank - S, next_rank = rank + S;
  const TokenBlock blk = model.token_block();
  const int64_t bl = pmb / blk.batch_parts, tl = seq / blk.seq_parts;
  const auto actions = pipeline_actions(plan.train.schedule, pp, stage, static_cast<int>(m));
  size_t last_backward = 0;  // the step's last backward on this stage: zero 0/1 reduce during it
  for (size_t i = 0; i < actions.size(); ++i)
    if (actions[i].kind == PipeAction::kBackward) last_backward = i;

  // Tokens (inputs) or targets of micro-batch k of `step` for this rank's block.
  auto batch = [&](int step, int k, bool targets) {
    at::Tensor t = at::empty({bl, tl}, at::kLong);
    std::vector<int64_t> buf(seq + 1);
    for (int64_t j = 0; j < bl; ++j) {
      data->sample(step, k * pmb + blk.batch_idx * bl + j, seq + 1, buf.data());
      std::copy_n(buf.data() + blk.seq_idx * tl + (targets ? 1 : 0), tl, t[j].data_ptr<int64_t>());
    }
    return t.to(device);
  };

  double total_time = 0, timed = 0;
  int timed_steps = 0;
  double last_loss = 0;
  int64_t resident_grad_bytes = 0;
  HeldBytes held;  // after the last step's gradient synchronisation
  double timed_grad_wait = 0;  // time spent waiting for the gradient reduction after backward
  const auto run_start = Clock::now();
  try {
    for (int step = start_step + 1; step <= o.steps; ++step) {
      inject(fault, rank, step);
      if (job.watchdog) job.watchdog->set_step(step);  // "has entered step": lets peers name a laggard
      const auto t0 = Clock::now();
      opt.zero_grad();
      std::vector<at::Tensor> xin(m), yout(m);
      std::vector<Pending> sends;
      double loss_sum = 0;
      for (size_t ai = 0; ai < actions.size(); ++ai) {
        const PipeAction& a = actions[ai];
        const int k = a.micro_batch;
        if (a.kind == PipeAction::kForward) {
          at::Tensor x;
          if (model.first_stage()) {
            x = model.embed(batch(step, k, false));
          } else {
            x = at::empty(model.input_shape(), at::TensorOptions().dtype(at::kFloat).device(device));
            world.recv(x, prev_rank, 2 * k);
            x.requires_grad_(true);
            xin[k] = x;
          }
          at::Tensor y = model.forward_layers(x);
          if (model.last_stage()) {
            at::Tensor l = model.head_loss(y, batch(step, k, true));
            loss_sum += l.item<double>();
            yout[k] = l / static_cast<double>(tokens_per_step);
          } else {
            sends.push_back(world.send(y.detach(), next_rank, 2 * k));
            yout[k] = y;
          }
        } else {
          opt.begin_backward(ai == last_backward);
          if (model.last_stage()) {
            yout[k].backward();
          } else {
            at::Tensor dy = at::empty(yout[k].sizes(), yout[k].options());
            world.recv(dy, next_rank, 2 * k + 1);
            torch::autograd::backward({yout[k]}, {dy});
          }
          if (!model.first_stage()) {
            at::Tensor g = xin[k].grad().defined() ? xin[k].grad() : at::zeros_like(xin[k]);
            sends.push_back(world.send(g, prev_rank, 2 * k + 1));
          }
          xin[k] = at::Tensor();
          yout[k] = at::Tensor();
          opt.after_backward();
        }
      }
      for (auto& s : sends) s.wait();
      opt.sync_grads();
      if (step == o.steps) {
        resident_grad_bytes = opt.resident_grad_bytes();
        held = opt.held_bytes();
      }
      at::Tensor stats = at::zeros({2}, at::kDouble);
      stats[0] = model.counts_loss() ? loss_sum : 0.0;
      stats[1] = opt.local_norm_sq();
      world.allreduce_sum(stats);
      const double loss = stats[0].item<double>() / static_cast<double>(tokens_per_step);
      const double norm = std::sqrt(stats[1].item<double>());
      double scale = 1.0;
      if (o.clip > 0) {
        const double coef = o.clip / (norm + 1e-6);
        if (coef < 1.0) scale = coef;
      }
      const double lr = lrs.at(step);
      opt.step(lr, scale);
      const double dt = seconds_since(t0);
      StepStats s{step, loss, norm, lr, static_cast<double>(tokens_per_step) / dt, dt};
      rep.step(s);
      last_loss = loss;
      total_time += dt;
      if (step > start_step + 1 || o.steps == start_step + 1)
        timed += dt, ++timed_steps, timed_grad_wait += opt.grad_sync().stats().wait_s;
      const bool last = step == o.steps;
      if (!o.checkpoint_dir.empty() && (last || (o.checkpoint_every > 0 && step % o.checkpoint_every == 0))) {
        Status cs = save_checkpoint(o.checkpoint_dir, step, model, opt, groups, plan_hash, o.keep_checkpoints);
        if (!cs.ok()) return fail(cs.error().message);
      }
    }
    if (!o.save_params.empty()) {
      ParamsFile f = consolidate(model, groups, o.steps);
      if (rank == 0) {
        Status ws = write_params_file(o.save_params, f);
        if (!ws.ok()) return fail(ws.error().message);
      }
    }
    world.barrier();
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  // What every rank held (rank 0 prints it in the summary).
  Json ranks = Json::array();
  try {
    at::Tensor mine = at::tensor({static_cast<double>(held.params), static_cast<double>(held.grads),
                                  static_cast<double>(held.optimizer),
                                  static_cast<double>(gathered_param_bytes().peak)},
                                 at::kDouble);
    at::Tensor all = world.allgather(mine.to(device)).to(at::kCPU);
    for (int r = 0; r < env.world; ++r)
      ranks.push_back(Json{{"rank", r},
                           {"param_bytes", static_cast<int64_t>(all[r][0].item<double>())},
                           {"grad_bytes", static_cast<int64_t>(all[r][1].item<double>())},
                           {"optimizer_bytes", static_cast<int64_t>(all[r][2].item<double>())},
                           {"peak_gathered_param_bytes", static_cast<int64_t>(all[r][3].item<double>())}});
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  if (job.watchdog) job.watchdog->stop();
  try {
    world.barrier();  // no rank leaves while another's watchdog still needs the store on rank 0
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  const double mean = timed_steps > 0 ? timed / timed_steps : 0;
  Json sum{{"summary", true},
           {"steps", o.steps},
           {"final_loss", last_loss},
           {"mean_step_time_s", mean},
           {"mean_tokens_per_s", mean > 0 ? static_cast<double>(tokens_per_step) / mean : 0.0},
           {"total_time_s", seconds_since(run_start)},
           {"world_size", env.world},
           {"tokens_per_step", tokens_per_step},
           {"grad_buckets", opt.grad_sync().stats().buckets},
           {"grad_buckets_launched_in_backward", opt.grad_sync().stats().launched_in_backward},
           {"grad_buckets_done_in_backward", opt.grad_sync().stats().done_in_backward},
           {"mean_grad_sync_wait_s", timed_steps > 0 ? timed_grad_wait / timed_steps : 0.0},
           {"resident_grad_bytes", resident_grad_bytes},
           {"ranks", ranks}};
  rep.summary(sum);
  (void)total_time;
  return {};
}

}  // namespace weft::runtime
