// The training frameworks (weft/cost/framework.h) and their presets of the analytic model
// (docs/cost-model.md §4.1).
#include "weft/cost/framework.h"

#include <string>

#include "weft/core/enum_names.h"
#include "weft/cost/analytic.h"

namespace weft {

namespace {

constexpr EnumName<Framework> kFrameworkNames[] = {{Framework::kMegatron, "megatron"},
                                                   {Framework::kMegatronDeepSpeed, "megatron-deepspeed"},
                                                   {Framework::kTorchtitan, "torchtitan"},
                                                   {Framework::kTorchtitanCompile, "torchtitan-compile"},
                                                   {Framework::kWeft, "weft"}};

}  // namespace

const char* to_string(Framework f) { return enum_name(kFrameworkNames, f); }

std::string framework_names() { return enum_names_joined(kFrameworkNames, ", "); }

Result<Framework> framework_from_string(const std::string& name) {
  if (const std::optional<Framework> f = enum_value(kFrameworkNames, name)) return *f;
  return Error{ErrorKind::kBadInput,
               "--framework: unknown framework \"" + name + "\" (known: " + framework_names() + ")"};
}

AnalyticOptions framework_options(Framework f, AnalyticOptions o) {
  o.framework = f;
  switch (f) {
    case Framework::kMegatron:
      o.flash_attention = true;
      o.attention_kernel = AttentionKernel::kCudnn;  // Transformer Engine's choice on Hopper
      o.fused_elementwise = true;
      o.overlap_grad_sync = true;
      o.selective = SelectivePolicy::kAttentionCore;
      o.vocab_parallel_loss = true;
      break;
    case Framework::kWeft:
      // weft's runtime on PyTorch 2.x as measured on an H100 (data/reference/h100, docs/cost-model.md
      // §2.3): eager ATen operators in the compute dtype (RMSNorm as x * rsqrt(mean(x^2) + eps) * w,
      // rotate-half rotary), PyTorch's fused attention read in place, which runs at cuDNN
      // attention's rates there; attention-core selective recompute and its own vocab-parallel loss.
      o.flash_attention = true;
      o.attention_kernel = AttentionKernel::kCudnn;
      o.fused_elementwise = false;
      o.eager_fp32_math = false;
      o.eager_attention_copy = false;
      o.dropout = false;
      o.fused_grad_accumulation = false;
      o.sp_regather_inputs = false;
      o.backward_transient = true;
      o.loss_in_fp32 = false;
      o.moe_grouped_gemm = false;
      o.overlap_grad_sync = true;
      o.selective = SelectivePolicy::kAttentionCore;
      o.vocab_parallel_loss = true;
      break;
    case Framework::kMegatronDeepSpeed:
      o.flash_attention = false;
      o.fused_elementwise = true;
      o.overlap_grad_sync = false;
      o.selective = SelectivePolicy::kAttentionCore;
      o.vocab_parallel_loss = true;
      break;
    case Framework::kTorchtitan:
    case Framework::kTorchtitanCompile:
      o.flash_attention = true;
      o.fused_elementwise = f == Framework::kTorchtitanCompile;
      o.overlap_grad_sync = true;
      o.selective = SelectivePolicy::kAlternateMatmuls;
      o.vocab_parallel_loss = false;
      o.attention_kernel = AttentionKernel::kFlash2;  // PyTorch SDPA's flash backend
      break;
  }
  return o;
}

Result<AnalyticOptions> framework_options(const std::string& name, AnalyticOptions base) {
  auto f = framework_from_string(name);
  if (!f.ok()) return f.error();
  return framework_options(*f, std::move(base));
}

}  // namespace weft
