// The training frameworks weft plans for (`--framework`; docs/cost-model.md §4.1 and
// docs/search.md, "Frameworks"): the one list of their names and the one parser. The analytic
// model's traits (framework_options, weft/cost/analytic.h), the search restrictions
// (restrict_to_framework, framework_runs, weft/search/search.h) and the exports
// (weft/report/export.h) all switch on this enum. weft's own runtime (`weft train`) is one of
// them: what `weft plan` assumes when no framework is named.
#pragma once

#include <string>

#include "weft/core/error.h"

namespace weft {

enum class Framework {
  kMegatron,           // "megatron": Megatron-LM / Megatron-Core (the default)
  kMegatronDeepSpeed,  // "megatron-deepspeed"
  kTorchtitan,         // "torchtitan": eager PyTorch with FSDP2
  kTorchtitanCompile,  // "torchtitan-compile": torchtitan with torch.compile
  kWeft,               // "weft": weft's own runtime (`weft train`, docs/runtime.md); costed with
                       // Megatron's traits, searched in what the runtime runs
};

// The framework's name as the command line spells it ("megatron-deepspeed").
const char* to_string(Framework f);

// Every name, in the order above, comma-separated: "megatron, megatron-deepspeed, torchtitan,
// torchtitan-compile, weft".
std::string framework_names();

// The framework named `name`; otherwise kBadInput
// `--framework: unknown framework "jax" (known: megatron, megatron-deepspeed, ...)`.
Result<Framework> framework_from_string(const std::string& name);

}  // namespace weft
