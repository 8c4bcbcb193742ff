#include "train_setup.h"

#include <dlfcn.h>

#include <ATen/Parallel.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>

#include "weft/runtime/comm.h"
#include "weft/runtime/safetensors.h"
#include "varlen_stage.h"
#include "weft/spec/presets.h"

namespace weft::runtime {

void set_threads(int n) {
  at::set_num_threads(n);
  using SetThreads = void (*)(int);
  if (auto f = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
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
  if (!(std::isfinite(o.throttle_inter_node_gbps) && o.throttle_inter_node_gbps >= 0))
    return bad("--throttle-inter-node: GB/s, at least 0 (0: off), got " + std::to_string(o.throttle_inter_node_gbps));
  if (o.device != "auto" && o.device != "cpu" && o.device != "cuda")
    return bad("--device: expected auto, cpu or cuda, got \"" + o.device + "\"");
  if (o.precision != "auto" && o.precision != "fp32" && o.precision != "bf16")
    return bad("--precision: expected auto, fp32 or bf16, got \"" + o.precision + "\"");
  if (o.backend != "auto" && o.backend != "nccl" && o.backend != "gloo")
    return bad("--backend: expected auto, nccl or gloo, got \"" + o.backend + "\"");
  if (o.grad_overlap != "on" && o.grad_overlap != "off")
    return bad("--grad-overlap: expected on or off, got \"" + o.grad_overlap + "\"");
  if (!(o.lr >= 0)) return bad("--lr: must be positive, got " + std::to_string(o.lr));
  if (o.beta1 < 0 || o.beta1 >= 1 || o.beta2 < 0 || o.beta2 >= 1) return bad("--beta1/--beta2: must be in [0, 1)");
  if (o.checkpoint_every < 0) return bad("--checkpoint-every: must be >= 0");
  if (o.adapt && o.varlen)
    return bad("--adapt: variable-length steps place their documents per step already; not with --varlen");
  if (o.adapt && (!o.adapt_hooks.expected || !o.adapt_hooks.replan))
    return bad("--adapt: this build of weft train has no planner to re-plan with");
  if (!(o.adapt_min_gain >= 1)) return bad("--adapt-min-gain: must be at least 1, got " + std::to_string(o.adapt_min_gain));
  if (o.resume && o.checkpoint_dir.empty()) return bad("--resume needs --checkpoint-dir");
  if (!save_dtype_from_string(o.save_hf_dtype).ok())
    return bad("--save-hf-dtype: expected fp32, bf16 or fp16, got \"" + o.save_hf_dtype + "\"");
  return {};
}

Result<Plan> load_plan(const TrainOptions& o, const DistEnv& env) {
  std::optional<ModelSpec> model;
  if (!o.model.empty()) {
    auto m = load_model(o.model);
    if (!m.ok()) return m.error().with_context("--model");
    model = std::move(m).value();
  } else if (!o.hf_checkpoint.empty() && o.plan.empty()) {
    // The checkpoint's own config.json names the model.
    auto m = load_model((std::filesystem::path(o.hf_checkpoint) / "config.json").string());
    if (!m.ok()) return m.error().with_context("--hf-checkpoint");
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
    // --varlen: --global-batch counts documents, which the batch planner places (docs/varlen.md);
    // the plan's batch only has to divide.
    const int gb = o.varlen ? env.world * mb : o.global_batch > 0 ? o.global_batch : 8 * env.world * mb;
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

Result<std::unique_ptr<TokenSource>> open_data(const TrainOptions& o, const Plan& plan) {
  auto f = data_format_from_string(o.data_format, o.data);
  if (!f.ok()) return f.error();
  if (f.value() != DataFormat::kSynthetic && o.data.empty())
    return Error{ErrorKind::kBadInput, "--data-format " + o.data_format + " needs --data FILE"};
  if (f.value() == DataFormat::kSynthetic)
    return Result<std::unique_ptr<TokenSource>>(synthetic_source(plan.model.vocab, o.seed));
  return file_source(o.data, f.value(), plan.model.vocab, plan.train.seq + 1, o.seed);
}

Result<VarlenSetup> setup_varlen(const TrainOptions& o, const Plan& plan, const TokenSource& data, int world) {
  auto bad = [](const std::string& m) { return Error{ErrorKind::kBadInput, m}; };
  if (o.data.empty()) return bad("--varlen reads documents from a token file: give --data FILE and --eos ID");
  const bool indexed = data.indexed_documents() != nullptr;  // a Megatron dataset: its index says
  if (indexed && o.eos >= 0)
    return bad("--eos " + std::to_string(o.eos) + ": the documents of --data " + o.data +
               " (a Megatron dataset) come from its index; drop --eos");
  if (!indexed && o.eos < 0) return bad("--varlen: give --eos ID, the token that ends each document of --data");
  if (o.eos >= plan.model.vocab)
    return bad("--eos " + std::to_string(o.eos) + ": outside the model's vocabulary of " +
               std::to_string(plan.model.vocab));
  if (plan.train.pp * plan.train.vp != 1)
    return bad("--varlen: the plan has " + std::to_string(plan.train.pp * plan.train.vp) +
               " pipeline stages; variable-length steps run single-stage plans");
  std::vector<const LayerStrategy*> all{&plan.embedding};
  for (const LayerStrategy& l : plan.stages[0].layers) all.push_back(&l);
  for (const LayerStrategy* l : all) {
    if (l->ulysses != 1 || l->cp != 1)
      return bad("--varlen: the plan has a layer with Ulysses " + std::to_string(l->ulysses) + " and context parallel " +
                 std::to_string(l->cp) + "; the step's sequence groups replace them: give a plan of Ulysses 1 and cp 1");
    if (l->tp != plan.embedding.tp || (l->tp > 1 && l->sp != plan.embedding.sp))
      return bad("--varlen: the plan's layers differ in tp or sequence parallelism (" + std::to_string(l->tp) + " against the "
                 "embedding's " + std::to_string(plan.embedding.tp) + "); variable-length steps need one tp and sp "
                 "throughout");
  }
  if (!plan.train.dp_shares.empty())
    return bad("--varlen: the plan gives its data-parallel replicas uneven shares (train.dp_shares); variable-length "
               "steps place their documents per step: drop dp_shares");
  if (!o.varlen_planner) return bad("--varlen: this build of weft train has no batch planner");
  VarlenSetup v;
  const int most = varlen_max_group(plan, world);
  v.min_group = o.min_group;
  v.max_group = o.max_group > 0 ? o.max_group : most;
  if (!power_of_two(v.min_group) || !power_of_two(v.max_group) || v.min_group > v.max_group)
    return bad("--min-group " + std::to_string(v.min_group) + " / --max-group " + std::to_string(v.max_group) +
               ": powers of two, the first at most the second");
  if (v.max_group > most)
    return bad("--max-group " + std::to_string(v.max_group) + ": at most " + std::to_string(most) +
               " (a power of two no larger than the " + std::to_string(world / plan.embedding.tp) +
               " sequence-parallel ranks that divides every layer's attention heads per tp rank)");
  const int units = world / plan.embedding.tp;
  if (units % v.min_group != 0)
    return bad("--min-group " + std::to_string(v.min_group) + " does not divide the " + std::to_string(units) +
               " sequence-parallel ranks (" + std::to_string(world) + " ranks / tp " + std::to_string(plan.embedding.tp) +
               ")");
  if (o.max_tokens_per_gpu < 0)
    return bad("--max-tokens-per-gpu " + std::to_string(o.max_tokens_per_gpu) + ": must not be negative");
  if (o.plan_ahead < 1) return bad("--plan-ahead " + std::to_string(o.plan_ahead) + ": must be at least 1");
  auto docs = split_documents(data, o.eos);
  if (!docs.ok()) return docs.error();
  const int per_step = !o.plan.empty() ? plan.train.global_batch : o.global_batch > 0 ? o.global_batch : 8 * world;
  auto b = DocumentBatches::make(docs.value(), per_step, plan.train.seq, o.seed);
  if (!b.ok()) return b.error();
  v.batches = std::move(b).value();
  return v;
}

Result<DeviceChoice> pick_device(const std::string& want, const std::string& backend, const DistEnv& env) {
  auto bad = [](const std::string& m) { return Error{ErrorKind::kBadInput, m}; };
  if (want == "cpu") {
    if (backend == "nccl") return bad("--backend nccl: NCCL carries CUDA tensors; --device cpu trains on the CPU (Gloo)");
    return DeviceChoice{};
  }
  const bool cuda = torch::cuda::is_available();
  if (want == "auto" && !(cuda && (env.world == 1 || nccl_compiled() || backend == "gloo"))) return DeviceChoice{};
  if (!cuda)
    return bad("--device cuda: CUDA is not available to this process (torch::cuda::is_available() is false: a "
               "libtorch built without CUDA, no GPU, or none visible); use --device cpu or auto");
  const int64_t n = static_cast<int64_t>(torch::cuda::device_count());
  if (n < 1) return bad("--device cuda: no CUDA device is visible (torch::cuda::device_count() is 0)");
  const bool nccl = env.world > 1 && (backend == "nccl" || (backend == "auto" && nccl_compiled()));
  if (nccl && !nccl_compiled())
    return bad("--backend nccl: this libtorch was built without NCCL; use --backend gloo (CUDA tensors copied "
               "through host memory)");
  if (backend != "gloo" && env.local_rank >= n)
    return bad("--device cuda: LOCAL_RANK " + std::to_string(env.local_rank) + " but only " + std::to_string(n) +
               " CUDA device(s) are visible, and NCCL refuses two ranks on one device: run at most " +
               std::to_string(n) + " ranks per node, or --backend gloo to share the GPUs (CUDA tensors copied "
               "through host memory)");
  DeviceChoice c;
  c.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank % n));
  c.nccl = nccl;
  return c;
}

}  // namespace weft::runtime
