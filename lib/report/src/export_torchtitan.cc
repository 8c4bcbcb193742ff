// torchtitan job-config tables (rules in weft/report/export.h and docs/report.md). Keys, types and
// values are those of kTorchtitanRelease (data/reference/torchtitan-args).
#include <algorithm>
#include <optional>

#include "export_common.h"
#include "weft/core/format.h"

namespace weft::export_detail {

namespace {

constexpr Framework kTitan = Framework::kTorchtitan;

// Refusals name torchtitan; their hints, the framework the plan would be searched for (fw).
[[noreturn]] void refuse_titan(Framework fw, const std::string& msg) { refuse(kTitan, msg + plan_hint(fw)); }

}  // namespace

TorchtitanConfig torchtitan_or_throw(const Plan& p, bool compile) {
  require_valid(p);
  TorchtitanConfig r;
  r.notes.push_back(std::string("written for ") + kTorchtitanRelease +
                    ", the last release that reads TOML job files (its keys: "
                    "data/reference/torchtitan-args/job_config.txt)");
  const Framework fw = compile ? Framework::kTorchtitanCompile : kTitan;
  // One strategy for every layer; the expert degree applies to the MoE layers only.
  const std::optional<LayerStrategy> one = p.uniform_strategy();
  if (!one)
    refuse_titan(fw, "torchtitan applies one strategy to every layer, but this plan is layer-wise: " +
                        describe(runs(p, [](const LayerStrategy& s) { return s; }), 6));
  const LayerStrategy s = *one;
  if (p.train.moe_dispatcher != MoeDispatcher::kAllToAll)
    refuse_titan(fw, std::string("train.moe_dispatcher=") + to_string(p.train.moe_dispatcher) +
                         ": weft exports torchtitan's expert parallelism with its all-to-all dispatch");
  if (p.train.moe_a2a_overlap)
    refuse_titan(fw, "train.moe_a2a_overlap: torchtitan does not overlap the expert all-to-all of one micro-batch "
                     "with another's compute");
  if (p.train.optimizer.precision_aware())
    refuse_titan(fw, "train.optimizer: torchtitan's AdamW keeps its moments and gradients in the parameters' fp32 "
                     "(Megatron-LM's precision-aware optimizer has no torchtitan counterpart)");
  if (s.ulysses > 1)
    refuse_titan(fw, "ulysses=" + S(s.ulysses) + ": torchtitan has no Ulysses sequence parallelism");
  if (s.zero < 2 && s.shard_group() > 1)
    refuse_titan(fw, "zero=" + S(s.zero) + ": torchtitan's data parallelism is FSDP2 (ZeRO-2 without resharding "
                    "after forward, or ZeRO-3); it has no optimizer-only sharding, and plain DDP drops mixed "
                    "precision under tensor or pipeline parallelism");
  if (s.tp > 1 && !s.sp)
    refuse_titan(fw, "tp=" + S(s.tp) + " without sequence parallelism: torchtitan's tensor parallelism always "
                    "shards the norms over the sequence");
  require_embedding_like_layers(p, s, kTitan, fw,
                                "torchtitan shards the embedding and output over the same tensor-parallel mesh",
                                "torchtitan applies one data-parallel mode to all parameters");
  // torchtitan builds a multi-stage schedule such as ScheduleInterleavedZeroBubble with at least 2
  // stages per rank (torchtitan/distributed/pipeline_parallel.py, pipeline_llm); zb-h1 has one.
  if (p.train.schedule == Schedule::kZbH1 && p.train.pp > 1)
    refuse_titan(fw, "train.schedule=zb-h1 (pp=" + S(p.train.pp) +
                         "): torchtitan runs its zero-bubble schedule (InterleavedZeroBubble) with at least 2 stages "
                         "per rank, and zb-h1 keeps one");
  // ZBVZeroBubble refuses a torch.compile'd stage (it cannot split the backward of a compiled graph:
  // _check_torch_compile_compatibility in pytorch/pytorch torch/distributed/pipelining/schedules.py,
  // read at commit 00722e64; pytorch/pytorch issue 161904), and torchtitan's compile wraps each block.
  if (p.train.schedule == Schedule::kZbV && compile)
    refuse(kTitan, "train.schedule=zb-v (pp=" + S(p.train.pp) +
                       "): torch.distributed.pipelining's ScheduleZBVZeroBubble refuses torch.compile'd stages; export "
                       "for torchtitan without compile");
  // training.mixed_precision_param is Literal["bfloat16", "float32"] in the release's job config.
  if (p.train.dtype == DType::kFp16)
    refuse(kTitan, "train.dtype=fp16: torchtitan's training.mixed_precision_param takes bfloat16 or float32 (plan "
               "with --dtype bf16 or fp32)");
  const int B = p.train.global_batch, m = std::max(1, p.train.micro_batches), dp = std::max(1, s.dp);
  const int pp = std::max(1, p.train.pp), vp = std::max(1, p.train.vp);
  const int per_micro = B / (m * dp);  // samples of one micro-batch on one data-parallel rank
  std::string t = std::string("# ") + kTorchtitanRelease + " job config (TOML); torchtitan's main branch no longer "
                  "reads TOML job files\n";
  auto line = [&](const std::string& k, const std::string& v) { t += k + " = " + v + "\n"; };
  auto q = [](const std::string& v) { return "\"" + v + "\""; };
  t += "[training]\n";
  // Without a pipeline, micro-batches are gradient accumulation: torchtitan runs global / (local * dp)
  // steps of local_batch_size samples. With one, the local batch is split into pipeline micro-batches,
  // and train.rounds > 1 is gradient accumulation over that many pipeline schedules.
  line("local_batch_size", S(pp > 1 ? B / dp / std::max(1, p.train.rounds) : per_micro));
  line("global_batch_size", S(B));
  line("seq_len", S(p.train.seq));
  switch (p.train.dtype) {
    case DType::kFp32:
    case DType::kTf32: line("mixed_precision_param", q("float32")); break;
    case DType::kFp16:  // refused above
    case DType::kBf16:
    case DType::kFp8: line("mixed_precision_param", q("bfloat16")); break;
  }
  t += "\n[parallelism]\n";
  // ParallelDims: replicate x shard x cp x tp x pp = world size.
  line("data_parallel_replicate_degree", "1");
  line("data_parallel_shard_degree", S(dp));
  if (s.zero >= 2) line("fsdp_reshard_after_forward", q(s.zero == 3 ? "always" : "never"));
  if (s.shard_group() == 1 && p.train.dtype != DType::kFp32 && p.train.dtype != DType::kTf32)
    r.notes.push_back("no data or context parallelism: torchtitan applies its bf16 mixed precision through FSDP "
                      "only, so this runs in fp32 there unless a data or context parallel degree is added");
  line("tensor_parallel_degree", S(s.tp));
  line("context_parallel_degree", S(s.cp));
  if (s.ep > 1) line("expert_parallel_degree", S(s.ep));
  // torchtitan's expert tensor degree defaults to 1 (JobConfig Parallelism.expert_tensor_parallel_degree):
  // written whenever the layers have experts, tp's or 1.
  if (s.ep > 1 || s.expert_tp() != s.tp) line("expert_tensor_parallel_degree", S(s.expert_tp()));
  line("pipeline_parallel_degree", S(pp));
  if (pp > 1) {
    // Interleaved1F1B is a multi-stage schedule (at least two stages per rank); 1F1B and GPipe run
    // one stage per rank (torchtitan/distributed/pipeline_parallel.py). ZBVZeroBubble is torch's
    // ScheduleZBVZeroBubble: the "v" stage style, exactly two stages per rank, rank g holding stages
    // g and 2 pp - 1 - g (pipeline_module_split, _get_stage_indices, at v0.2.2, commit 73a0e697), as
    // the plan's zb-v does; pipeline_parallel_layers_per_stage below gives its 2 pp stages.
    const bool interleaved = p.train.schedule == Schedule::kInterleaved && vp > 1;
    const char* sched = p.train.schedule == Schedule::kGpipe  ? "GPipe"
                        : p.train.schedule == Schedule::kZbV ? "ZBVZeroBubble"
                        : interleaved                        ? "Interleaved1F1B"
                                                             : "1F1B";
    line("pipeline_parallel_schedule", q(sched));
    if (p.train.schedule == Schedule::kZbV)
      r.notes.push_back("ZBVZeroBubble puts the first and the last stage on pipeline rank 0: torchtitan logs the loss "
                        "there (components/metrics.py)");
    line("pipeline_parallel_microbatch_size", S(per_micro));
    const auto counts = stage_layer_counts(p);
    if (std::all_of(counts.begin(), counts.end(), [&](int c) { return c == counts[0]; })) {
      // torchtitan counts the embedding and the output as one layer each unless told not to.
      line("pipeline_parallel_layers_per_stage", S(counts[0]));
      line("pipeline_parallel_first_stage_less_layers", "0");
      line("pipeline_parallel_last_stage_less_layers", "0");
    } else {
      r.notes.push_back("uneven stages (" + join_counts(counts) + " layers): list each stage's modules in "
                        "parallelism.module_fqns_per_model_part");
    }
  }
  t += "\n[activation_checkpoint]\n";
  line("mode", q(s.recompute == Recompute::kFull ? "full" : s.recompute == Recompute::kSelective ? "selective" : "none"));
  if (s.recompute == Recompute::kSelective) line("selective_ac_option", q("op"));
  if (compile) {
    t += "\n[compile]\n";
    line("enable", "true");
  }
  if (p.train.dtype == DType::kFp8)
    r.notes.push_back("fp8: add \"quantize.linear.float8\" to model.converters (torchtitan's Float8 linear "
                      "converter); the tables set bf16 parameters");
  r.notes.push_back("model, tokenizer, data, optimizer and learning-rate settings are not part of a plan");
  r.toml = std::move(t);
  return r;
}

}  // namespace weft::export_detail
