// GEMM and memory-bound kernel model (docs/cost-model.md §2).
#include "weft/cost/compute.h"

#include <gtest/gtest.h>

#include "tiny_specs.h"

namespace weft {
namespace {

GpuSpec a100() { return testing::a100_gpu("A100-SXM4-80GB"); }

TEST(GpuTraits, KnownGpus) {
  EXPECT_EQ(gpu_traits(a100()).sms, 108);
  GpuSpec h;
  h.name = "H100-SXM5-80GB";
  EXPECT_EQ(gpu_traits(h).sms, 132);
  EXPECT_TRUE(gpu_traits(h).measured);
  GpuSpec x;
  x.name = "unknown";
  EXPECT_FALSE(gpu_traits(x).measured);
}

TEST(KernelModel, ReproducesMeasuredMamfAtItsShape) {
  const KernelModel km(a100(), DType::kBf16);
  // 267.9 of 312 TFLOP/s at 6912x16384x2048 (the MAMF table's A100 SXM row)
  EXPECT_NEAR(km.gemm_efficiency(6912, 16384, 2048), 0.859, 1e-9);
}

// fp8 GEMMs calibrate to the fp8 row of the MAMF table where there is one: H100 1402.6 of 1979
// TFLOP/s at 1024x9216x14336 (bf16: 792.1 of 989 at 6144x17920x2816); B200 3432.5 of 4500 at
// 15360x4096x3072 and 1745.0 of 2250 at 1792x16128x3072 in bf16.
TEST(KernelModel, Fp8CalibratesToItsOwnMamf) {
  GpuSpec h;
  h.name = "H100-SXM5-80GB";
  h.tflops_bf16 = 989.5;
  h.tflops_fp8 = 1979;
  h.hbm_gbps = 3350;
  EXPECT_NEAR(KernelModel(h, DType::kFp8).gemm_efficiency(1024, 9216, 14336), 0.709, 1e-9);
  EXPECT_NEAR(KernelModel(h, DType::kBf16).gemm_efficiency(6144, 17920, 2816), 0.801, 1e-9);
  GpuSpec b;
  b.name = "B200-SXM-180GB";
  b.tflops_bf16 = 2250;
  b.tflops_fp8 = 4500;
  b.hbm_gbps = 7700;
  EXPECT_EQ(gpu_traits(b).sms, 148);
  EXPECT_TRUE(gpu_traits(b).measured);
  EXPECT_NEAR(KernelModel(b, DType::kFp8).gemm_efficiency(15360, 4096, 3072), 0.763, 1e-9);
  EXPECT_NEAR(KernelModel(b, DType::kBf16).gemm_efficiency(1792, 16128, 3072), 0.776, 1e-9);
}

TEST(KernelModel, SmallShapesRunBelowPeak) {
  const KernelModel km(a100(), DType::kBf16);
  const double big = km.gemm_efficiency(8192, 8192, 8192);
  const double tp8 = km.gemm_efficiency(1024, 384, 1024);   // h=1024 QKV at tp 8, one sample
  const double tiny_k = km.gemm_efficiency(8192, 8192, 128); // row-parallel GEMM at heavy tp
  EXPECT_GT(big, 0.8);
  EXPECT_LE(big, 1.0);
  EXPECT_LT(tp8, 0.65 * big);
  EXPECT_LT(tiny_k, 0.75 * big);
}

TEST(KernelModel, WaveQuantisation) {
  const KernelModel km(a100(), DType::kBf16);
  // 108 tiles of 128x128 fill the 108 SMs once; one more row of tiles needs another partial wave.
  const double full = km.gemm(128 * 108, 128, 4096).value();
  const double plus = km.gemm(128 * 109, 128, 4096).value();
  EXPECT_GT(plus / full, 1.2);
}

TEST(KernelModel, RooflineFloorForGemv) {
  const KernelModel km(a100(), DType::kBf16);
  const double bytes = 2.0 * (8192 + 8192.0 * 8192 + 8192);
  EXPECT_GE(km.gemm(1, 8192, 8192).value(), bytes / (2039e9 * 0.9) * (1 - 1e-12));
}

TEST(KernelModel, MemoryBoundKernelByHand) {
  const KernelModel km(a100(), DType::kBf16);
  // 1 GB at 90% of 2039 GB/s
  EXPECT_NEAR(km.memory(GB(1)).value(), 1e9 / (2039e9 * 0.9), 1e-12);
  EXPECT_EQ(km.memory(Bytes(0)).value(), 0.0);
}

TEST(KernelModel, Fp8FallsBackWithoutFp8Units) {
  const KernelModel bf(a100(), DType::kBf16), f8(a100(), DType::kFp8);
  EXPECT_DOUBLE_EQ(bf.gemm(4096, 4096, 4096).value(), f8.gemm(4096, 4096, 4096).value());
  GpuSpec h = a100();
  h.name = "H100-SXM5-80GB";
  h.tflops_bf16 = 989.5;
  h.tflops_fp8 = 1979;
  h.hbm_gbps = 3350;
  const KernelModel hb(h, DType::kBf16), h8(h, DType::kFp8);
  EXPECT_LT(h8.gemm(8192, 8192, 8192).value(), 0.6 * hb.gemm(8192, 8192, 8192).value());
}

// Attention rates follow the measured curves (Shah et al. 2024, Figs. 5-6; docs/cost-model.md §2.2).
TEST(FlashAttentionRates, HopperCurvesByHand) {
  GpuSpec h;
  h.name = "H100-SXM5-80GB";
  // FlashAttention-2, causal, head dim 128, 16k: 335 forward; backward 322 x 335 / 370.
  AttentionRates r = flash_attention_rates(h, AttentionKernel::kFlash2, 16384, 128, true);
  EXPECT_NEAR(r.fwd, 335.0 / 989, 1e-12);
  EXPECT_NEAR(r.bwd, 322.0 * 335 / 370 / 989, 1e-12);
  // Beyond the measured lengths the rate holds flat; between them it is log-linear.
  EXPECT_DOUBLE_EQ(flash_attention_rates(h, AttentionKernel::kFlash2, 65536, 128, true).fwd, r.fwd);
  EXPECT_NEAR(flash_attention_rates(h, AttentionKernel::kFlash2, 1448.15, 128, false).fwd,
              (350 + 0.5 * (362 - 350)) / 989.0, 1e-3);
  // cuDNN non-causal at 2k: 617 forward, 465 backward; head dim 64: x 395 / 617.
  r = flash_attention_rates(h, AttentionKernel::kCudnn, 2048, 128, false);
  EXPECT_NEAR(r.fwd, 617.0 / 989, 1e-12);
  EXPECT_NEAR(r.bwd, 465.0 / 989, 1e-12);
  EXPECT_NEAR(flash_attention_rates(h, AttentionKernel::kCudnn, 2048, 64, false).fwd, 395.0 / 989, 1e-12);
  // head dim 96: half way between the two
  EXPECT_NEAR(flash_attention_rates(h, AttentionKernel::kCudnn, 2048, 96, false).fwd, (617.0 + 395) / 2 / 989, 1e-12);
  // FlashAttention-3 is faster than FlashAttention-2 at every length on Hopper.
  for (double s : {512.0, 2048.0, 8192.0, 131072.0}) {
    EXPECT_GT(flash_attention_rates(h, AttentionKernel::kFlash3, s, 128, true).fwd,
              flash_attention_rates(h, AttentionKernel::kFlash2, s, 128, true).fwd);
    EXPECT_GT(flash_attention_rates(h, AttentionKernel::kFlash3, s, 128, true).bwd,
              flash_attention_rates(h, AttentionKernel::kFlash2, s, 128, true).bwd);
  }
}

// Ampere runs FlashAttention-2 whatever is asked: 60 % / 50 % causal at 16k, the H100 curve's
// shape elsewhere (causal 2k forward: 0.60 x 298 / 335).
TEST(FlashAttentionRates, AmpereIsFlashAttention2ScaledToItsPlateau) {
  for (AttentionKernel k : {AttentionKernel::kFlash2, AttentionKernel::kCudnn, AttentionKernel::kFlash3}) {
    const AttentionRates r = flash_attention_rates(a100(), k, 16384, 128, true);
    EXPECT_NEAR(r.fwd, 0.60, 1e-12) << to_string(k);
    EXPECT_NEAR(r.bwd, 0.50, 1e-12) << to_string(k);
    EXPECT_NEAR(flash_attention_rates(a100(), k, 2048, 128, true).fwd, 0.60 * 298 / 335, 1e-12);
  }
}

// FlashAttention (version 1) at FlashAttention-2's rates x 124 / 230 on every GPU.
TEST(FlashAttentionRates, Flash1IsFlash2ScaledByTheirBestA100Rates) {
  GpuSpec h;
  h.name = "H100-SXM5-80GB";
  for (const GpuSpec& g : {a100(), h}) {
    for (double s : {1024.0, 8192.0}) {
      const AttentionRates one = flash_attention_rates(g, AttentionKernel::kFlash1, s, 128, true);
      const AttentionRates two = flash_attention_rates(g, AttentionKernel::kFlash2, s, 128, true);
      EXPECT_NEAR(one.fwd, two.fwd * 124 / 230, 1e-12) << g.name << " " << s;
      EXPECT_NEAR(one.bwd, two.bwd * 124 / 230, 1e-12) << g.name << " " << s;
    }
  }
  EXPECT_STREQ(to_string(AttentionKernel::kFlash1), "flash-attention");
}

}  // namespace
}  // namespace weft
