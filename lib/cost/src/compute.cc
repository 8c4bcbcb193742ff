#include "weft/cost/compute.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace weft {

namespace {

// Achievable fraction of the HBM peak for streaming kernels: measured copies reach 90.6% and
// read-read-write kernels 91.4% of peak (docs/cost-model.md §2).
constexpr double kHbmEfficiency = 0.90;
// K-loop granularity and fixed cost of one tile in k-steps: a multistage (3-4 stage) cp.async
// pipeline issues its first loads before the first MMA, and the epilogue converts and writes the
// Tm x Tn outputs; together about three 32-wide k-steps (CUTLASS sm80 defaults).
constexpr double kKStep = 32;
constexpr double kKFixed = 96;
// Operand reuse needed to keep the tensor cores busy from L2: A100 does 1024 dense fp16 FMA per
// clock per SM and its L2 delivers 5120 B/clock to 108 SMs (A100 whitepaper), i.e. 23.7 fp16
// elements per clock per SM, so a tile needs Tm*Tn/(Tm+Tn) >= 1024/23.7 = 43.2 FMA per loaded
// element; smaller tiles run at the ratio.
constexpr double kReuseNeeded = 43.2;
// GPU-side cost of one kernel launch on a busy stream (back-to-back kernels), a floor per kernel.
constexpr double kKernelFloorUs = 2.0;

struct Tile {
  double m, n;
};
constexpr Tile kTiles[] = {{256, 128}, {128, 256}, {128, 128}, {128, 64}, {64, 128}, {64, 64}};
constexpr double kSplitK[] = {1, 2, 4, 8, 16};

// Case-insensitive substring test (no allocation: layer() builds a KernelModel per call).
bool has(const std::string& s, const char* part) {
  const size_t n = std::strlen(part);
  for (size_t i = 0; i + n <= s.size(); ++i) {
    size_t j = 0;
    while (j < n && std::tolower(static_cast<unsigned char>(s[i + j])) == part[j]) ++j;
    if (j == n) return true;
  }
  return false;
}

}  // namespace

namespace {
GpuTraits traits_by_name(const GpuSpec& gpu);
}  // namespace

GpuTraits gpu_traits(const GpuSpec& gpu) {
  // Named by the GPU's name alone; read for every KernelModel (one a layer cost): the last few
  // names looked up on this thread are kept.
  thread_local std::vector<std::pair<std::string, GpuTraits>> seen;
  for (const auto& [name, t] : seen)
    if (name == gpu.name) return t;
  if (seen.size() >= 8) seen.erase(seen.begin());
  seen.emplace_back(gpu.name, traits_by_name(gpu));
  return seen.back().second;
}

namespace {

GpuTraits traits_by_name(const GpuSpec& gpu) {
  // SM counts: NVIDIA architecture whitepapers. MAMF: measured bf16 (and fp8) matmul maxima and
  // the shapes they were found at (S. Bekman, "Machine Learning Engineering", compute/accelerator,
  // "Maximum Achievable Matmul FLOPS comparison table").
  const std::string& n = gpu.name;
  GpuTraits t;
  if (has(n, "a100")) {
    t = {108, 0.859, 6912, 16384, 2048, true};     // A100 SXM: 267.9 of 312 TFLOP/s
  } else if (has(n, "gh200")) {
    t = {132, 0.830, 11264, 19712, 1536, true};    // GH200: 821.0 of 989
    t.fp8_fraction = 0.776, t.fp8_m = 1024, t.fp8_n = 14336, t.fp8_k = 14336;  // fp8: 1535.0 of 1979
  } else if (has(n, "h200")) {
    t = {132, 0.801, 6144, 17920, 2816, true};     // the H100 die (bf16 as H100)
    t.fp8_fraction = 0.734, t.fp8_m = 1280, t.fp8_n = 4096, t.fp8_k = 12032;   // fp8: 1453.4 of 1979
    t.fp32_fraction = 0.770, t.fp32_m = t.fp32_n = t.fp32_k = 8192;             // fp32 as H100 (same die)
  } else if (has(n, "h100")) {
    t = {132, 0.801, 6144, 17920, 2816, true};     // H100 SXM: 792.1 of 989
    t.fp8_fraction = 0.709, t.fp8_m = 1024, t.fp8_n = 9216, t.fp8_k = 14336;   // fp8: 1402.6 of 1979
    // fp32: 51.6 of 67 TFLOP/s at 8192^3, sustained (PyTorch 2.11 cuBLAS on an H100 SXM5 80GB;
    // data/reference/h100/torch_kernels.json, gemm_fp32; 49-51 at the GPT-3 1.3B layer's shapes)
    t.fp32_fraction = 0.770, t.fp32_m = t.fp32_n = t.fp32_k = 8192;
  } else if (has(n, "b200")) {
    t = {148, 0.776, 1792, 16128, 3072, true};     // B200 SXM (2 x 74 SMs): 1745.0 of 2250
    t.fp8_fraction = 0.763, t.fp8_m = 15360, t.fp8_n = 4096, t.fp8_k = 3072;   // fp8: 3432.5 of 4500
  } else if (has(n, "v100")) {
    t.sms = 80;
  } else if (has(n, "t4-") || has(n, "tesla t4") || n == "T4" || n == "t4") {
    // T4 (Turing TU104, 40 SMs, 70 W): cuBLAS fp16 at 4096^3 sustains about 24 of its 65 TFLOP/s,
    // the clocks held down by the power cap (NVIDIA developer forum, "About GPU peak performance",
    // forums.developer.nvidia.com/t/264462, measured and explained there by NVIDIA's staff).
    t = {40, 24.0 / 65.0, 4096, 4096, 4096, true};
  }
  t.hopper_or_newer = has(n, "h100") || has(n, "h200") || has(n, "b200");  // gh200 and gb200 included
  return t;
}

}  // namespace

