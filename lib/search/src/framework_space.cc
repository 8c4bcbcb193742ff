// What each training framework can run, as search restrictions and as a plan check
// (docs/search.md, "Frameworks").
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "weft/search/search.h"

namespace weft {

namespace {

enum class Fw { kMegatron, kMegatronDeepSpeed, kTorchtitan };

Result<Fw> framework_of(const std::string& fw) {
  if (fw == "megatron") return Fw::kMegatron;
  if (fw == "megatron-deepspeed") return Fw::kMegatronDeepSpeed;
  if (fw == "torchtitan" || fw == "torchtitan-compile") return Fw::kTorchtitan;
  return Error{ErrorKind::kBadInput, "--framework: unknown framework \"" + fw + "\""};
}

// Why framework `f` cannot run strategy s (empty: it can).
std::string refusal(Fw f, const LayerStrategy& s) {
  const auto S = [](int x) { return std::to_string(x); };
  switch (f) {
    case Fw::kMegatron: return "";
    case Fw::kMegatronDeepSpeed:
      if (s.cp > 1) return "cp=" + S(s.cp) + " (no ring context parallelism)";
      if (s.ep > 1) return "ep=" + S(s.ep) + " (DeepSpeed-MoE sets expert parallelism in the model code)";
      if (s.ulysses > 1 && s.sp) return "ulysses=" + S(s.ulysses) + " with sequence parallelism";
      if (s.zero > 1) return "zero=" + S(s.zero) + " (it offers ZeRO 0, 1)";
      return "";
    case Fw::kTorchtitan:
      if (s.ulysses > 1) return "ulysses=" + S(s.ulysses) + " (no Ulysses)";
      if (s.zero < 2 && s.shard_group() > 1) return "zero=" + S(s.zero) + " (it offers ZeRO 2, 3: FSDP2)";
      if (s.tp > 1 && !s.sp) return "tp=" + S(s.tp) + " without sequence parallelism (its TP always shards the sequence)";
      return "";
  }
  return "";
}

// The strategy with ep = 1 on a layer without experts: a uniform plan puts its expert degree on the
// MoE layers only.
LayerStrategy comparable(LayerStrategy s, const LayerShape& shape) {
  if (!shape.moe.enabled()) s.ep = 1;
  return s;
}

}  // namespace

Status restrict_to_framework(SearchOptions& opt, const std::string& fw) {
  auto f = framework_of(fw);
  if (!f.ok()) return f.error();
  opt.layerwise = false;
  // Megatron splits the layers evenly over the stages (its exports allow no other split but a
  // different first or last stage); torchtitan takes any split points.
  if (*f != Fw::kTorchtitan) opt.uneven_stages = false;
  if (*f == Fw::kMegatronDeepSpeed) {
    for (Schedule s : opt.schedules)
      if (s != Schedule::k1F1B)
        return Error{ErrorKind::kBadInput, "--schedule: framework " + fw + " has no " + to_string(s) + " schedule"};
    opt.schedules = {Schedule::k1F1B};
    opt.allow_cp = false;
  }
  if (*f == Fw::kTorchtitan) opt.allow_ulysses = false;
  const Fw which = *f;
  opt.accept = [which](const LayerStrategy& s, const LayerShape*) { return refusal(which, s).empty(); };
  return Status{};
}

Status framework_runs(const Plan& p, const std::string& fw) {
  auto f = framework_of(fw);
  if (!f.ok()) return f.error();
  auto fail = [&](const std::string& what) {
    return Error{ErrorKind::kBadInput, what + ": framework " + fw + " cannot run it"};
  };
  if (*f == Fw::kMegatronDeepSpeed && p.train.pp > 1 && p.train.schedule != Schedule::k1F1B)
    return fail(std::string("schedule ") + to_string(p.train.schedule));
  std::optional<LayerStrategy> first;
  for (int i = 0; i < p.model.num_layers(); ++i) {
    const LayerStrategy s = comparable(p.layer_strategy(i), p.model.layer(i));
    const std::string where = "layer " + std::to_string(i);
    if (const std::string why = refusal(*f, s); !why.empty()) return fail(where + ": " + why);
    if (first && !(s.ep == 1 || first->ep == 1 || s.ep == first->ep)) return fail(where + ": another expert degree");
    LayerStrategy a = s, b = first.value_or(s);
    a.ep = b.ep = 1;
    if (first && !(a == b)) return fail(where + ": a strategy other than layer 0's (one strategy for all layers)");
    if (!first || first->ep == 1) first = s;
  }
  if (const std::string why = refusal(*f, p.embedding); !why.empty()) return fail("embedding: " + why);
  return Status{};
}

}  // namespace weft
