// weft's own analytic cost model (docs/cost-model.md has every formula and constant with its source).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/cost/collectives.h"
#include "weft/cost/compute.h"
#include "weft/cost/cost_model.h"
#include "weft/cost/framework.h"
#include "weft/cost/memory.h"

namespace weft {

// Measured figures that replace analytic ones where present (issue: profiler). Empty by default.
struct CalibrationTables;  // defined in weft/cost/calibration.h

// What recompute "selective" re-runs in backward (docs/cost-model.md §2.4).
enum class SelectivePolicy {
  kAttentionCore,     // Megatron-LM (Korthikanti et al. 2022): the attention core only
  kAlternateMatmuls,  // torchtitan's op-level selective checkpointing: keeps the output of every
                      // other matmul and of the attention kernel, re-runs the rest of the layer
};

struct AnalyticOptions {
  // Fraction of compute slowed by overlapped communication (1.0 = none). Default from Galvatron's
  // measured A100 overlap coefficient (1.1256; reference/galvatron/overlap_coefficient.json).
  double overlap_slowdown = 1.1256;
  bool flash_attention = true;      // activations without the s^2 score matrix
  // Which fused attention kernel runs it (§2.2): Transformer Engine's cuDNN attention for Megatron on
  // Hopper (and for weft's runtime, costed as Megatron), FlashAttention-2 for PyTorch SDPA
  // (torchtitan); Ampere runs FlashAttention-2.
  AttentionKernel attention_kernel = AttentionKernel::kCudnn;
  bool overlap_grad_sync = true;    // DP / ZeRO gradient traffic overlaps backward
  // Memory outside the costed tensors (docs/cost-model.md §5.4). runtime_overhead_gib > 0 (a
  // hardware profile's measured resident overhead, process groups included) replaces the documented
  // process reserve (CUDA context + GEMM workspaces) and the NCCL buffers of the plan's
  // communicators; 0 = those documented figures.
  double runtime_overhead_gib = 0;
  // What the user keeps free beyond the reserves (`--memory-margin`; default 2.5% of the device).
  MemoryMargin memory_margin;
  // Host (CPU) time of an eager framework launching each layer's operators; a layer phase costs
  // max(GPU time, host time) (docs/cost-model.md §4). Off: GPU time only.
  bool framework_overhead = true;
  // Host time per eager operator and per Python autograd Function (docs/cost-model.md §4): the
  // defaults are documented measurements; a framework or CPU known to be slower or faster (for
  // instance from a measured profile) sets its own.
  double host_op_us = 7.0;
  double host_function_us = 20.0;
  // In-training GPU kernel time / the kernel model's isolated best case. The default, 1.154, is
  // Galvatron's measured A100 Llama-2-7B layer forward (bf16, flash attention, seq 2048, batch 8
  // and 12; reference/galvatron computation profile) over the kernel model's time for the same
  // layer (docs/cost-model.md §2.5). Calibration from measured runs may set another.
  double compute_time_scale = 1.154;
  // The optimizer step's time over the kernel model's (its Adam kernels read and write the
  // parameters, gradients and moments once: HBM-bound, docs/cost-model.md §6). 0: compute_time_scale.
  // A profile that measures the optimizer apart from the layers sets its own: software whose
  // layers run far below the kernel model (a profile's compute scale of several) may still run a
  // fused optimizer near the HBM rate.
  double optimizer_time_scale = 0;
  // Elementwise kernels fused (Megatron's and Transformer Engine's fused norm, activation and
  // rotary kernels, or torch.compile) or run as the eager PyTorch operators of a plain
  // implementation (one kernel per operator, fp32 norm and rotary math; docs/cost-model.md §2.3).
  bool fused_elementwise = true;
  // With fused_elementwise off: the eager RMSNorm and rotary embedding upcast to fp32 (Llama's
  // reference layers as torchtitan runs them) or run as plain operators in the compute dtype (weft's
  // runtime: x * rsqrt(mean(x^2) + eps) * w and rotate-half rotary; docs/cost-model.md §2.3); and
  // whether the attention output is copied out of the heads-first layout (transpose().contiguous())
  // or read in place (weft's runtime: PyTorch's fused attention writes it tokens-first).
  bool eager_fp32_math = true;
  bool eager_attention_copy = true;
  // Layers with biases (GPT-2/3, BERT) train with dropout on the attention probabilities and on each
  // block's output, as Megatron-LM's and the models' own configurations do; weft's runtime has none.
  bool dropout = true;
  // The weight-gradient GEMMs accumulate into the gradient buffer (Megatron's
  // gradient_accumulation_fusion), or each micro-batch's weight gradients are added into it by a
  // kernel of their own (PyTorch's AccumulateGrad, as in weft's runtime: 3 e bytes per parameter per
  // backward; docs/cost-model.md §2.3).
  bool fused_grad_accumulation = true;
  // Megatron-SP's column-parallel linears keep their input's sequence shard and all-gather it again
  // in backward (Megatron-LM), or keep the gathered input (weft's runtime; ActivationOptions::
  // sp_gathered_inputs).
  bool sp_regather_inputs = true;
  // Price one layer's backward working set (layer_backward_transient_bytes) as a transient: weft's
  // runtime, whose allocations were traced to it; the other frameworks' figures are held against
  // their published memory (data/reference) without it.
  bool backward_transient = false;
  // The loss over an fp32 copy of the logits as Megatron's and PyTorch's cross entropy run it, or
  // weft's runtime's own eager one (§2.3: in fp32, after a cast of the logits when the compute
  // dtype is narrower).
  bool loss_in_fp32 = true;
  // The caching allocator's reserve over what the step allocates and frees again (§5.4): peaks are
  // reserved bytes. 0 gives the allocated bytes (what torch.cuda.max_memory_allocated() reads).
  double allocator_fragmentation = kAllocatorFragmentation;
  // Loss: Megatron's vocab-parallel cross entropy, in place on one fp32 copy of the logits; or
  // PyTorch's F.cross_entropy on an fp32 copy (torchtitan), which holds three fp32 tensors per
  // logit at its peak (docs/cost-model.md §5.3).
  bool vocab_parallel_loss = true;
  // A MoE layer's local experts run as one grouped GEMM per projection (Megatron-LM's
  // --moe-grouped-gemm, torchtitan's torch._grouped_mm), or as a loop of one GEMM and one set of
  // elementwise operators per expert (weft's runtime on libtorch without a grouped GEMM): each
  // expert's GEMMs then fill the GPU on their own rows, and the host issues every expert's
  // operators (docs/cost-model.md §2.1, §4).
  bool moe_grouped_gemm = true;
  SelectivePolicy selective = SelectivePolicy::kAttentionCore;
  Framework framework = Framework::kMegatron;  // the preset these options came from (framework_options)
  CollectiveOptions comm;           // collective call latency and link efficiencies
};

// The training frameworks weft knows (weft/cost/framework.h), each a set of the options above
// (docs/cost-model.md §4.1):
//   megatron            Megatron-LM / Megatron-Core: fused kernels, flash attention, gradient
//                       reduction overlapped with backward, selective = attention core (default)
//   megatron-deepspeed  Megatron-DeepSpeed as vTrain measured it: fused softmax attention without
//                       flash, gradients all-reduced after the backward (no bucketing)
//   torchtitan          eager PyTorch with FSDP2: unfused norm, rotary and SwiGLU operators, SDPA
//                       flash attention, selective = op-level (every other matmul kept)
//   torchtitan-compile  torchtitan with torch.compile: the same with fused elementwise kernels
// `base` with the traits of framework `f` (its host and GPU constants are kept), `framework` set
// to its name.
AnalyticOptions framework_options(Framework f, AnalyticOptions base = {});
// The same for the framework named `name`; the error of framework_from_string() if it names none.
Result<AnalyticOptions> framework_options(const std::string& name, AnalyticOptions base = {});

class AnalyticCostModel : public CostModel {
 public:
  explicit AnalyticCostModel(AnalyticOptions opt = {});
  ~AnalyticCostModel() override;
  std::string name() const override { return "weft"; }
  std::string source() const override;

  LayerCost layer(const LayerContext& ctx, const LayerStrategy& s) const override;
  LayerCost stage_extra(const StageContext& ctx, const LayerStrategy& emb) const override;
  Seconds transition(const LayerContext& ctx, const LayerStrategy& a, const LayerStrategy& b) const override;
  Seconds p2p(const StageContext& ctx, const LayerStrategy& s) const override;
  StepCost step(const TrainSettings& train, const std::vector<StageSums>& stages) const override;
  // memory_budget(c, options().memory_margin, options().runtime_overhead_gib).budget (weft/cost/memory.h).
  Bytes memory_budget(const ClusterSpec& c) const override;
  // overlap_grad_sync and overlap_slowdown of the options.
  ScheduleTraits schedule_traits() const override;
  double recompute_flops(const LayerShape& s, Recompute r, double batch, double seq) const override;

  const AnalyticOptions& options() const { return opt_; }

 private:
  AnalyticOptions opt_;
};

}  // namespace weft