const char* to_string(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::kFlash1: return "flash-attention";
    case AttentionKernel::kTritonFlash: return "flash-attention-triton";
    case AttentionKernel::kFlash2: return "flash-attention-2";
    case AttentionKernel::kCudnn: return "cudnn";
    case AttentionKernel::kFlash3: return "flash-attention-3";
  }
  return "?";
}

namespace {

// Measured attention throughput on H100 SXM5 (989 TFLOP/s bf16 dense), TFLOP/s at sequence
// lengths 512, 1k, 2k, 4k, 8k, 16k with batch x length = 16k tokens and 2048 hidden, head dim 128
// (64 where named): Shah et al. 2024, "FlashAttention-3", Fig. 5 (forward, non-causal and causal)
// and Fig. 6 (backward, non-causal). A causal kernel's rate counts half the work.
struct AttentionCurves {
  double fwd[6], fwd_causal[6], bwd[6], fwd_hd64[6];
};
constexpr double kH100Peak = 989;
constexpr double kCurveSeq[6] = {512, 1024, 2048, 4096, 8192, 16384};
constexpr AttentionCurves kFlash2Curves = {{309, 350, 362, 368, 370, 370},
                                           {191, 260, 298, 319, 333, 335},
                                           {214, 260, 291, 310, 318, 322},
                                           {282, 306, 318, 321, 322, 324}};
constexpr AttentionCurves kCudnnCurves = {{497, 574, 617, 609, 600, 595},
                                          {315, 410, 484, 518, 529, 539},
                                          {305, 408, 465, 499, 518, 516},
                                          {335, 373, 395, 408, 412, 413}};
constexpr AttentionCurves kFlash3Curves = {{467, 565, 625, 638, 646, 648},
                                           {292, 423, 521, 579, 602, 616},
                                           {316, 424, 501, 542, 559, 561},
                                           {333, 392, 460, 476, 496, 497}};
// FlashAttention-2 on A100 (Dao 2023 reports 50-73% of the A100 peak forward, less backward): weft
// takes 60% forward and 50% backward for a causal head-dim-128 kernel at 16k, and the shape of the
// same kernel's curves on H100 (above) for shorter sequences, non-causal masks and head dim 64.
constexpr double kAmpereFlash2Fwd = 0.60;
constexpr double kAmpereFlash2Bwd = 0.50;
// FlashAttention (version 1) against FlashAttention-2: their best A100 throughputs, "up to 124
// TFLOPs/s" and "up to 230 TFLOPs/s" (Tri Dao, FlashAttention-2 release note, 2023-07-17; the
// paper's 25-40 % and 50-73 % of the A100 peak).
constexpr double kFlash1OverFlash2 = 124.0 / 230.0;
// The Triton FlashAttention of flash-attn 1.x against FlashAttention: FlashAttention-2 is "1.7-3.0x
// faster than FlashAttention" and "1.3-2.5x faster than FlashAttention in Triton" (Dao 2023,
// abstract; Figs. 4-5 on A100): the midpoints' ratio, 2.35 / 1.9.
constexpr double kTritonOverFlash1 = 2.35 / 1.9;

// Curve value at `seq` (log-linear between the measured lengths, flat outside them).
double at(const double (&v)[6], double seq) {
  if (seq <= kCurveSeq[0]) return v[0];
  for (int i = 1; i < 6; ++i) {
    if (seq <= kCurveSeq[i]) {
      const double a = std::log2(kCurveSeq[i - 1]), b = std::log2(kCurveSeq[i]);
      const double w = (std::log2(seq) - a) / (b - a);
      return v[i - 1] + w * (v[i] - v[i - 1]);
    }
  }
  return v[5];
}

// TFLOP/s of curves c on H100 at seq_k, head dim 128 x the head-dim factor: the backward of a
// causal kernel is the non-causal backward x the forward's causal / non-causal ratio (the same
// masked tiles are skipped in both passes).
AttentionRates curve_rates(const AttentionCurves& c, double seq, double head_dim, bool causal) {
  const double nc = at(c.fwd, seq), fc = at(c.fwd_causal, seq);
  double hd = 1.0;
  if (head_dim < 128) {
    const double r64 = at(c.fwd_hd64, seq) / nc;
    hd = head_dim <= 64 ? r64 : r64 + (1 - r64) * (head_dim - 64) / 64;
  }
  const double fwd = causal ? fc : nc;
  const double bwd = at(c.bwd, seq) * (causal ? fc / nc : 1.0);
  return {fwd * hd, bwd * hd};
}

}  // namespace

