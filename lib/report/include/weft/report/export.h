// Exports of a plan to the frameworks people already run (docs/report.md, "Exports"; by framework:
// framework_export below):
//  - Megatron-LM command-line flags, one per line;
//  - a DeepSpeed config JSON, for plain DeepSpeed (data parallel + ZeRO) or for Megatron-DeepSpeed
//    (which takes tp / pp / Ulysses from its own flags and ZeRO from this config);
//  - torchtitan job-config tables (TOML).
// Each is written for one release of its framework (kMegatronRelease, ... below; also the first
// note of each export), and every flag or key it writes is in that release's own list
// (data/reference/<framework>-args, checked by tests/report/export_reference_test.cc).
// All express one strategy for every layer. A plan they cannot express is refused with an Error
// (kBadInput) that names what differs and where: the layers whose strategies differ, uneven stages,
// tensor or pipeline parallelism under plain DeepSpeed, ...; where a plan searched for the framework
// (`weft plan --framework <name>`, restrict_to_framework) would be expressible, the error says so.
#pragma once

#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/json.h"
#include "weft/cost/framework.h"
#include "weft/plan/plan.h"

namespace weft {

// The releases the exports are written for (their flag and key lists: data/reference/*-args).
inline constexpr const char* kMegatronRelease = "Megatron-LM core_v0.19.0";
inline constexpr const char* kDeepSpeedRelease = "DeepSpeed v0.19.5";
inline constexpr const char* kMegatronDeepSpeedRelease = "Megatron-DeepSpeed main at 4efb479 (2025-07-16)";
// The last torchtitan release that reads TOML job files; its main branch replaced them with Python
// config modules.
inline constexpr const char* kTorchtitanRelease = "torchtitan v0.2.2";

struct MegatronArgs {
  std::vector<std::string> lines;   // "--tensor-model-parallel-size 4", "--sequence-parallel", ...
  std::vector<std::string> notes;   // the release they are for first, then what the flags leave to
                                    // the user (environment, tokenizer, data, ...)
  std::string text() const;         // the lines joined with '\n', ending with '\n'
};

// Megatron-LM (kMegatronRelease) flags for plan p (which must pass validate()). Expressible: one
// layer strategy (up to full recompute of the first k layers of every stage, Megatron's "block"
// method), equal stages or, without interleaving, different first / last stages; ZeRO 0 or 1
// (--use-distributed-optimizer), 2 or 3 (Megatron-FSDP, with the fsdp_dtensor checkpoint format it
// requires); Ulysses and ring context parallelism through --context-parallel-size and
// --cp-comm-type; the embedding on the layers' tensor-parallel degree; one decoder or encoder layer
// shape (MoE and dense layers may mix; MoE layers with the all-to-all token dispatcher and grouped
// GEMM the cost model assumes); --rotary-base from the model's rope_theta.
Result<MegatronArgs> megatron_args(const Plan& p);

enum class DeepSpeedTarget {
  kDeepSpeed,          // plain DeepSpeed: data parallel + ZeRO only
  kMegatronDeepSpeed,  // Megatron-DeepSpeed: tp / pp / Ulysses from its flags, ZeRO <= 1 with pp > 1
};

struct DeepSpeedConfig {
  Json config;
  std::vector<std::string> notes;   // the release it is for first (kDeepSpeedRelease, and
                                    // kMegatronDeepSpeedRelease for its flags), then what it leaves
};

// DeepSpeed config for plan p: train_batch_size, train_micro_batch_size_per_gpu,
// gradient_accumulation_steps, zero_optimization.stage, bf16 / fp16, activation_checkpointing.
// For Megatron-DeepSpeed a note names the flags that give it the parallel degrees and the config.
Result<DeepSpeedConfig> deepspeed_config(const Plan& p, DeepSpeedTarget target = DeepSpeedTarget::kDeepSpeed);

struct TorchtitanConfig {
  std::string toml;                 // a comment naming the release, then the [training],
                                    // [parallelism] and [activation_checkpoint] tables
  std::vector<std::string> notes;   // the release first, then what the tables leave to the user
};

// torchtitan (kTorchtitanRelease) job-config tables for plan p (TOML keys: training.local_batch_size /
// global_batch_size / seq_len / mixed_precision_param, parallelism.data_parallel_replicate_degree /
// data_parallel_shard_degree / fsdp_reshard_after_forward / tensor_parallel_degree /
// context_parallel_degree / expert_parallel_degree / pipeline_parallel_degree /
// pipeline_parallel_schedule / pipeline_parallel_microbatch_size / pipeline_parallel_layers_per_stage
// (+ first/last_stage_less_layers = 0), activation_checkpoint.mode /
// selective_ac_option). Expressible: one layer strategy (the expert degree on the MoE layers);
// ZeRO 2 (FSDP2 without resharding after forward) or 3 (FSDP2); tensor parallelism with sequence
// parallelism; no Ulysses; embedding on the layers' tp and ZeRO stage; bf16, fp8 (bf16 tables and a
// note on the Float8 converter) or fp32. Other plans are refused naming what differs.
Result<TorchtitanConfig> torchtitan_config(const Plan& p);

// What to hand framework f (weft/cost/framework.h) to run plan p, e.g. a plan searched for it
// (restrict_to_framework): megatron: the Megatron-LM flags (megatron_args, MegatronArgs::text);
// megatron-deepspeed: the DeepSpeed config for Megatron-DeepSpeed (deepspeed_config with
// kMegatronDeepSpeed, JSON); torchtitan and torchtitan-compile: the job-config tables
// (torchtitan_config; for torchtitan-compile also a [compile] table with enable = true). Errors:
// those functions' refusals.
struct FrameworkExport {
  std::string text;                 // the flags, config or tables, ending with '\n'
  std::vector<std::string> notes;   // what they leave to the user
};
Result<FrameworkExport> framework_export(const Plan& p, Framework f);

// "layers 0-11: tp4+sp dp2 z1; layers 12-23: tp2 dp4" (runs of equal strategies, at most
// max_runs of them, then "... and N more runs"). Used in the refusals above.
std::string describe_layer_runs(const Plan& p, int max_runs = 6);

}  // namespace weft
