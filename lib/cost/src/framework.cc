// Training-framework presets of the analytic model (docs/cost-model.md §4.1).
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/cost/analytic.h"

namespace weft {

const std::vector<FrameworkInfo>& frameworks() {
  static const std::vector<FrameworkInfo> all = {
      {"megatron", "Megatron-LM / Megatron-Core: fused kernels, flash attention, overlapped gradient reduction"},
      {"megatron-deepspeed", "Megatron-DeepSpeed: fused softmax attention (no flash), gradients reduced after backward"},
      {"torchtitan", "torchtitan, eager: unfused norm / rotary / SwiGLU operators, SDPA flash, op-level selective"},
      {"torchtitan-compile", "torchtitan with torch.compile: fused elementwise kernels, op-level selective"},
  };
  return all;
}

Result<AnalyticOptions> framework_options(const std::string& name, AnalyticOptions o) {
  o.framework = name;
  if (name == "megatron") {
    o.flash_attention = true;
    o.fused_elementwise = true;
    o.overlap_grad_sync = true;
    o.selective = SelectivePolicy::kAttentionCore;
    o.vocab_parallel_loss = true;
  } else if (name == "megatron-deepspeed") {
    o.flash_attention = false;
    o.fused_elementwise = true;
    o.overlap_grad_sync = false;
    o.selective = SelectivePolicy::kAttentionCore;
    o.vocab_parallel_loss = true;
  } else if (name == "torchtitan" || name == "torchtitan-compile") {
    o.flash_attention = true;
    o.fused_elementwise = name == "torchtitan-compile";
    o.overlap_grad_sync = true;
    o.selective = SelectivePolicy::kAlternateMatmuls;
    o.vocab_parallel_loss = false;
  } else {
    std::string known;
    for (const FrameworkInfo& f : frameworks()) known += std::string(known.empty() ? "" : ", ") + f.name;
    return Error{ErrorKind::kBadInput, "--framework: unknown framework \"" + name + "\" (known: " + known + ")"};
  }
  return o;
}

}  // namespace weft