AttentionRates flash_attention_rates(const GpuSpec& gpu, AttentionKernel k, double seq_k, double head_dim, bool causal) {
  if (k == AttentionKernel::kFlash1 || k == AttentionKernel::kTritonFlash) {
    const AttentionRates r = flash_attention_rates(gpu, AttentionKernel::kFlash2, seq_k, head_dim, causal);
    const double f = kFlash1OverFlash2 * (k == AttentionKernel::kTritonFlash ? kTritonOverFlash1 : 1.0);
    return {r.fwd * f, r.bwd * f};
  }
  if (gpu_traits(gpu).hopper_or_newer) {
    const AttentionCurves& c = k == AttentionKernel::kFlash3  ? kFlash3Curves
                               : k == AttentionKernel::kCudnn ? kCudnnCurves
                                                              : kFlash2Curves;
    const AttentionRates r = curve_rates(c, seq_k, head_dim, causal);
    return {r.fwd / kH100Peak, r.bwd / kH100Peak};
  }
  // Ampere and older: FlashAttention-2 whatever the framework asks for.
  const AttentionRates shape = curve_rates(kFlash2Curves, seq_k, head_dim, causal);
  const AttentionRates ref = curve_rates(kFlash2Curves, kCurveSeq[5], 128, true);
  return {kAmpereFlash2Fwd * shape.fwd / ref.fwd, kAmpereFlash2Bwd * shape.bwd / ref.bwd};
}

KernelModel::KernelModel(const GpuSpec& gpu, DType dtype, double time_scale) {
  peak_ = gpu.peak(dtype).value();
  if (peak_ <= 0 && dtype == DType::kFp8) peak_ = gpu.peak(DType::kBf16).value();
  hbm_ = gpu.hbm_gbps * 1e9 * kHbmEfficiency;
  elem_ = dtype_bytes(dtype);
  const GpuTraits t = gpu_traits(gpu);
  sms_ = t.sms;
  tile_rate_ = 1.0;
  // Calibrate: at the MAMF shape the model must achieve the measured fraction of peak (the fp8
  // measurement for fp8 GEMMs where there is one).
  const bool fp8 = dtype == DType::kFp8 && gpu.peak(DType::kFp8).value() > 0 && t.fp8_fraction > 0;
  const bool fp32 = dtype == DType::kFp32 && t.fp32_fraction > 0;
  const double e = fp8    ? gemm_efficiency(t.fp8_m, t.fp8_n, t.fp8_k)
                   : fp32 ? gemm_efficiency(t.fp32_m, t.fp32_n, t.fp32_k)
                          : gemm_efficiency(t.mamf_m, t.mamf_n, t.mamf_k);
  if (e > 0) tile_rate_ = (fp8 ? t.fp8_fraction : fp32 ? t.fp32_fraction : t.mamf_fraction) / e;
  // A sustained fp32 measurement already is the in-training rate: time_scale divides the peak
  // below for the memory-bound kernels too, so the tile rate takes it back for the GEMMs.
  if (fp32 && time_scale > 0) tile_rate_ *= time_scale;
  if (time_scale > 0 && time_scale != 1.0) {
    peak_ /= time_scale;
    hbm_ /= time_scale;
  }
}

