// DeepSpeed configs, plain or for Megatron-DeepSpeed (rules in weft/report/export.h and
// docs/report.md). Keys are those of kDeepSpeedRelease (data/reference/deepspeed-args), the flags
// named for Megatron-DeepSpeed those of kMegatronDeepSpeedRelease
// (data/reference/megatron-deepspeed-args).
#include "export_common.h"
#include "weft/core/format.h"

namespace weft::export_detail {

namespace {

const char* kDs = "deepspeed";
constexpr Framework kMds = Framework::kMegatronDeepSpeed;

// A refusal of a plan a Megatron-DeepSpeed search avoids; for plain DeepSpeed the hint says to
// export for Megatron-DeepSpeed as well.
[[noreturn]] void refuse_ds_plan(bool plain, const std::string& msg) {
  refuse(kDs, msg + "; `weft plan --framework " + to_string(kMds) + "` gives a plan that `weft export deepspeed" +
                  (plain ? " --megatron-deepspeed" : "") + "` takes");
}

}  // namespace

DeepSpeedConfig deepspeed_or_throw(const Plan& p, DeepSpeedTarget target) {
  require_valid(p);
  DeepSpeedConfig r;
  const bool plain = target == DeepSpeedTarget::kDeepSpeed;
  r.notes.push_back(std::string("written for ") + kDeepSpeedRelease +
                    (plain ? "" : std::string(" and ") + kMegatronDeepSpeedRelease) +
                    " (their keys and flags: data/reference/deepspeed-args" +
                    (plain ? "" : ", data/reference/megatron-deepspeed-args") + ")");
  if (p.train.rounds > 1 && p.train.pp > 1)
    refuse_ds_plan(plain, "train.rounds=" + S(p.train.rounds) + ": DeepSpeed's pipeline engine runs all " +
                              S(p.train.micro_batches) + " micro-batches of a step in one schedule");
  if (p.train.moe_dispatcher != MoeDispatcher::kAllToAll || p.train.moe_a2a_overlap)
    refuse_ds_plan(plain, p.train.moe_a2a_overlap ? "train.moe_a2a_overlap: DeepSpeed's MoE does not overlap its "
                                                    "expert all-to-all with another micro-batch's compute"
                                                  : std::string("train.moe_dispatcher=") + to_string(p.train.moe_dispatcher) +
                                                        ": DeepSpeed's MoE dispatches by all-to-all");
  if (p.train.optimizer.precision_aware())
    refuse_ds_plan(plain, "train.optimizer: DeepSpeed's mixed-precision optimizers keep fp32 moments and gradients "
                          "(Megatron-LM's precision-aware optimizer has no DeepSpeed counterpart)");
  {
    auto rs = runs(p, [](const LayerStrategy& s) { return s; });
    if (rs.size() > 1)
      refuse_ds_plan(plain, "a DeepSpeed config applies one strategy to every layer, but this plan is layer-wise: " +
                                describe(rs, 6));
  }
  const LayerStrategy s = p.layer_strategy(0);
  if (plain) {
    std::string what;
    auto add = [&](bool cond, const std::string& x) {
      if (cond) what += (what.empty() ? "" : ", ") + x;
    };
    add(s.tp > 1, "tp=" + S(s.tp));
    add(p.train.pp > 1, "pp=" + S(p.train.pp));
    add(s.ulysses > 1, "ulysses=" + S(s.ulysses));
    add(s.cp > 1, "cp=" + S(s.cp));
    add(s.ep > 1, "ep=" + S(s.ep));
    if (!what.empty())
      refuse(kDs, "a plain DeepSpeed config expresses data parallelism and ZeRO only, but this plan uses " + what +
                      "; Megatron-DeepSpeed takes tensor, pipeline and Ulysses degrees from its own flags "
                      "(export with --megatron-deepspeed, and see weft export megatron)");
  } else {
    if (p.train.schedule == Schedule::kZbH1 && p.train.pp > 1)
      refuse_ds_plan(plain, "train.schedule=zb-h1 (pp=" + S(p.train.pp) +
                                "): Megatron-DeepSpeed's pipeline engine runs 1F1B only, no zero-bubble schedule");
    if (p.train.schedule == Schedule::kZbV)
      refuse_ds_plan(plain, "train.schedule=zb-v (pp=" + S(p.train.pp) +
                                "): Megatron-DeepSpeed's pipeline engine runs 1F1B only, one stage per rank, no "
                                "zero-bubble schedule");
    if (s.cp > 1)
      refuse_ds_plan(plain, "cp=" + S(s.cp) + ": ring context parallelism is not expressible for Megatron-DeepSpeed");
    if (s.ep > 1)
      refuse_ds_plan(plain, "ep=" + S(s.ep) + ": DeepSpeed-MoE sets the expert-parallel size in the model code, not "
                            "the config");
    if (s.expert_tp() != s.tp)
      refuse_ds_plan(plain, "etp=" + S(s.expert_tp()) + ": DeepSpeed-MoE's experts follow the tensor degree (tp=" +
                                S(s.tp) + ")");
    if (s.ulysses > 1 && s.sp)
      refuse_ds_plan(plain, "ulysses=" + S(s.ulysses) + " with Megatron sequence parallelism (sp): "
                            "Megatron-DeepSpeed's --ds-sequence-parallel-size cannot be combined with "
                            "--sequence-parallel");
    // deepspeed/runtime/pipe/engine.py: "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism".
    if (p.train.pp > 1 && s.zero >= 2)
      refuse_ds_plan(plain, "zero=" + S(s.zero) + " with pp=" + S(p.train.pp) +
                                ": DeepSpeed's pipeline engine supports ZeRO stage 0 or 1 only");
  }
  if (p.embedding.zero != s.zero)
    refuse_ds_plan(plain, "embedding.zero=" + S(p.embedding.zero) + " but the layers use zero=" + S(s.zero) +
                              "; DeepSpeed applies one ZeRO stage to all parameters");
  if (s.recompute == Recompute::kSelective && plain)
    refuse(kDs, "selective recompute has no DeepSpeed config setting (it is a model-code choice; "
                "Megatron-DeepSpeed: --recompute-granularity selective)");

  // DeepSpeedConfig._batch_assertion: train_batch_size = micro batch x accumulation x data-parallel
  // ranks.
  Json c;
  c["train_batch_size"] = p.train.global_batch;
  c["train_micro_batch_size_per_gpu"] = p.train.pipeline_micro_batch() / s.dp;
  c["gradient_accumulation_steps"] = p.train.micro_batches;
  Json zero{{"stage", s.zero}};
  if (s.zero > 0) zero["overlap_comm"] = true;
  c["zero_optimization"] = zero;
  switch (p.train.dtype) {
    case DType::kBf16: c["bf16"] = {{"enabled", true}}; break;
    case DType::kFp16: c["fp16"] = {{"enabled", true}, {"loss_scale", 0}}; break;
    case DType::kFp8:
      c["bf16"] = {{"enabled", true}};
      r.notes.push_back("fp8 GEMMs come from Transformer Engine in the model code; the config sets bf16");
      break;
    case DType::kFp32:
    case DType::kTf32: break;
  }
  if (s.recompute == Recompute::kFull) {
    c["activation_checkpointing"] = {{"partition_activations", !plain && s.tp > 1},
                                     {"cpu_checkpointing", false},
                                     {"contiguous_memory_optimization", false},
                                     {"synchronize_checkpoint_boundary", false},
                                     {"profile", false}};
    r.notes.push_back("activation_checkpointing takes effect where the model calls "
                      "deepspeed.checkpointing.checkpoint on each layer");
  }
  if (s.recompute == Recompute::kSelective)
    r.notes.push_back("selective recompute: pass --recompute-granularity selective to Megatron-DeepSpeed");
  if (!plain) {
    std::string flags = "--deepspeed --deepspeed_config <this file> --tensor-model-parallel-size " + S(s.tp) +
                        " --pipeline-model-parallel-size " + S(p.train.pp);
    if (s.ulysses > 1) flags += " --ds-sequence-parallel-size " + S(s.ulysses);
    if (s.sp) flags += " --sequence-parallel";
    if (p.train.pp == 1) flags += " --no-pipeline-parallel";
    r.notes.push_back("Megatron-DeepSpeed flags for the parallel degrees: " + flags);
  }
  r.config = std::move(c);
  return r;
}

}  // namespace weft::export_detail
