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

}  // namespace
}  // namespace weft