namespace {

// The last GEMMs priced on this thread, by their inputs: a search prices the same shapes under
// strategies that differ elsewhere (ZeRO, expert degrees, the other layers' choices), and the tile
// search below was half a MoE search's CPU time under perf. A direct-mapped table: a slot holds the
// last key that hashed to it, whole, so a hit is exact and a collision only prices again.
struct GemmKey {
  double v[9];
  bool operator==(const GemmKey& o) const { return std::memcmp(v, o.v, sizeof v) == 0; }
};
size_t gemm_hash(const GemmKey& k) {
  uint64_t h = 1469598103934665603ull;
  for (double x : k.v) {
    uint64_t b;
    std::memcpy(&b, &x, sizeof b);
    h = (h ^ b) * 1099511628211ull;
    h ^= h >> 29;
  }
  return static_cast<size_t>(h);
}
constexpr size_t kGemmMemoSlots = 1 << 16;
struct GemmSlot {
  GemmKey key{};
  double seconds = -1;  // < 0: empty
};

}  // namespace

Seconds KernelModel::gemm(double m, double n, double k, double batch) const {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0 || peak_ <= 0) return Seconds(0);
  thread_local std::vector<GemmSlot> memo(kGemmMemoSlots);
  const GemmKey key{{m, n, k, batch, peak_, hbm_, elem_, tile_rate_, static_cast<double>(sms_)}};
  GemmSlot& slot = memo[gemm_hash(key) & (kGemmMemoSlots - 1)];
  if (slot.seconds >= 0 && slot.key == key) return Seconds(slot.seconds);
  const Seconds t = gemm_uncached(m, n, k, batch);
  slot.key = key;
  slot.seconds = t.value();
  return t;
}

Seconds KernelModel::gemm_uncached(double m, double n, double k, double batch) const {
  const double per_sm = peak_ / sms_ * tile_rate_;  // FLOP/s of one SM running a full-reuse tile
  double best = 1e300;
  for (const Tile& tile : kTiles) {
    const double reuse = std::min(1.0, tile.m * tile.n / (tile.m + tile.n) / kReuseNeeded);
    const double mn_tiles = std::ceil(m / tile.m) * std::ceil(n / tile.n) * batch;
    for (double sk : kSplitK) {
      if (sk > 1 && (k / sk < 128 || mn_tiles * (sk / 2) >= sms_)) break;
      const double tiles = mn_tiles * sk;
      const double waves = std::ceil(tiles / sms_);
      const double ksteps = std::ceil(k / sk / kKStep) * kKStep + kKFixed;
      const double t_compute = waves * (2.0 * tile.m * tile.n * ksteps) / (per_sm * reuse);
      double bytes = elem_ * batch * (m * k + k * n + m * n);
      if (sk > 1) bytes += 8.0 * sk * m * n * batch;  // fp32 partial sums written and re-read
      const double t_mem = hbm_ > 0 ? bytes / hbm_ : 0;
      best = std::min(best, std::max(t_compute, t_mem));
    }
  }
  return Seconds(std::max(best, kKernelFloorUs * 1e-6));
}

double KernelModel::gemm_efficiency(double m, double n, double k, double batch) const {
  const Seconds t = gemm(m, n, k, batch);
  if (t.value() <= 0) return 0;
  return 2.0 * m * n * k * batch / t.value() / peak_;
}

Seconds KernelModel::memory(Bytes moved) const {
  if (moved.value() <= 0 || hbm_ <= 0) return Seconds(0);
  return Seconds(std::max(moved.value() / hbm_, kKernelFloorUs * 1e-6));
}

Seconds KernelModel::flops(double f, double efficiency) const {
  if (f <= 0 || peak_ <= 0 || efficiency <= 0) return Seconds(0);
  return Seconds(std::max(f / (peak_ * efficiency), kKernelFloorUs * 1e-6));
}

}  // namespace weft
