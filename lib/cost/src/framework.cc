// Training-framework presets of the analytic model (docs/cost-model.md §4.1).
#include <string>

#include "weft/core/error.h"
#include "weft/cost/analytic.h"

namespace weft {

std::string framework_names() { return "megatron, megatron-deepspeed, torchtitan, torchtitan-compile"; }

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
    return Error{ErrorKind::kBadInput,
                 "--framework: unknown framework \"" + name + "\" (known: " + framework_names() + ")"};
  }
  return o;
}

}  // namespace weft
