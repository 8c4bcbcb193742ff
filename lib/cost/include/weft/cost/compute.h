// Kernel-level time model of one GPU (docs/cost-model.md §2): GEMMs with tile, wave and K-loop
// quantisation under a roofline, memory-bound kernels at the achievable HBM bandwidth.
//
// GEMM C[M,N] += A[M,K] B[K,N] (times `batch` for batched GEMMs). For each candidate thread-block
// tile (Tm x Tn) and split-K factor, the kernel runs ceil(M/Tm)*ceil(N/Tn)*batch*splitk tiles in
// waves of one tile per SM; each tile costs (ceil(K/splitk/32)*32 + K0) k-steps, K0 = 96 being the
// software-pipeline fill and the epilogue; small tiles pay for their lower operand reuse. The
// fastest candidate under max(compute, HBM traffic) is taken, as the library's heuristic would.
// The throughput of one fully used tile is set so that the model reproduces the measured maximum
// achievable matmul throughput (MAMF) of the GPU at the shape it was measured at.
//
// Pure value type; thread-safe; no allocation.
#pragma once

#include <string>

#include "weft/core/units.h"
#include "weft/spec/cluster.h"

namespace weft {

// Figures of a GPU that are not in GpuSpec, looked up by name (docs/cost-model.md §2 sources).
struct GpuTraits {
  int sms = 108;                 // streaming multiprocessors
  double mamf_fraction = 0.80;   // measured max achievable matmul TFLOP/s / dense peak
  double mamf_m = 8192, mamf_n = 8192, mamf_k = 8192;  // shape the MAMF was measured at
  bool measured = false;         // false: the defaults above (no published measurement)
  // The same for fp8 inputs (float8_e4m3fn), where measured; 0: the bf16 figures.
  double fp8_fraction = 0;
  double fp8_m = 0, fp8_n = 0, fp8_k = 0;
  // fp32 GEMMs (CUDA-core SGEMM: PyTorch's default fp32 matmul precision, no TF32), where
  // measured: the fraction of the fp32 peak sustained back to back at a shape. Sustained figures
  // are what training sees, so KernelModel does not apply compute_time_scale to them again. 0: the
  // bf16 figures.
  double fp32_fraction = 0;
  double fp32_m = 0, fp32_n = 0, fp32_k = 0;
  // Hopper or newer: runs FlashAttention-3 and cuDNN's fused attention (flash_attention_rates).
  bool hopper_or_newer = false;
};
GpuTraits gpu_traits(const GpuSpec& gpu);

// Fused (flash) attention kernels (docs/cost-model.md §2.2).
enum class AttentionKernel {
  kFlash1,  // FlashAttention (Dao et al. 2022): flash-attn 1.x, the kernel of 2022-23 training code
  kTritonFlash,  // the Triton FlashAttention of flash-attn 1.x (flash_attn_triton; llm-foundry's attn_impl: triton)
  kFlash2,  // FlashAttention-2 (Dao 2023): flash-attn 2.x, PyTorch SDPA's flash backend
  kCudnn,   // cuDNN's fused attention: Transformer Engine's FusedAttention on Hopper and newer
  kFlash3,  // FlashAttention-3 (Shah et al. 2024): Hopper only
};
const char* to_string(AttentionKernel k);

// Fraction of the GPU's 16-bit dense peak that kernel k sustains, forward and backward, at key
// length seq_k and head dimension head_dim; for a causal kernel the fraction is of the work
// counted halved (the masked tiles are skipped), as the FlashAttention papers count it. Hopper
// (and newer) from the measured curves of Shah et al. 2024 (Figs. 5-6, H100 SXM5); Ampere and older
// run FlashAttention-2 (FlashAttention-3 and cuDNN's fused attention need Hopper). FlashAttention
// (version 1) runs at FlashAttention-2's rates x 124 / 230 on any GPU: the two kernels' best A100
// throughputs (FlashAttention-2 release note, Dao 2023: "up to 124 TFLOPs/s" for FlashAttention,
// "up to 230 TFLOPs/s" for FlashAttention-2). The Triton FlashAttention runs at FlashAttention's
// rates x 2.35 / 1.9: FlashAttention-2 is "1.7-3.0x faster than FlashAttention, 1.3-2.5x faster
// than FlashAttention in Triton" (Dao 2023, abstract and Figs. 4-5), the ratio of the midpoints.
struct AttentionRates {
  double fwd = 0, bwd = 0;
};
AttentionRates flash_attention_rates(const GpuSpec& gpu, AttentionKernel k, double seq_k, double head_dim, bool causal);

class KernelModel {
 public:
  // Compute dtype: GEMMs run at gpu.peak(dtype) (fp8 falls back to bf16 when the GPU has no fp8
  // rate); operands are stored in dtype_bytes(dtype).
  // time_scale > 1 slows every kernel down by that factor (a measured / analytic ratio from
  // calibration; 1 = the model as documented).
  KernelModel(const GpuSpec& gpu, DType dtype, double time_scale = 1.0);

  // One (batched) GEMM.
  Seconds gemm(double m, double n, double k, double batch = 1) const;
  // Achieved fraction of dense peak of that GEMM (for reports and tests).
  double gemm_efficiency(double m, double n, double k, double batch = 1) const;
  // A kernel bound by HBM traffic: bytes read + written.
  Seconds memory(Bytes moved) const;
  // Compute-bound kernel of `flops` at fraction `efficiency` of peak (fused attention).
  Seconds flops(double flops, double efficiency) const;

  double peak_flops() const { return peak_; }          // FLOP/s
  double hbm_bytes_per_s() const { return hbm_; }      // achievable, B/s
  double elem_bytes() const { return elem_; }

 private:
  Seconds gemm_uncached(double m, double n, double k, double batch) const;
  double peak_ = 0, hbm_ = 0, elem_ = 2, tile_rate_ = 1;
  int sms_ = 108;
};

}  // namespace weft
