// Memory formulas of the analytic cost model (docs/cost-model.md §5): model states per parameter,
// the buffers ZeRO / FSDP hold in full while a layer runs, saved activations per layer and
// micro-batch, micro-batches in flight per pipeline schedule, and the device memory outside the
// costed tensors (reserves, margin, budget). Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/units.h"
#include "weft/plan/plan.h"
#include "weft/plan/strategy.h"
#include "weft/spec/cluster.h"
#include "weft/spec/model.h"

namespace weft {

// Bytes per parameter of mixed-precision Adam before ZeRO sharding.
//   weights   the compute-dtype copy (2 bytes; 4 for fp32/tf32 training)
//   grads     the gradient buffer the data-parallel reduction runs on: fp32 main gradients for bf16
//             and fp8 (Megatron-LM turns on accumulate_allreduce_grads_in_fp32 with bf16), the
//             parameter dtype for fp16 (Megatron-LM's default) and fp32
//   optimizer fp32 master weights + Adam first and second moments: 4 + 4 + 4 = 12 (for fp32
//             training the master copy is the weights themselves: 8)
// So bf16: 2 + 4 + 12 = 18, fp16: 2 + 2 + 12 = 16 (Rajbhandari et al. 2020 count 2 + 2 + 12).
struct StateBytes {
  double weights = 0, grads = 0, optimizer = 0;
};
StateBytes state_bytes_per_param(DType dtype);
// The same with the optimizer precision of the plan (Megatron-LM's precision-aware optimizer,
// plan.h OptimizerPrecision): the moments in their dtypes (fp8 one byte, 16-bit two), the main
// gradients in bf16 where it says so; the fp32 master stays. bf16 with both moments bf16:
// 2 + 4 + (4 + 2 + 2) = 14.
StateBytes state_bytes_per_param(DType dtype, const OptimizerPrecision& o);
// Bytes per parameter Adam's step reads and writes of its own state: the fp32 master and both
// moments, each read and written (24 with fp32 moments, 16 with bf16 ones).
double adam_state_traffic_bytes(const OptimizerPrecision& o);

// Where a framework keeps the fp32 master weights under ZeRO >= 2 (docs/cost-model.md §5.1).
enum class MasterWeights {
  // Megatron's distributed optimizer, Megatron-FSDP, DeepSpeed: the optimizer owns an fp32 master
  // beside the model's compute-dtype weights (sharded too under ZeRO-3).
  kInOptimizer,
  // PyTorch FSDP (FSDP2's fully_shard, as torchtitan runs it, and FSDP1) with a low-precision
  // param_dtype: the sharded fp32 parameters are the master and the optimizer steps on them; the
  // compute-dtype copy exists only unsharded, for the layers that run (PyTorch's
  // MixedPrecisionPolicy: "FSDP does not require any extra memory to keep a high-precision copy of
  // the parameters for the optimizer step"). Their gradients are fp32 too.
  kShardedParams,
  // weft's runtime (`weft train --precision bf16`): the fp32 parameters are the master and the
  // optimizer steps on them; the compute-dtype cast of them is made once per step beside them
  // (ZeRO < 3) or gathered per layer (ZeRO-3); fp32 gradients. ZeRO-1 shards the AdamW moments,
  // ZeRO-2 also the gradients, ZeRO-3 also the parameters: 18 bytes per parameter unsharded (4 + 2
  // + 4 + 8), 10 + 8 / shard at ZeRO-1, 16 / shard at ZeRO-3.
  kFp32Params,
};

// The same after ZeRO stage `zero` over `shard` ranks: stage >= 1 divides the optimizer states,
// >= 2 also the gradients, 3 also the weights. With MasterWeights::kShardedParams and stage >= 2
// the weights are the fp32 sharded parameters (4 / shard; ZeRO-2 adds the compute-dtype copy FSDP
// keeps unsharded from forward to backward), the gradients fp32 / shard and the optimizer Adam's
// two moments (8 / shard): 16 / shard at ZeRO-3 where a separate master counts 18 / shard.
// `o`: the plan's optimizer precision (moments and main gradients; default all fp32).
StateBytes sharded_state_bytes(DType dtype, int zero, int shard, MasterWeights master = MasterWeights::kInOptimizer,
                               const OptimizerPrecision& o = {});

// Bytes per local parameter of one layer that ZeRO holds in full while the layer runs, counted once
// per device (docs/cost-model.md §5.1): under stage >= 2 the layer's unsharded gradient before its
// reduce-scatter (in the gradient dtype of state_bytes_per_param), under stage 3 also the gathered
// compute-dtype weights of the layer that runs and of the next one, prefetched. PyTorch FSDP's
// BackwardPrefetch.BACKWARD_PRE: "at the peak, it holds the current set of parameters, next set of
// parameters, and current set of gradients in memory"; its limit_all_gathers (FSDP1) and FSDP2's
// reshard_after_forward free a layer's gathered weights after its forward and gather them again in
// backward, so no more layers are held. bf16: 2*2 + 4 = 8 (ZeRO-3), 4 (ZeRO-2); 0 below.
double zero_buffer_bytes_per_param(DType dtype, int zero);

// --- Device memory outside the costed tensors (docs/cost-model.md §5.4) -----------------------

// The CUDA context with the kernels a training process loads (cuBLAS, cuDNN, NCCL, attention
// kernels), per device: Galvatron's measured A100 `pytorch_context_mem`, 1024 MiB
// (reference/galvatron memory profile); PyTorch's context alone is 274 MiB with CUDA's lazy module
// loading and 636 MiB without (pytorch/pytorch#86509), the rest are the kernels training loads.
constexpr double kCudaContextMib = 1024;
// cuBLAS and cuBLASLt workspaces PyTorch keeps for the compute stream: 32 MiB each on Hopper
// (CUBLAS_WORKSPACE_CONFIG=:4096:8, CUBLASLT_WORKSPACE_SIZE 32768 KiB, pytorch/pytorch#120925 after
// the cuBLAS guide's recommendation for Hopper); Ampere's defaults are smaller (:4096:2:16:8 =
// 8.125 MiB and 4 MiB), so Hopper's figure covers both.
constexpr double kGemmWorkspaceMib = 64;
// NCCL's buffers per communicator on one device: for each channel and each of two connections (a
// ring has two whatever the scale, NVIDIA/nccl#864), one FIFO per protocol: Simple
// NCCL_BUFFSIZE = 4 MiB, LL128 120*640*8*8 = 4.6875 MiB and LL 8*512*8*16 = 0.5 MiB (src/init.cc,
// DEFAULT_BUFFSIZE, DEFAULT_LL128_BUFFSIZE, DEFAULT_LL_BUFFSIZE; each channel has its own,
// NVIDIA/nccl#1450), over 32 channels: 32 * 2 * 9.1875 = 588 MiB. NVIDIA/nccl#964 measured 544 MB
// for a 2-rank and 688 MB for a 4-rank all-reduce communicator on A100 with PyTorch.
constexpr double kNcclChannels = 32;
constexpr double kNcclConnectionsPerChannel = 2;
constexpr double kNcclFifoMibPerConnection = 4.0 + 4.6875 + 0.5;
// The caching allocator's fragmentation: memory it holds that no tensor uses, as a fraction of the
// memory allocated and freed again within a step (activations, the loss's logits, ZeRO's gathered
// buffers, and FSDP's gradients, which each step's reduce-scatters allocate): 0.10, booked in the
// peak (MemoryBreakdown::other) beside what it is a share of. Buffers allocated once (Megatron's
// contiguous weight and gradient buffers, the optimizer states, FSDP's sharded parameters) keep
// their place. torchtitan's Llama 3.1 8B on H100 (benchmarks/llama3_h100_202412_torchtitan.md,
// tables 1 and 3, FSDP over 8 and 128 GPUs, the same activations) reads 82.4 and 67.0 GiB reserved,
// 15.4 GiB apart, where the FSDP states differ by 16 * 8.03e9 * (1/8 - 1/128) = 14.0 GiB: the
// allocator reserves 1.10 bytes per byte it hands out; with this fraction weft's peaks come within
// 5 % below both readings (tests/cost/memory_reserves_test.cc). GMLake (Guo et al., ASPLOS 2024)
// measures 15 % of the reserved memory fragmented on average, up to 33 %, for eight LLMs
// fine-tuned on A100 with recompute, offloading and LoRA.
constexpr double kAllocatorFragmentation = 0.10;

// Communicators NCCL builds on one device of a plan whose devices are laid out as strategy s, in
// a pipeline of pp stages: the world (PyTorch's default group: barriers, the loss and the gradient
// norm), the tensor-parallel group, the data-parallel / ZeRO group (dp*ulysses*cp ranks), the
// Ulysses and context-parallel groups, the expert-parallel group and its expert data-parallel
// group, the pipeline group, and the embedding group that sums tied embeddings split over the first
// and last stage; each only with more than one rank (PyTorch creates a group's communicator at its
// first collective).
int nccl_communicators(const LayerStrategy& s, int pp, bool tied_embeddings);
// NCCL's buffers of one communicator on one device (the constants above): 588 MiB.
Bytes nccl_communicator_bytes();

// The memory a user keeps free beyond the modelled reserves (`--memory-margin`): a share of the
// device's memory ("10%") or an amount ("4GiB"). The default is kDefaultMemoryMarginPercent.
constexpr double kDefaultMemoryMarginPercent = 2.5;
struct MemoryMargin {
  bool percent = true;  // value is a percentage of the device memory; else GiB
  double value = kDefaultMemoryMarginPercent;
  Bytes of(Bytes device) const;
  bool operator==(const MemoryMargin&) const = default;
};
// "10%", "4GiB", "4 GiB", "4GB" (GB = 2^30 bytes, as --memory-gb counts), "512MiB", "0". Errors
// name --memory-margin and the text: a number without a unit, a negative amount, a percentage of
// 90 or more.
Result<MemoryMargin> parse_memory_margin(const std::string& text);
std::string to_string(const MemoryMargin& m);  // "2.5%", "4 GiB"

// How a device's memory splits (docs/cost-model.md §5.4):
//   device = process + margin + budget
// process: the CUDA context and the GEMM workspaces (kCudaContextMib + kGemmWorkspaceMib), or a
// measured runtime overhead (a hardware profile's runtime_overhead_gib) in their place; margin: the
// user's; budget: what a plan's peak may reach, the peak holding the costed tensors, NCCL's buffers
// and the allocator's fragmentation (at least 0).
struct MemoryBudget {
  Bytes device, process, margin, budget;
};
// process_gib > 0 replaces the documented process reserve.
MemoryBudget memory_budget(const ClusterSpec& c, const MemoryMargin& margin, double process_gib = 0);

// What one layer saves for backward, per micro-batch, on one device.
struct ActivationOptions {
  double samples = 1;          // samples of the micro-batch on this device (micro-batch / dp)
  double seq = 0;              // sequence length
  double elem_bytes = 2;       // bytes of a stored activation element
  bool flash_attention = true; // no s x s score/probability tensors are stored
  bool dropout = false;        // dropout masks (1 byte per element) on attention probs and outputs
  // Eager elementwise operators (AnalyticOptions::fused_elementwise off): an RMSNorm saves its fp32
  // input copy, SwiGLU its SiLU output, and the attention kernel its heads-first output (the output
  // projection saves its own contiguous copy) and K and V repeated to every query head (GQA).
  bool eager_elementwise = false;
  bool rms_norm = false;
  // What an eager RMSNorm saves besides its input, per element: its fp32 input copy (4 bytes,
  // torchtitan) or x * rsqrt(...) in the compute dtype (elem_bytes, weft's runtime); and whether the
  // attention kernel's heads-first output is kept besides the output projection's copy of it.
  double eager_norm_bytes = 4;
  bool eager_attention_copy = true;
  // Selective recompute keeps the output of every other matmul and of the attention kernel
  // (torchtitan's op-level policy) instead of dropping the attention core.
  bool alternate_matmuls = false;
  // FP8 training (Transformer Engine): the linear layers save their fp8-quantized inputs (1 byte per
  // element) for the weight gradient instead of 16-bit ones; the attention kernel's own output stays
  // 16-bit beside the output projection's fp8 input.
  bool fp8_gemm_inputs = false;
  // Under Megatron-SP the column-parallel linears (QKV, FC1) save the all-gathered input for their
  // weight gradient (weft's runtime) instead of the sequence shard Megatron keeps and gathers again
  // in backward (Korthikanti et al. 2022, section 4.2.2).
  bool sp_gathered_inputs = false;
  // A MoE layer's routed copies on this device over the even share: the busiest expert-parallel
  // rank's under uneven routing (TrainSettings::busiest_expert_rank), whose memory is the peak.
  double expert_rows = 1;
};

// One matmul of a layer's forward on one device, per token: n output and k reduction elements.
struct LayerMatmul {
  double n = 0, k = 0;
};
// The layer's matmuls in forward order as a plain implementation issues them: per attention block
// wq, wk, wv (column-parallel, / tp) and wo (row-parallel), then the FFN's w1 (and w3 for SwiGLU)
// and w2. A MoE FFN is listed as one FFN of top_k routed plus the shared expert widths.
std::vector<LayerMatmul> layer_matmuls(const LayerShape& s, double tp);

// Saved activation bytes of one layer under strategy st (Korthikanti et al. 2022, generalised per
// tensor to GQA, SwiGLU, MoE, Ulysses and context parallelism; formula in docs/cost-model.md §5).
// Without flash attention, with dropout, MHA, a GELU FFN of 4h and e = 2 this is
//   s*b*h*(34 + 5*a*s/h)                       (no parallelism)
//   s*b*h*(10 + 24/t + 5*a*s/(h*t))            (tensor parallel t)
//   s*b*h*(34 + 5*a*s/h) / t                   (tensor + sequence parallel)
// selective recompute drops the attention-core tensors (the 5as/h term), full recompute keeps
// only the layer input (2sbh, /t with sequence parallelism).
Bytes layer_activation_bytes(const LayerShape& s, const LayerStrategy& st, const ActivationOptions& o);

// What ring attention (cp > 1) allocates at once in one layer's backward, beyond what the layer
// keeps: the keys and values of the share it works on with their gradient sums, the copy of all
// four arriving from the previous rank, the query gradient, and, without flash attention, the
// score, probability and gradient blocks of one pair of chunks; 0 for cp 1. In fp32 (weft's
// ring, runtime/ops.cc).
Bytes ring_attention_transient_bytes(const LayerShape& s, const LayerStrategy& st, const ActivationOptions& o);

// What one layer's backward holds beyond the saved activations at its peak, the FFN's down
// projection's backward (where weft's runtime peaks, traced in its allocations): the gradient
// arriving at the layer's output (all-gathered under Megatron-SP, for the row-parallel
// projection), the gradient of the down projection's input and, with `weight_grad_copy` (weight
// gradients added into the gradient buffer by AccumulateGrad, not accumulated by the GEMM), the
// projection's weight gradient before it is added in. Once per device, a transient.
Bytes layer_backward_transient_bytes(const LayerShape& s, const LayerStrategy& st, const ActivationOptions& o,
                                     bool weight_grad_copy);

// Micro-batches whose activations a device group holds at its peak:
//   GPipe: m; 1F1B: min(m, pp - group); interleaved with v chunks: Megatron-LM's warm-up depth
//   min(m*v, 2*(pp - group - 1) + (v - 1)*pp + 1) chunk-micro-batches, spread over its v chunks,
//   so this returns that count / v per chunk (Narayanan et al. 2021, section 2.2.2); zb-v: at the end
//   of group g's warm-up min(m, 2 pp - 1 - g) on its chunk 0 (virtual stage g) and min(m, g + 1) on
//   its chunk 1 (virtual stage 2 pp - 1 - g): 2 pp chunk-micro-batches of half-size chunks for
//   m >= 2 pp - 1, pp micro-batches of a whole stage, as 1F1B's first group holds (Qi et al.,
//   ICLR'24, section 6: ZB-V's peak activation memory is 1F1B's).
double micro_batches_in_flight(const TrainSettings& t, int stage);

// What a zero-bubble schedule keeps of one layer for one micro-batch whose input-gradient pass (B)
// ran but whose weight-gradient pass (W) did not: the input of every linear layer and the gradient
// of its output, the two operands of dW = X^T dY (the M_W of Qi et al., "Zero Bubble Pipeline
// Parallelism", ICLR'24, section 3). Per token: the QKV projection's input (h) and output gradient
// ((q + 2kv)/t), the output projection's input (q/t) and output gradient (h), the FFN's input (h)
// and output gradients (gate and up: 2ff/t for SwiGLU, ff/t else), the down projection's input
// (ff/t) and output gradient (h); a MoE FFN counts its router (input h, gradient of the expert
// logits) and its experts over the routed token copies (top_k per token) plus the shared experts;
// each norm (before each attention block and the FFN) its input and output gradient (h each: weft's
// split backward defers the norms' scales too). Tensors of hidden width are split over the sequence by cp * ulysses (* tp with sequence
// parallelism), those of the heads or the FFN width by tp; elements of o.elem_bytes (the
// activation dtype; an fp8 run keeps these in 16 bits too, priced the same).
// With `with_inputs` false: the output gradients alone.
Bytes weight_grad_state_bytes(const LayerShape& s, const LayerStrategy& st, const ActivationOptions& o,
                              bool with_inputs = true);
// Whether a waiting W state counts the linears' inputs too (false under zb-v, whose W follows its
// B while the inputs are still counted as the micro-batch's activations).
bool weight_grad_inputs_held(const TrainSettings& t);

// Micro-batches whose W state (weight_grad_state_bytes) a device group holds at its peak besides
// micro_batches_in_flight: ZB-H1 defers the W of device group g by g micro-batches, so up to
// min(g, m - 1) of them wait; 0 on group 0. ZB-V runs each W right after its B in the steady state:
// one chunk-micro-batch's W state per group, 0.5 on each of its two chunks, of which only the
// output gradients are new (weight_grad_inputs_held false): the linears' inputs are that
// chunk-micro-batch's activations, still counted in flight. Not priced: ZB-V's cool-down, which
// runs the B passes of group g's last 2 g + 1 chunk-micro-batches before their W; it holds more
// than this only where a chunk-micro-batch's W state outweighs its activations (full recompute).
// 0 under every other schedule. (Measured on weft's runtime: RuntimeMemory.ZeroBubbleV* and
// RuntimeMemory.ZeroBubbleWeightGradientState*, tests/runtime/memory_test.cc.)
double pending_weight_grads(const TrainSettings& t, int stage);

}  // namespace weft
