// What weft's runtime executes (weft/plan/runtime_support.h). The messages are the runtime's own:
// `weft train` prints them when it refuses a plan.
#include "weft/plan/runtime_support.h"

#include "weft/core/format.h"

namespace weft {

std::string runtime_strategy_refusal(const LayerStrategy& s) {
  if (s.cp > 1)
    return "cp: context parallelism (cp=" + S(s.cp) +
           ") is not supported by the weft runtime yet; use a plan without it (ulysses is supported)";
  if (s.ep > 1) return "ep: expert parallelism (ep=" + S(s.ep) + ") is not supported by the weft runtime yet";
  return {};
}

Status runtime_runs_model(const ModelSpec& m) {
  if (m.position == PositionKind::kRelative)
    return Error{ErrorKind::kBadInput, "model.position: relative position biases are not supported by the weft "
                                       "runtime (learned and rope are)"};
  for (int i = 0; i < m.num_layers(); ++i) {
    const LayerShape& sh = m.layer(i);
    const std::string where = "model layer " + S(i);
    if (sh.kind != LayerKind::kDecoder)
      return Error{ErrorKind::kBadInput, where + ": " + to_string(sh.kind) +
                                             " layers are not supported by the weft runtime (decoder layers are)"};
    if (sh.moe.enabled())
      return Error{ErrorKind::kBadInput, where + ": MoE layers (" + S(sh.moe.experts) +
                                             " experts) are not supported by the weft runtime yet"};
    if (sh.hidden != m.hidden)
      return Error{ErrorKind::kBadInput, where + ": hidden " + S(sh.hidden) + " differs from the model's hidden " +
                                             S(m.hidden) + "; the runtime needs one width"};
  }
  return {};
}

Status runtime_supports(const Plan& p) {
  Status v = validate(p);
  if (!v.ok()) return v.error().with_context("plan");
  if (Status m = runtime_runs_model(p.model); !m.ok()) return m.error().with_context("plan");
  if (p.train.schedule == Schedule::kZbV)
    return Error{ErrorKind::kBadInput, "plan: train.schedule: zb-v (two model chunks per device group in a V) is not "
                                       "supported by the weft runtime yet; zb-h1 and interleaved are"};
  if (const std::string why = runtime_strategy_refusal(p.embedding); !why.empty())
    return Error{ErrorKind::kBadInput, "plan: embedding." + why};
  for (size_t s = 0; s < p.stages.size(); ++s)
    for (size_t l = 0; l < p.stages[s].layers.size(); ++l)
      if (const std::string why = runtime_strategy_refusal(p.stages[s].layers[l]); !why.empty())
        return Error{ErrorKind::kBadInput, "plan: stages[" + S(static_cast<long long>(s)) + "].layers[" +
                                               S(static_cast<long long>(l)) + "]." + why};
  return {};
}

}  // namespace weft
