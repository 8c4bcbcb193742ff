// Memory formulas of the analytic cost model (docs/cost-model.md §5): model states per parameter,
// saved activations per layer and micro-batch, micro-batches in flight per pipeline schedule.
// Pure functions; thread-safe.
#pragma once

#include <vector>

#include "weft/core/units.h"
#include "weft/plan/plan.h"
#include "weft/plan/strategy.h"
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

// The same after ZeRO stage `zero` over `shard` ranks: stage >= 1 divides the optimizer states,
// >= 2 also the gradients, 3 also the weights.
StateBytes sharded_state_bytes(DType dtype, int zero, int shard);

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
  // Selective recompute keeps the output of every other matmul and of the attention kernel
  // (torchtitan's op-level policy) instead of dropping the attention core.
  bool alternate_matmuls = false;
  // FP8 training (Transformer Engine): the linear layers save their fp8-quantized inputs (1 byte per
  // element) for the weight gradient instead of 16-bit ones; the attention kernel's own output stays
  // 16-bit beside the output projection's fp8 input.
  bool fp8_gemm_inputs = false;
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

// Micro-batches whose activations a device group holds at its peak:
//   GPipe: m; 1F1B: min(m, pp - group); interleaved with v chunks: Megatron-LM's warm-up depth
//   min(m*v, 2*(pp - group - 1) + (v - 1)*pp + 1) chunk-micro-batches, spread over its v chunks,
//   so this returns that count / v per chunk (Narayanan et al. 2021, section 2.2.2).
double micro_batches_in_flight(const TrainSettings& t, int stage);

}  // namespace weft
