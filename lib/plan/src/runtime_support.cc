// What weft's runtime executes (weft/plan/runtime_support.h). The messages are the runtime's own:
// `weft train` prints them when it refuses a plan.
#include "weft/plan/runtime_support.h"

#include "weft/core/format.h"

namespace weft {

std::string runtime_strategy_refusal(const LayerStrategy&) { return {}; }

std::string runtime_sequence_refusal(const LayerStrategy& s, int64_t seq) {
  if (s.cp <= 1) return {};
  if (seq % (2LL * s.cp) != 0)
    return "cp: context parallelism (cp=" + S(s.cp) + ") cuts the sequence into 2*cp = " + S(2 * s.cp) +
           " chunks (two per rank, for causal load balance), which does not divide sequence length " +
           S(static_cast<long long>(seq));
  const long long blocks = static_cast<long long>(s.cp) * s.ulysses * (s.sp ? s.tp : 1);
  if (seq % blocks != 0)
    return "cp: cp*ulysses" + std::string(s.sp ? "*tp (sequence parallel)" : "") + " = " + S(blocks) +
           " sequence blocks do not divide sequence length " + S(static_cast<long long>(seq));
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
    if (sh.moe.enabled() && sh.bias)
      return Error{ErrorKind::kBadInput, where + ": MoE layers with biases (" + S(sh.moe.experts) +
                                             " experts) are not supported by the weft runtime yet (MoE layers without are)"};
    if (sh.mla.enabled())
      return Error{ErrorKind::kBadInput, where + ": multi-head latent attention (kv_lora_rank " +
                                             S(sh.mla.kv_lora_rank) + ") is not supported by the weft runtime yet"};
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
  if (p.train.rounds > 1)
    return Error{ErrorKind::kBadInput, "plan: train.rounds: the weft runtime runs a step's " + S(p.train.micro_batches) +
                                           " micro-batches in one pipeline schedule (train.rounds " + S(p.train.rounds) +
                                           " is not built)"};
  if (p.train.moe_dispatcher != MoeDispatcher::kAllToAll)
    return Error{ErrorKind::kBadInput, std::string("plan: train.moe_dispatcher: the weft runtime dispatches MoE tokens by "
                                                   "all-to-all (") + to_string(p.train.moe_dispatcher) + " is not built)"};
  if (p.train.moe_a2a_overlap)
    return Error{ErrorKind::kBadInput, "plan: train.moe_a2a_overlap: the weft runtime runs each micro-batch's forward and "
                                       "backward apart (the expert all-to-all overlap is not built)"};
  if (p.train.optimizer.precision_aware())
    return Error{ErrorKind::kBadInput, "plan: train.optimizer: the weft runtime keeps AdamW's moments and the "
                                       "gradients in fp32 (Megatron-LM's precision-aware optimizer is not built)"};
  auto refusal = [&](const LayerStrategy& s) {
    std::string why = runtime_strategy_refusal(s);
    return why.empty() ? runtime_sequence_refusal(s, p.train.seq) : why;
  };
  if (const std::string why = refusal(p.embedding); !why.empty())
    return Error{ErrorKind::kBadInput, "plan: embedding." + why};
  for (size_t s = 0; s < p.stages.size(); ++s)
    for (size_t l = 0; l < p.stages[s].layers.size(); ++l) {
      const LayerStrategy& st = p.stages[s].layers[l];
      std::string why = refusal(st);
      // A MoE layer under tp without sequence parallelism routes a tp-th of its replicated sequence
      // block on each tp rank (as Megatron-SP would hold it).
      const LayerShape& sh = p.model.layer(p.stages[s].first_layer + static_cast<int>(l));
      const int64_t block = p.train.seq / (static_cast<int64_t>(st.cp) * st.ulysses);
      if (why.empty() && sh.moe.enabled() && st.tp > 1 && !st.sp && block % st.tp != 0)
        why = "tp: a MoE layer under tp " + S(st.tp) + " without sequence parallelism routes a tp-th of each rank's " +
              S(static_cast<long long>(block)) + " tokens, which tp does not divide";
      // Banded attention and attention sinks run on whole sequences: not through the cp ring.
      if (why.empty() && (sh.window > 0 || sh.sinks) && st.cp > 1)
        why = "cp: " + std::string(sh.sinks ? "attention sinks" : "sliding-window attention (window " + S(sh.window) + ")") +
              " under context parallelism (cp " + S(st.cp) + ") are not supported by the weft runtime yet (cp 1 is)";
      // Query / key norms over all heads (OLMoE) sum their squares over the tp group, which must
      // then hold each key head once.
      if (why.empty() && sh.qk_norm_full && st.tp > 1 && sh.kv_heads % st.tp != 0)
        why = "tp: query / key norms over all heads (qk_norm \"full\") need whole key heads on each tensor-parallel "
              "rank, but tp " + S(st.tp) + " does not divide the " + S(sh.kv_heads) + " key / value heads";
      if (!why.empty())
        return Error{ErrorKind::kBadInput, "plan: stages[" + S(static_cast<long long>(s)) + "].layers[" +
                                               S(static_cast<long long>(l)) + "]." + why};
    }
  return {};
}

}  // namespace weft
